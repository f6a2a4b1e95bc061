"""The stack supervisor's pool manager under `switchyard run`'s supervision, asked over the bus as the gateway
asks it: a pool started for a new entry (on the simulated engine) and stopped again, the registry in the bus
following, a clash refused, the default model kept; a pool that exits while starting, restarted by the
supervisor, reported with its log and its entry removed."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from switchyard.cli.stack import Stack
from switchyard.cli.supervise import Backoff
from switchyard.libs.bus import Bus
from switchyard.libs.models.live import open_models
from switchyard.libs.telemetry import setup_tracing
from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME, default_model_path
from switchyard.schemas import ModelCard, PoolReply, PoolStart, PoolStop, subjects


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(
        data_dir=tmp_path / "var",
        services=("inference",),
        supervise=True,
        backoff=Backoff(initial_s=0.2, cap_s=1, reset_after_s=600),
        env={"SWITCHYARD_INFERENCE_ENGINE": "sim"},
    )
    try:
        s.start(timeout_s=180)
        yield s
    finally:
        s.stop()


async def _ask(stack: Stack, subject: str, msg: BaseModel) -> tuple[PoolReply, dict[str, ModelCard]]:
    assert stack.nats_url is not None
    bus = await Bus.connect(stack.nats_url, "test", uuid.uuid4().hex[:6], setup_tracing("test"))
    try:
        reply = await bus.request(subject, msg, PoolReply, timeout=200)
        return reply, await (await open_models(bus)).items()
    finally:
        await bus.close()


def ask(stack: Stack, subject: str, msg: BaseModel) -> tuple[PoolReply, dict[str, ModelCard]]:
    """The supervisor's answer, and the registry's entries right after it."""
    return asyncio.run(_ask(stack, subject, msg))


def start(card: dict[str, Any]) -> PoolStart:
    return PoolStart(card=ModelCard.model_validate(card), timeout_s=150)


def test_a_pool_is_started_for_a_new_entry_and_stopped_when_it_is_removed(stack: Stack) -> None:
    card = {"name": "sim-two", "pool": "simtwo", "engine": "sim", "path": default_model_path()}
    reply, entries = ask(stack, subjects.POOLS_START, start(card))
    assert reply.ok and reply.card is not None and reply.card.name == "sim-two", reply
    assert {b.pool for b in reply.replicas} == {"simtwo"} and entries["simtwo"].name == "sim-two"
    assert "inference-simtwo" in stack.procs and stack.procs["inference-simtwo"].poll() is None
    # The settings' entries are in the bucket too, written at start.
    assert entries["default"].name == DEFAULT_MODEL_NAME

    again, _ = ask(stack, subjects.POOLS_START, start({**card, "pool": "other"}))
    assert not again.ok and again.code == "bad_request" and "already served" in again.message
    assert "inference-other" not in stack.procs

    default, _ = ask(stack, subjects.POOLS_STOP, PoolStop(name=DEFAULT_MODEL_NAME))
    assert not default.ok and "default model" in default.message and stack.procs["inference"].poll() is None

    proc = stack.procs["inference-simtwo"]
    stopped, entries = ask(stack, subjects.POOLS_STOP, PoolStop(name="sim-two"))
    assert stopped.ok and "simtwo" not in entries and "inference-simtwo" not in stack.procs
    assert proc.poll() is not None and stack.restarts["inference-simtwo"] == 0  # stopped, not restarted
    gone, _ = ask(stack, subjects.POOLS_STOP, PoolStop(name="sim-two"))
    assert not gone.ok and gone.code == "not_found"


def test_a_pool_that_exits_while_starting_is_reported_with_its_log(stack: Stack, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "nonesuch"}))
    card = {"name": "broken", "pool": "broken", "engine": "native", "path": str(model)}
    reply, entries = ask(stack, subjects.POOLS_START, start(card))
    assert not reply.ok and reply.code == "unavailable", reply
    assert "exited with code" in reply.message and "the entry was removed" in reply.message
    assert reply.log_tail.strip()
    assert "broken" not in entries and "inference-broken" not in stack.procs
