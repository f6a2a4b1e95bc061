"""Session fixtures: a real nats-server on a free port for every test that needs the bus, and the whole
pipeline (each service its own process, over a real nats-server), started once per session for the
end-to-end and security tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.bus import NatsServer, start_nats_server
from switchyard.libs.bus.embedded import free_port
from tests.engine.test_vllm_venv import vllm_python


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = start_nats_server(store_dir=str(tmp_path_factory.mktemp("nats")))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = Path(tmp_path_factory.mktemp("stack"))
    # The converted model weights outlive the session's data dir, so later sessions start fast.
    cache = Path(__file__).resolve().parents[1] / "var" / "cache" / "engine"
    env = {
        "SWITCHYARD_LOG_LEVEL": os.environ.get("SWITCHYARD_LOG_LEVEL", "INFO"),
        "SWITCHYARD_INFERENCE_CACHE_DIR": str(cache),
        # A vLLM pool added at run time starts without compiling its graphs (minutes on two cores).
        "SWITCHYARD_VLLM_ENFORCE_EAGER": "1",
    }
    # A pool added with engine 'vllm' runs from vLLM's own environment where it is installed.
    vllm = vllm_python()
    interpreters = {"inference:vllm": str(vllm)} if vllm.exists() else {}
    s = Stack(data_dir=data, port=free_port(), env=env, interpreters=interpreters)
    try:
        s.start(timeout_s=600)
    except Exception:
        s.stop()
        for log in sorted((data / "logs").glob("*.log")):
            print(f"---- {log.name}\n{log.read_text()[-3000:]}")
        raise
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url, timeout=120, headers={"Authorization": f"Bearer {stack.api_key}"}) as c:
        yield c
