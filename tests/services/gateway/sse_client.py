"""Parsing server-sent events in tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass
class Event:
    event: str | None
    data: Any
    id: str | None


def parse(text: str) -> list[Event]:
    events = []
    for block in text.split("\n\n"):
        fields: dict[str, list[str]] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields.setdefault(name, []).append(value)
        if "data" not in fields:
            continue
        raw = "\n".join(fields["data"])
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = raw
        events.append(Event(fields.get("event", [None])[0], data, fields.get("id", [None])[0]))
    return events
