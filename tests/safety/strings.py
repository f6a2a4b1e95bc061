"""Every string constant written in the test suite: real-world shapes (credentials, phrases, PII) that the
exactness tests of the guard's pre-filters run over."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


@cache
def string_constants() -> list[str]:
    out = []
    for path in sorted(Path(__file__).parent.parent.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append(node.value)
    return out
