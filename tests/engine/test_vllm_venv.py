"""Runs the real-vLLM tests (test_vllm_engine.py, test_vllm_hf_dir.py) in the vLLM virtualenv, from the
main suite.

vLLM lives in its own environment (`make setup-vllm`); this test starts that environment's pytest on
those files. Without the environment it skips; with SWITCHYARD_TEST_VLLM=1 (CI) it is
required, and a missing environment fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("SWITCHYARD_TEST_VLLM") == "1"


def vllm_python() -> Path:
    venv = os.environ.get("VLLM_VENV") or os.path.join(os.path.expanduser("~"), ".cache", "switchyard", "vllm-venv")
    return Path(venv) / "bin" / "python"


@pytest.mark.timeout(1500)
def test_the_vllm_adapter_passes_against_the_real_vllm():
    python = vllm_python()
    if not python.exists():
        if REQUIRED:
            pytest.fail(f"SWITCHYARD_TEST_VLLM=1 but there is no vLLM environment at {python} (make setup-vllm)")
        pytest.skip(f"no vLLM environment at {python}: `make setup-vllm` (or set VLLM_VENV) to run these")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SWITCHYARD_TEST_VLLM_INNER": "1",
        # The checkpoint written from our GGUF outlives the clone: CI writes it once.
        "SWITCHYARD_TEST_VLLM_CACHE": os.environ.get("SWITCHYARD_TEST_VLLM_CACHE")
        or str(python.parent.parent.parent / "vllm-test-cache"),
    }
    files = ["tests/engine/test_vllm_engine.py", "tests/engine/test_vllm_hf_dir.py"]
    cmd = [str(python), "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "-rs"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1440)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "skipped" not in proc.stdout and "failed" not in proc.stdout, tail
