"""A model registry that mixes engines: the native pool (8,192 tokens) and a vLLM pool (1,024 tokens) of
one model, through the whole stack. The router sends a request to the smallest pool that fits it, so a
short answer goes to the vLLM replica and one that needs more room to the native one.

The vLLM replica is the real inference service run by the vLLM virtualenv's python (`make setup-vllm`);
without that environment this skips, and SWITCHYARD_TEST_VLLM=1 (CI) makes it required."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.bus.embedded import free_port
from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME
from tests.e2e.conftest import chat
from tests.e2e.test_replicas import route_of
from tests.engine.test_vllm_venv import REQUIRED, vllm_python
from tests.wait import WaitTimeout, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[2]
VLLM_POOL, VLLM_CONTEXT, REPLICA = "vllm", 1024, "vllm-a"
REGISTRY = [
    {
        "name": DEFAULT_MODEL_NAME,
        "pools": [
            {"name": "default", "context_length": 8192},
            {"name": VLLM_POOL, "context_length": VLLM_CONTEXT},
        ],
    }
]


@pytest.fixture
def vllm_replica(stack: Stack):
    python = vllm_python()
    if not python.exists():
        if REQUIRED:
            pytest.fail(f"SWITCHYARD_TEST_VLLM=1 but there is no vLLM environment at {python} (make setup-vllm)")
        pytest.skip(f"no vLLM environment at {python}: `make setup-vllm` to run this")
    stack.restart_service("router", {"SWITCHYARD_ROUTER_MODELS": json.dumps(REGISTRY)})
    # The checkpoint written from our GGUF, shared with tests/engine/test_vllm_engine.py's.
    cache = os.environ.get("SWITCHYARD_TEST_VLLM_CACHE") or str(python.parent.parent.parent / "vllm-test-cache")
    env = {
        **stack.service_env,
        "PYTHONPATH": str(ROOT),
        "SWITCHYARD_INFERENCE_ENGINE": "vllm",
        "SWITCHYARD_INFERENCE_POOL": VLLM_POOL,
        "SWITCHYARD_INFERENCE_REPLICA": REPLICA,
        "SWITCHYARD_INFERENCE_MAX_MODEL_LEN": str(VLLM_CONTEXT),
        "SWITCHYARD_INFERENCE_MAX_NUM_SEQS": "8",
        "SWITCHYARD_INFERENCE_CACHE_DIR": cache,
        "SWITCHYARD_INFERENCE_METRICS_PORT": str(free_port()),
        "SWITCHYARD_VLLM_ENFORCE_EAGER": "1",
    }
    log = open(stack.data_dir / "logs" / f"inference-{REPLICA}.log", "ab")  # the child keeps its own copy
    proc = subprocess.Popen(
        [str(python), "-m", "switchyard.services.inference"], env=env, cwd=ROOT, stdout=log, stderr=log
    )
    log.close()
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stack.restart_service("router")


def test_a_registry_mixing_a_native_and_a_vllm_pool(client: httpx.Client, stack: Stack, vllm_replica) -> None:
    chat_id = f"v-{uuid.uuid4().hex[:8]}"
    evs: list[Any] = []
    route: dict[str, Any] = {}

    def routed_to_vllm() -> bool:
        nonlocal evs, route
        evs, resp = chat(client, chat_id, "Name a colour.", max_tokens=16)
        route = route_of(stack, resp.headers["x-request-id"]) if evs and evs[-1].event == "done" else {}
        if route.get("pool") == VLLM_POOL:
            return True
        assert vllm_replica.poll() is None, f"the vLLM replica exited; see {stack.data_dir}/logs"
        return False

    # An eager vLLM load, and the router seeing its heartbeat; at the deadline the assertions below say
    # where it went instead.
    with contextlib.suppress(WaitTimeout):
        wait_until(routed_to_vllm, 420, f"a route to the {VLLM_POOL} pool", 3)
    assert route.get("replica") == REPLICA, (route, evs[-3:])
    assert "".join(e.data.get("text", "") for e in evs if e.event == "delta").strip()
    assert evs[-1].data["completion_tokens"] > 0

    # 1,100 tokens of room do not fit the vLLM pool: the native one takes it.
    evs, resp = chat(client, f"n-{uuid.uuid4().hex[:8]}", "Reply with one word: hello.", max_tokens=1100)
    assert evs and evs[-1].event == "done", evs[-3:]
    route = route_of(stack, resp.headers["x-request-id"])
    assert route["pool"] == "default" and route["replica"] != REPLICA, route
