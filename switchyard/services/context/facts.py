"""Facts a user asks the assistant to keep: "remember that ..." in a message."""

from __future__ import annotations

import re

_REMEMBER = re.compile(r"\bremember\s+that\s+(?P<fact>[^\n]+)", re.IGNORECASE)
MAX_FACT_CHARS = 500


def fact_to_remember(text: str) -> str | None:
    """The fact in "(please) remember that <fact>", up to the end of its sentence; None otherwise."""
    m = _REMEMBER.search(text)
    if m is None:
        return None
    fact = re.split(r"(?<=[.!?])\s", m.group("fact"), maxsplit=1)[0].strip().rstrip(".!?").strip()
    return fact[:MAX_FACT_CHARS] or None
