"""Schemathesis against `/openapi.json`: generated requests for every operation, with a key, must get no
server error and answers true to the document (status, content type, schema)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.services.gateway.harness import Gateway

ST = Path(sys.executable).parent / "st"
ROOT = Path(__file__).resolve().parents[3]
# `no_internal_error` (st_hooks.py) stands in for schemathesis' `not_a_server_error`, which also counts the
# 503s of stages the scripted pipeline does not play.
CHECKS = "no_internal_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@pytest.mark.skipif(not ST.exists() and not shutil.which("st"), reason="schemathesis is in the dev extras")
async def test_every_operation_holds_to_the_document(gw: Gateway, tmp_path: Path) -> None:
    # A subprocess, so this loop keeps serving the gateway while schemathesis sends.
    proc = await asyncio.create_subprocess_exec(
        str(ST if ST.exists() else shutil.which("st")),
        "run",
        f"{gw.url}/openapi.json",
        "--checks",
        CHECKS,
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        "8",
        "--seed",
        "17",
        "--generation-deterministic",
        "--request-timeout",
        "20",
        "--header",
        f"Authorization: Bearer {gw.admin_key}",
        "--report-dir",
        str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(ROOT), "SCHEMATHESIS_HOOKS": "tests.services.gateway.st_hooks"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode()
    assert proc.returncode == 0, text[-8000:]
    selected = re.search(r"Selected: (\d+)/(\d+)", text)
    tested = re.search(r"Tested: (\d+)", text)
    assert selected and tested and int(tested.group(1)) == int(selected.group(2)) > 30, text[-3000:]
