"""The context service over a real nats-server, with the real tokenizer and a SQLite store."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from libs.bus import BusError
from schemas import (
    ChatEvent,
    ConversationQuery,
    ConversationReply,
    ErrorCode,
    MemoryList,
    MemoryQuery,
    Sampling,
    SaveTurn,
    SaveTurnAck,
    Turn,
    Work,
    subjects,
)
from schemas import conversations as csubj
from tests.services.context.harness import Harness


async def test_open_get_and_tenant_isolation(harness: Harness) -> None:
    c = harness.client
    chat = uuid.uuid4().hex
    opened = await c.request(
        subjects.CONVERSATION_OPEN, ConversationQuery(tenant="acme", chat_id=chat), ConversationReply
    )
    assert opened.chat_id == chat and opened.turns == []
    again = await c.request(
        subjects.CONVERSATION_OPEN, ConversationQuery(tenant="acme", chat_id=chat), ConversationReply
    )
    assert again.created_ms == opened.created_ms
    for subject in (subjects.CONVERSATION_OPEN, subjects.CONVERSATION_GET):
        with pytest.raises(BusError) as e:
            await c.request(subject, ConversationQuery(tenant="evil", chat_id=chat), ConversationReply)
        assert e.value.code == ErrorCode.not_found
    with pytest.raises(BusError) as e:
        await c.request(
            subjects.CONVERSATION_GET, ConversationQuery(tenant="acme", chat_id="missing"), ConversationReply
        )
    assert e.value.code == ErrorCode.not_found
    with pytest.raises(BusError) as e:
        await c.request(
            subjects.SAVE_TURN,
            SaveTurn(
                tenant="evil",
                user="m",
                chat_id=chat,
                turn=Turn(id="", rid="x", user_text="a", answer="b", status="complete"),
            ),
            SaveTurnAck,
        )
    assert e.value.code == ErrorCode.not_found
    # Prompt assembly for another tenant's chat fails the request the same way.
    ev = await harness.assemble(
        Work(rid=uuid.uuid4().hex, tenant="evil", user="m", key_id="k", chat_id=chat, text="hi")
    )
    assert isinstance(ev, ChatEvent) and ev.type == "error" and ev.error is not None
    assert ev.error.code == ErrorCode.not_found


async def test_thread_prompts_share_their_prefix(harness: Harness) -> None:
    chat = uuid.uuid4().hex
    answers = ["Hello! I am fine.", "Paris is the capital of France.", "About 2.1 million people."]
    prompts: list[str] = []
    for i, answer in enumerate(answers):
        w = await harness.turn("acme", chat, f"question {i}", answer)
        assert w.history_turns == i and w.trimmed_turns == 0
        assert w.prompt_tokens > 0 and w.prompt_messages[-1].content == f"question {i}"
        prompts.append(w.prompt)
    # With no trim, prompt(N+1) == prompt(N) + answer(N) + <end of turn> + the new user message...
    for n in range(len(answers) - 1):
        assert prompts[n + 1].startswith(prompts[n] + answers[n])
    got = await harness.client.request(
        subjects.CONVERSATION_GET, ConversationQuery(tenant="acme", chat_id=chat), ConversationReply
    )
    assert [t.answer for t in got.turns] == answers
    assert got.title == "Hello! I am fine."


async def test_stopped_turns_stay_and_errors_leave_history(harness: Harness) -> None:
    chat = uuid.uuid4().hex
    c = harness.client
    for rid, status, answer in (("s-" + chat, "stopped", "partial ans"), ("e-" + chat, "error", "")):
        turn = Turn(id="", rid=rid, user_text=f"{status} q", answer=answer, status=status)  # type: ignore[arg-type]
        await c.request(subjects.SAVE_TURN, SaveTurn(tenant="acme", user="alice", chat_id=chat, turn=turn), SaveTurnAck)
    w = await harness.assemble(
        Work(rid=uuid.uuid4().hex, tenant="acme", user="alice", key_id="k", chat_id=chat, text="next")
    )
    assert isinstance(w, Work)
    assert w.history_turns == 1 and "partial ans" in w.prompt and "error q" not in w.prompt


async def test_budget_trims_history(harness: Harness) -> None:
    chat = uuid.uuid4().hex
    c = harness.client
    for i in range(12):
        turn = Turn(
            id="",
            rid=f"{chat}-{i}",
            user_text=f"q{i} " + "alpha " * 60,
            answer=f"a{i} " + "beta " * 60,
            status="complete",
        )
        await c.request(subjects.SAVE_TURN, SaveTurn(tenant="acme", user="alice", chat_id=chat, turn=turn), SaveTurnAck)
    work = Work(
        rid=uuid.uuid4().hex,
        tenant="acme",
        user="alice",
        key_id="k",
        chat_id=chat,
        text="last",
        sampling=Sampling(max_tokens=1024),
    )
    w = await harness.assemble(work)
    assert isinstance(w, Work)
    assert w.trimmed_turns > 0 and w.history_turns + w.trimmed_turns == 12
    assert w.prompt_tokens + 1024 <= 2048
    # Too long even with no history: a clear error, not a truncated message.
    huge = work.model_copy(update={"rid": uuid.uuid4().hex, "text": "word " * 3000})
    ev = await harness.assemble(huge)
    assert isinstance(ev, ChatEvent) and ev.error is not None and ev.error.code == ErrorCode.payload_too_large


async def test_client_messages_without_chat(harness: Harness) -> None:
    from schemas import ChatMessage

    w = await harness.assemble(
        Work(
            rid=uuid.uuid4().hex,
            tenant="acme",
            user="alice",
            key_id="k",
            api="openai",
            text="and now?",
            system="You are terse.",
            messages=[ChatMessage(role="user", content="hi"), ChatMessage(role="assistant", content="hello")],
        )
    )
    assert isinstance(w, Work)
    assert [m.role for m in w.prompt_messages] == ["system", "user", "assistant", "user"]
    assert w.prompt_messages[0].content == "You are terse." and w.history_turns == 1


async def test_remember_that_saves_a_fact_for_later_prompts(harness: Harness) -> None:
    chat = uuid.uuid4().hex
    user = "rem-" + chat[:6]
    await harness.turn("acme", chat, "Please remember that my cat is called Miso.", "Noted!", user=user)
    items = await harness.client.request(csubj.MEMORY_LIST, MemoryQuery(tenant="acme", user=user), MemoryList)
    assert [m.text for m in items.items] == ["my cat is called Miso"]
    w = await harness.assemble(
        Work(rid=uuid.uuid4().hex, tenant="acme", user=user, key_id="k", text="What is my cat's name?")
    )
    assert isinstance(w, Work) and "my cat is called Miso" in w.prompt_messages[0].content
    # Another tenant's user of the same name knows nothing of it.
    other = await harness.client.request(csubj.MEMORY_LIST, MemoryQuery(tenant="evil", user=user), MemoryList)
    assert other.items == []


async def test_stage_record_carries_the_decision(harness: Harness) -> None:
    from schemas import StageRecord

    rid = uuid.uuid4().hex
    w = await harness.assemble(Work(rid=rid, tenant="acme", user="alice", key_id="k", chat_id=rid, text="hello there"))
    assert isinstance(w, Work)
    record: StageRecord | None = None
    for _ in range(50):
        msg = await harness.client.js.get_last_msg(subjects.LOG_STREAM, subjects.log_stage("context"))
        record = StageRecord.model_validate_json(msg.data or b"{}")
        if record.rid == rid:
            break
        await asyncio.sleep(0.05)
    assert record is not None and record.rid == rid and record.status == "ok"
    d = record.decision
    assert (d["history_turns"], d["trimmed_turns"], d["prompt_tokens"]) == (0, 0, w.prompt_tokens)
    assert d["record"] == {"prompt": w.prompt, "chat_id": rid}
