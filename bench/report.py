"""Writing a benchmark's markdown section into docs/benchmarks.md between its own markers."""

from __future__ import annotations

import os
import platform

# Widest vector extension first: the figures differ several-fold between these CPU classes.
_ISA = ("amx_tile", "avx512_bf16", "avx512f", "avx2")


def cpu_info() -> tuple[str, frozenset[str]]:
    """The CPU's model name and feature flags from ``/proc/cpuinfo`` (empty flags elsewhere)."""
    model, flags = platform.processor() or "cpu", frozenset[str]()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = frozenset(value.split())
                    break
    except OSError:
        pass
    return model, flags


def machine() -> str:
    """``x86_64, AMD EPYC (avx2), 2 cores``: enough to tell which CPU class a figure is from."""
    model, flags = cpu_info()
    isa = next((f for f in _ISA if f in flags), "")
    return f"{platform.machine()}, {model}{f' ({isa})' if isa else ''}, {os.cpu_count()} cores"


def write_section(out: str, begin: str, end: str, section: str, under: str | None = None) -> None:
    """Replace the text between `begin` and `end` (markers included in `section`); else put it at the
    end of the page's part whose `## ` heading starts with `under` (up to the next `## `), or append."""
    old = open(out).read() if os.path.exists(out) else "# Benchmarks\n\n"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + section + rest.split(end, 1)[1].lstrip("\n")
    elif under is not None and ("\n" + under) in old:
        at = old.index("\n" + under) + 1
        nxt = old.find("\n## ", at)
        part, tail = (old[:nxt], old[nxt + 1 :]) if nxt >= 0 else (old, "")
        new = part.rstrip("\n") + "\n\n" + section + ("\n" + tail if tail else "")
    else:
        new = old.rstrip("\n") + "\n\n" + section
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as fh:
        fh.write(new)
