"""Input safety reads a bounded amount of any request: the classifier a window of each of the newest
messages, the rules every word; and a big request's pieces share passes with everyone else's."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from switchyard.libs.bus import Bus, BusError, NatsServer
from switchyard.libs.safety import InputGuard
from switchyard.libs.safety.batcher import ScoreBatcher
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import ChatMessage, ErrorCode, Work
from switchyard.services.safety_in.service import SafetyIn

LINE = "the quick brown fox jumps over the lazy dog " * 700  # about 31,000 characters, no sentence end


def work(text: str, messages: list[ChatMessage]) -> Work:
    return Work(rid=uuid.uuid4().hex, tenant="t", user="u", key_id="k", text=text, messages=messages)


@pytest.fixture(scope="module")
async def stage(nats_server: NatsServer) -> SafetyIn:
    bus = await Bus.connect(nats_server.url, "safety_in", "budget", setup_tracing("safety_in"))
    guard = InputGuard()
    batcher = ScoreBatcher(guard.classifier, max_texts=16, threads=1, max_chunks=4)
    return SafetyIn(bus, guard, batcher, max_scored=6)


async def test_the_classifier_reads_a_window_of_the_newest_messages(stage: SafetyIn) -> None:
    assert stage.batcher is not None
    before = stage.batcher.done_texts
    big = work("Please summarise all of that.", [ChatMessage(role="user", content=f"{i} {LINE}") for i in range(30)])
    decision = await stage.check(big)
    assert decision.action in ("allow", "flag")
    # Six messages scored (the new one, one piece; five of the history, four pieces each), not thirty whole.
    assert stage.batcher.done_texts - before == 1 + 5 * 4


async def test_the_rules_still_read_every_message_whole(stage: SafetyIn) -> None:
    # An exact rule match (a private key) in the middle of the oldest message, past every classifier window.
    secret = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----"
    history = [ChatMessage(role="user", content=f"{LINE} {secret} {LINE}")]
    history += [ChatMessage(role="user", content=f"{i} hello") for i in range(30)]
    with pytest.raises(BusError) as e:
        await stage.check(work("What do you make of these?", history))
    assert e.value.code == ErrorCode.policy_violation and "secrets" in e.value.message


async def test_a_small_request_is_not_held_by_a_big_one(stage: SafetyIn) -> None:
    assert stage.batcher is not None
    many = [ChatMessage(role="user", content=f"{i} {LINE}") for i in range(30)]
    big = asyncio.create_task(stage.check(work("Summarise.", many)))
    await asyncio.sleep(0)
    passes = stage.batcher.passes
    await stage.check(work("What is the capital of Australia?", []))
    # The small one was served in at most the pass running when it came and the next.
    assert stage.batcher.passes - passes <= 2
    await big
