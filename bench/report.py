"""Writing a benchmark's markdown section into docs/benchmarks.md between its own markers."""

from __future__ import annotations

import os


def write_section(out: str, begin: str, end: str, section: str) -> None:
    """Replace the text between `begin` and `end` (markers included in `section`), or append."""
    old = open(out).read() if os.path.exists(out) else "# Benchmarks\n\n"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + section + rest.split(end, 1)[1].lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + section
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as fh:
        fh.write(new)
