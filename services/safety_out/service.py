"""The streaming handshake and checker.

Inference asks `pipeline.safety_out` for a checker; this replica subscribes to `stream.raw.<rid>` and
only then answers, so no delta is lost. Text reaches the client through a hold-back window; the
turn is saved before `done` is sent, so a reload right after `done` shows the whole thread.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from libs.bus import Bus, BusError, current_context
from libs.bus.headers import now_ms
from libs.safety import InputGuard, StreamGuard
from schemas import (
    CancelNotice,
    ChatEvent,
    ErrorCode,
    ErrorInfo,
    RawChunk,
    SaveTurn,
    SaveTurnAck,
    StageRecord,
    StreamOpen,
    StreamOpenAck,
    Turn,
    Usage,
    Work,
    subjects,
)
from services.safety_out.settings import SafetyOutSettings

log = structlog.get_logger()


@dataclass
class Stream:
    """One checked stream; owned by the subscription that feeds it."""

    work: Work
    guard: StreamGuard
    thinking: StreamGuard
    started_ms: int
    t0: float
    next_seq: int = 0
    closed: bool = False
    thinking_done: bool = False
    redactions: list[dict[str, Any]] = field(default_factory=list)
    sub: Any = None
    watchdog: asyncio.Task[None] | None = None


class SafetyOut:
    def __init__(self, bus: Bus, settings: SafetyOutSettings, classifier: InputGuard | None):
        self.bus = bus
        self.settings = settings
        # Shared by every stream: with embeddings, each finished sentence is classified before release.
        self.classifier = classifier

    async def open(self, req: StreamOpen) -> StreamOpenAck:
        work = req.work
        st = Stream(
            work=work,
            guard=StreamGuard(holdback_chars=self.settings.holdback_chars, guard=self.classifier),
            thinking=StreamGuard(holdback_chars=self.settings.holdback_chars, guard=self.classifier),
            started_ms=now_ms(),
            t0=time.perf_counter(),
        )

        async def on_chunk(chunk: RawChunk) -> None:
            await self.on_chunk(st, chunk)

        st.sub = await self.bus.subscribe(subjects.stream_raw(work.rid), RawChunk, on_chunk, ordered=True, span=False)
        # The answer must not overtake the subscription: make the server register it first.
        await self.bus.flush()
        deadline = current_context().deadline_ms
        timeout = (deadline - now_ms()) / 1000 if deadline else self.settings.default_stream_timeout_s
        st.watchdog = asyncio.create_task(self._expire(st, max(timeout, 0.1)))
        return StreamOpenAck(rid=work.rid, replica=self.bus.replica)

    async def _expire(self, st: Stream, after_s: float) -> None:
        await asyncio.sleep(after_s)
        if not st.closed:
            await self.bus.publish(subjects.chat_cancel(st.work.rid), CancelNotice(rid=st.work.rid, reason="deadline"))
            err = ErrorInfo.of(ErrorCode.deadline_exceeded, "the answer did not finish before the request deadline")
            await self._finish(st, "error", Usage(prompt_tokens=st.work.prompt_tokens), "error", err)

    async def _release(self, st: Stream, text: str, kind: str = "delta") -> None:
        if text:
            await self.bus.emit(ChatEvent(rid=st.work.rid, type=kind, text=text))  # type: ignore[arg-type]

    async def _flush_thinking(self, st: Stream) -> None:
        if st.thinking.full_text and not st.thinking_done:
            st.thinking_done = True
            rel = await asyncio.to_thread(st.thinking.finish)
            st.redactions += [r.__dict__ for r in rel.redactions]
            await self._release(st, rel.text, "thinking")

    async def on_chunk(self, st: Stream, chunk: RawChunk) -> None:
        if st.closed:
            return
        if chunk.seq != st.next_seq:
            log.warning("raw stream gap", expected=st.next_seq, got=chunk.seq)
        st.next_seq = chunk.seq + 1
        if chunk.kind == "thinking":
            # Thinking is shown to the user too, so it passes the same redaction, on its own window.
            trel = await asyncio.to_thread(st.thinking.feed, chunk.text)
            st.redactions += [r.__dict__ for r in trel.redactions]
            await self._release(st, trel.text, "thinking")
            if not chunk.finished:
                return
        else:
            await self._flush_thinking(st)
        # Off the event loop: a finished sentence may go through the embedding classifier.
        rel = await asyncio.to_thread(st.guard.feed, chunk.text) if chunk.text and chunk.kind == "delta" else None
        if rel is not None:
            st.redactions += [r.__dict__ for r in rel.redactions]
            await self._release(st, rel.text)
            if rel.blocked is not None:
                # Stop the model too: nothing keeps decoding an answer nobody will see.
                await self.bus.publish(
                    subjects.chat_cancel(st.work.rid), CancelNotice(rid=st.work.rid, reason="blocked")
                )
                err = ErrorInfo.of(
                    ErrorCode.content_blocked, f"answer stopped by output safety ({rel.blocked.category})"
                )
                await self._finish(
                    st,
                    "error",
                    chunk.usage or Usage(prompt_tokens=st.work.prompt_tokens),
                    "blocked",
                    err,
                    blocked=rel.blocked.category,
                )
                return
        if not chunk.finished:
            return
        await self._flush_thinking(st)
        rel = await asyncio.to_thread(st.guard.finish)
        st.redactions += [r.__dict__ for r in rel.redactions]
        await self._release(st, rel.text)
        usage = chunk.usage or Usage(prompt_tokens=st.work.prompt_tokens)
        if chunk.error is not None:
            await self._finish(st, "error", usage, "error", chunk.error)
        elif chunk.finish_reason == "cancelled":
            await self._finish(st, "stopped", usage, "cancelled", None)
        else:
            await self._finish(st, "complete", usage, chunk.finish_reason or "stop", None)

    async def _finish(
        self, st: Stream, status: str, usage: Usage, finish: str, error: ErrorInfo | None, blocked: str | None = None
    ) -> None:
        if st.closed:
            return
        st.closed = True
        if st.watchdog is not None and st.watchdog is not asyncio.current_task():
            st.watchdog.cancel()
        work = st.work
        final = [v.__dict__ for v in await asyncio.to_thread(st.guard.final_check)]
        if work.persist and work.chat_id:
            turn = Turn(
                id=uuid.uuid4().hex,
                rid=work.rid,
                user_text=work.text,
                answer=st.guard.released_text,
                status=status,
                usage=usage,
                model=work.route.model if work.route else None,  # type: ignore[arg-type]
                created_ms=now_ms(),
                tools=work.tools,
                tool_prompt=work.tool_prompt,
                thinking=st.thinking.released_text,
            )
            try:
                await self.bus.request(
                    subjects.SAVE_TURN,
                    SaveTurn(tenant=work.tenant, user=work.user, chat_id=work.chat_id, turn=turn),
                    SaveTurnAck,
                )
            except BusError as e:
                log.error("turn not saved", error=e.message)
                error = error or ErrorInfo.of(ErrorCode.unavailable, f"the answer could not be saved: {e.message}")
                status = "error"
        if error is not None:
            await self.bus.emit(ChatEvent(rid=work.rid, type="error", error=error, usage=usage))
        else:
            await self.bus.emit(
                ChatEvent(
                    rid=work.rid,
                    type="done",
                    usage=usage,
                    finish_reason=finish,  # type: ignore[arg-type]
                    model=work.route.model if work.route else None,
                )
            )
        await self.bus.log_stage(
            StageRecord(
                rid=work.rid,
                stage="safety_out",
                tenant=work.tenant,
                started_ms=st.started_ms,
                duration_ms=(time.perf_counter() - st.t0) * 1000,
                status="error" if error else "ok",
                error=error,
                decision={
                    "redactions": len(st.redactions),
                    "blocked": blocked,
                    "record": {
                        "status": status,
                        "finish_reason": finish,
                        "output": st.guard.full_text,
                        "released": st.guard.released_text,
                        "thinking": st.thinking.full_text,
                        "usage": usage.model_dump(),
                        "model": work.route.model if work.route else None,
                        "mode": work.route.mode if work.route else None,
                        "safety_out": {"redactions": st.redactions, "final_check": final, "blocked": blocked},
                    },
                },
            )
        )
        await self.bus.unsubscribe(st.sub)


async def setup(bus: Bus, settings: SafetyOutSettings) -> Callable[[], Awaitable[None]] | None:
    classifier = None
    if settings.use_embeddings:
        classifier = await asyncio.to_thread(InputGuard, use_embeddings=True)
        await asyncio.to_thread(classifier.check, "warm up", source="model")
    await bus.subscribe(subjects.SAFETY_OUT, StreamOpen, SafetyOut(bus, settings, classifier).open, queue="safety_out")
    return None
