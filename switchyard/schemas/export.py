"""Export JSON Schema files for every wire model: `python -m switchyard.schemas.export [--check]`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from switchyard import schemas

OUT = Path(__file__).parent / "json"


def rendered() -> dict[str, str]:
    files: dict[str, str] = {}
    for name in schemas.__all__:
        obj = getattr(schemas, name)
        if isinstance(obj, type) and issubclass(obj, BaseModel):
            files[f"{name}.json"] = json.dumps(obj.model_json_schema(), indent=2, sort_keys=True) + "\n"
    return files


def main(argv: list[str]) -> int:
    files = rendered()
    if "--check" in argv:
        stale = [n for n, text in files.items() if not (OUT / n).exists() or (OUT / n).read_text() != text]
        extra = [p.name for p in OUT.glob("*.json") if p.name not in files]
        if stale or extra:
            print("stale JSON Schema export:", ", ".join(stale + extra), "- run `python -m switchyard.schemas.export`")
            return 1
        return 0
    OUT.mkdir(exist_ok=True)
    for p in OUT.glob("*.json"):
        if p.name not in files:
            p.unlink()
    for n, text in files.items():
        (OUT / n).write_text(text)
    print(f"wrote {len(files)} schemas to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
