"""A small SSE reader for the tests: (event, data) pairs from an httpx streaming response."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Event:
    event: str
    data: Any
    id: str | None = None


def events(resp: httpx.Response) -> Iterator[Event]:
    name, data, eid = "message", [], None
    for line in resp.iter_lines():
        if line == "":
            if data:
                raw = "\n".join(data)
                try:
                    payload: Any = json.loads(raw)
                except json.JSONDecodeError:
                    payload = raw
                yield Event(name, payload, eid)
            name, data, eid = "message", [], None
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line.startswith("id:"):
            eid = line[3:].strip()
