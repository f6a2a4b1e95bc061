"""The streaming handshake and checker.

Inference asks `pipeline.safety_out` for a checker; this replica takes the stream and only then answers
with its replica id, which addresses the step messages inference sends it (`stream.steps.<this>.<producer>`,
one per engine step for all of this replica's streams of that producer). One subscription reads them all
and hands each stream its frames in one pass; each stream's own task (made at the handshake, in the
request's context) handles them in order. Each delta goes out as soon as redaction allows (a word of
look-behind, see `StreamGuard`); finished sentences are judged off the token path by a classifier
pass shared with every other stream of this replica, and a block stops the stream where it is.
Under the tenant's `judged` policy a sentence is shown only once judged. What is shown goes to the
gateway replica relaying the request (`Work.relay`) as one message per pass for all of its streams
(`chat.steps.<gateway>.<this>`), each stream's end after its text, and to `chat.events.<rid>.kept` for
resuming (one message per stream per `kept_interval_s`, its end after its text). The turn is saved
before `done` is sent, so a reload right after `done` shows the whole thread.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from switchyard.libs.bus import Bus, BusError, Liveness, current_context
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.bus.outbox import IntervalOutbox, Outbox
from switchyard.libs.bus.retry import request_until
from switchyard.libs.safety import InputGuard, StreamGuard
from switchyard.libs.safety.batcher import ScoreBatcher
from switchyard.libs.safety.guard import calibrated_guard
from switchyard.libs.safety.stream import Release, Sentence
from switchyard.libs.safety.tenant import TenantGuards
from switchyard.schemas import (
    CancelNotice,
    ChatEvent,
    ErrorCode,
    ErrorInfo,
    InputDecision,
    RawChunk,
    SafetyOutcome,
    SafetyOutPart,
    SaveTurn,
    SaveTurnAck,
    StageRecord,
    StreamOpen,
    StreamOpenAck,
    TokenLogprob,
    Turn,
    Usage,
    Work,
    subjects,
)
from switchyard.schemas.frames import StepFrame, TextKind, decode_step, encode_chat_frame, encode_text
from switchyard.services.safety_out.settings import SafetyOutSettings

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
    # Set by a client's Stop: the saved answer is cut to what the gateway had relayed.
    delivered_chars: int | None = None
    redactions: list[dict[str, Any]] = field(default_factory=list)
    judging: set[asyncio.Task[None]] = field(default_factory=set)
    # Nothing is shown before input safety admitted the request; what the model wrote meanwhile waits here.
    admitted: bool = False
    held: list[tuple[TextKind, str, list[dict[str, Any]] | None]] = field(default_factory=list)
    admission: asyncio.Task[None] | None = None
    # Releases and the end go out in the order the guard produced them, whichever task produced them.
    emit_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # What the step messages brought for this stream and its task has not handled yet, in order.
    inbox: list[StepFrame | RawChunk] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    reader: asyncio.Task[None] | None = None
    busy: bool = False  # the stream's task is handling frames
    # Every release of this stream goes out without waiting (relayed, the kept copy coalesced): a frame that
    # finds its stream idle is handled where the step message is read, with no task switch (`_text_now`).
    at_once: bool = False
    stopping: bool = False  # a release blocked it: it ends in a task of its own, its frames go through its task
    # Built once: every released word goes to `events_subject` (chat.events.<rid>.kept, kept for resuming,
    # or .direct when the request names no relaying gateway) and, when it does, in this replica's next
    # message to it on `steps_subject` (chat.steps.<gateway>.<this>).
    events_subject: str = ""
    steps_subject: str = ""
    watchdog: asyncio.Task[None] | None = None
    # Log probabilities go out with their own text: each answer frame's (characters, entries) in order,
    # and released text held until it covers whole frames. Off when not asked for, and from the first
    # redaction on (the entries would spell what was redacted).
    lp_on: bool = False
    lp_frames: deque[tuple[int, list[dict[str, Any]]]] = field(default_factory=deque)
    lp_pending: str = ""

    @property
    def answer(self) -> str:
        """What the client was sent (cut to what it had received when it stopped)."""
        text = self.guard.released_text
        return text if self.delivered_chars is None else text[: self.delivered_chars]


class SafetyOut:
    def __init__(self, bus: Bus, settings: SafetyOutSettings, guards: TenantGuards, batcher: ScoreBatcher | None):
        self.bus = bus
        self.settings = settings
        self.guards = guards
        # One classifier pass for the sentences of every stream that are waiting (None: rules only).
        self.batcher = batcher
        self.streams: dict[str, Stream] = {}
        # The relaying gateways' text: one message per pass for each (switchyard/libs/bus/outbox.py).
        self.outbox = Outbox(bus)
        # The kept copy of that text, each stream's of a short interval as one message (resuming reads it).
        self.kept = IntervalOutbox(bus, settings.kept_interval_s)
        # The inference replica feeding a stream that went quiet is asked whether it still lives.
        self.liveness = Liveness(
            bus,
            self._producer_lost,
            idle_s=settings.producer_idle_s,
            period_s=settings.producer_check_period_s,
            probe_s=settings.producer_probe_s,
        )

    def _guard(self, work: Work, guard: InputGuard) -> StreamGuard:
        return StreamGuard(
            holdback_chars=self.settings.holdback_chars,
            guard=guard,
            release=work.safety.answer_release,
            judge_inline=False,
            question=work.text if self.settings.judge_with_question else "",
        )

    async def open(self, req: StreamOpen) -> StreamOpenAck:
        work = req.work
        guard = self.guards.for_tenant(work.safety)
        st = Stream(
            work=work,
            guard=self._guard(work, guard),
            thinking=self._guard(work, guard),
            started_ms=now_ms(),
            t0=time.perf_counter(),
            events_subject=subjects.chat_events_kept(work.rid) if work.relay else subjects.chat_events(work.rid),
            steps_subject=subjects.chat_steps(work.relay, self.bus.replica) if work.relay else "",
            lp_on=work.sampling.logprobs is not None,
            at_once=bool(work.relay) and self.settings.kept_interval_s > 0,
        )

        self.streams[work.rid] = st
        if req.producer:
            self.liveness.watch(work.rid).took("inference", req.producer)
        # Frames carry no headers: the stream's task is made here, so it keeps this request's context
        # (rid, tenant, deadline, trace) for everything the stream sends or records.
        with self.bus.bound(replace(current_context(), reply="")):
            st.reader = asyncio.create_task(self._read(st))
        deadline = current_context().deadline_ms
        timeout = (deadline - now_ms()) / 1000 if deadline else self.settings.default_stream_timeout_s
        st.watchdog = asyncio.create_task(self._expire(st, max(timeout, 0.1)))
        await self.bus.hold(work.rid)
        if work.input_checked:
            st.admitted = True
        else:
            # Judged while the model prefills, instead of before it starts.
            st.admission = asyncio.create_task(self._admit(st))
        return StreamOpenAck(rid=work.rid, replica=self.bus.replica)

    async def _admit(self, st: Stream) -> None:
        work = st.work
        try:
            verdict = await self.bus.request(
                subjects.SAFETY_IN, work, InputDecision, timeout=self.settings.input_check_timeout_s
            )
        except BusError as e:
            async with st.emit_lock:
                if st.closed:
                    return
                reason = "blocked_input" if e.code == ErrorCode.policy_violation else "input_check_failed"
                await self.bus.publish(subjects.chat_cancel(work.rid), CancelNotice(rid=work.rid, reason=reason))
                # Nothing was shown and the message is refused: no turn is kept, as if the model never ran.
                await self._finish(st, "error", Usage(prompt_tokens=work.prompt_tokens), "error", e.info(), save=False)
            return
        async with st.emit_lock:
            work.verdicts += verdict.verdicts
            st.admitted = True
            for kind, text, lps in st.held:
                if not st.closed:
                    await self._relay(st, kind, text, lps)
            st.held.clear()

    async def _show(self, st: Stream, kind: TextKind, text: str, lps: list[dict[str, Any]] | None = None) -> None:
        if st.at_once or not st.admitted:
            self._show_now(st, kind, text, lps)
        else:
            await self._relay(st, kind, text, lps)

    def _show_now(self, st: Stream, kind: TextKind, text: str, lps: list[dict[str, Any]] | None = None) -> None:
        """`_show` of a stream whose text goes out without waiting (`at_once`), or is held until admitted."""
        if not st.admitted:
            st.held.append((kind, text, lps))
            return
        self.outbox.add(st.steps_subject, encode_chat_frame(st.work.rid, kind, text, lps))
        self.kept.add(st.events_subject, encode_text(kind, text, lps))

    async def _relay(self, st: Stream, kind: TextKind, text: str, lps: list[dict[str, Any]] | None) -> None:
        if st.at_once:
            self._show_now(st, kind, text, lps)
            return
        await self.bus.publish_frame(st.events_subject, encode_text(kind, text, lps))
        if st.steps_subject:
            self.outbox.add(st.steps_subject, encode_chat_frame(st.work.rid, kind, text, lps))

    async def _end_event(self, st: Stream, event: ChatEvent) -> None:
        """The stream's `done` or `error`: to the relaying gateway after the stream's last text, and kept."""
        if not st.steps_subject:
            await self.bus.emit(event)
            return
        await self.kept.flush(st.events_subject)
        await self.bus.publish(st.events_subject, event, rid=event.rid)
        await self.outbox.end(st.steps_subject, event)

    @staticmethod
    def _with_logprobs(st: Stream, rel: Release) -> tuple[str, list[dict[str, Any]] | None]:
        """The released answer text that covers whole frames, with those frames' log probabilities; the
        rest waits for the next release. A redaction (or a block) ends this: all of it goes out bare."""
        pending = st.lp_pending + rel.text
        if rel.redactions or rel.blocked is not None:
            st.lp_on, st.lp_pending = False, ""
            return pending, None
        used, lps = 0, []
        while st.lp_frames and used + st.lp_frames[0][0] <= len(pending):
            n, entries = st.lp_frames.popleft()
            used += n
            lps += entries
        st.lp_pending = pending[used:]
        return pending[:used], lps

    def _frame_logprobs(self, st: Stream, text: str, lps: list[dict[str, Any]] | None) -> None:
        if st.lp_on:
            st.lp_frames.append((len(text), lps or []))

    async def _producer_lost(self, rid: str, stage: str, replica: str, why: str) -> None:
        st = self.streams.get(rid)
        if st is None:
            return
        lost = "stopped mid-answer" if why == "gone" else "finished, but the end of its answer was lost in transit"
        err = ErrorInfo.of(ErrorCode.unavailable, f"the {stage} replica {lost}; the partial answer is kept")
        async with st.emit_lock:
            usage = Usage(prompt_tokens=st.work.prompt_tokens)
            await self._finish(st, "error", usage, "error", err)

    async def cancelled(self, notice: CancelNotice) -> None:
        st = self.streams.get(notice.rid)
        if st is not None and notice.delivered_chars is not None:
            st.delivered_chars = notice.delivered_chars

    async def _expire(self, st: Stream, after_s: float) -> None:
        await asyncio.sleep(after_s)
        if not st.closed:
            await self.bus.publish(subjects.chat_cancel(st.work.rid), CancelNotice(rid=st.work.rid, reason="deadline"))
            err = ErrorInfo.of(ErrorCode.deadline_exceeded, "the answer did not finish before the request deadline")
            await self._finish(st, "error", Usage(prompt_tokens=st.work.prompt_tokens), "error", err)

    async def _send(self, st: Stream, rel: Release, kind: TextKind, usage: Usage | None = None) -> None:
        """Emit what the guard released; a block ends the stream; hand new sentences to the classifier."""
        text, lps = self._released(st, rel, kind)
        if text and not st.closed and st.delivered_chars is None:
            await self._show(st, kind, text, lps)
        if rel.blocked is not None:
            await self._block(st, rel, usage)
            return
        self._judge_later(st, rel, kind)

    def _send_now(self, st: Stream, rel: Release, kind: TextKind) -> bool:
        """`_send` of an `at_once` stream, without waiting: False when the release blocks the stream (which
        then ends in a task of its own, and its later frames go through its task)."""
        text, lps = self._released(st, rel, kind)
        if text and st.delivered_chars is None:
            self._show_now(st, kind, text, lps)
        if rel.blocked is not None:
            st.stopping = True
            task = asyncio.create_task(self._block_later(st, rel))
            st.judging.add(task)  # cancelled with the others if the stream ends first
            task.add_done_callback(st.judging.discard)
            return False
        self._judge_later(st, rel, kind)
        return True

    def _released(self, st: Stream, rel: Release, kind: TextKind) -> tuple[str, list[dict[str, Any]] | None]:
        """The text a release shows and its logprobs; its redactions join the stream's record."""
        st.redactions += [r.__dict__ for r in rel.redactions]
        if kind == "delta" and st.lp_on:
            return self._with_logprobs(st, rel)
        return rel.text, None

    async def _block_later(self, st: Stream, rel: Release) -> None:
        async with st.emit_lock:
            if not st.closed:
                await self._block(st, rel, None)

    def _judge_later(self, st: Stream, rel: Release, kind: TextKind) -> None:
        for sentence in rel.to_judge:
            guard = st.thinking if kind == "thinking" else st.guard
            task = asyncio.create_task(self._judge(st, guard, sentence, kind))
            st.judging.add(task)
            task.add_done_callback(st.judging.discard)

    async def _judge(self, st: Stream, guard: StreamGuard, sentence: Sentence, kind: TextKind) -> None:
        assert self.batcher is not None
        text = guard.judge_text(sentence)
        learned = (await guard.guard.learned_many_batched([text], self.batcher, source="model"))[0]
        async with st.emit_lock:
            if not st.closed:
                await self._send(st, guard.judged(sentence, learned), kind)

    async def _block(self, st: Stream, rel: Release, usage: Usage | None) -> None:
        assert rel.blocked is not None
        # Stop the model too: nothing keeps decoding an answer nobody will see.
        await self.bus.publish(subjects.chat_cancel(st.work.rid), CancelNotice(rid=st.work.rid, reason="blocked"))
        err = ErrorInfo.of(ErrorCode.content_blocked, f"answer stopped by output safety ({rel.blocked.category})")
        usage = usage or Usage(prompt_tokens=st.work.prompt_tokens)
        await self._finish(st, "error", usage, "blocked", err, blocked=rel.blocked.category)

    def _in_order(self, st: Stream, seq: int) -> None:
        if seq != st.next_seq:
            log.warning("raw stream gap", expected=st.next_seq, got=seq)
        st.next_seq = seq + 1

    async def on_step(self, step: list[StepFrame] | RawChunk) -> None:
        """One engine step's frames of this replica's streams (or a stream's end): each to its stream."""
        streams = self.streams
        for item in step if isinstance(step, list) else (step,):
            st = streams.get(item.rid)
            if st is None:  # ended here already (a block, a deadline, a lost producer): the rest is moot
                continue
            idle = not (st.busy or st.inbox or st.stopping or st.emit_lock.locked())
            if st.at_once and idle and type(item) is StepFrame:
                self._text_now(st, item)  # nothing of the stream's is in hand elsewhere: its order holds
                continue
            st.inbox.append(item)
            st.arrived.set()

    async def _read(self, st: Stream) -> None:
        """The stream's frames, in order, until it ends."""
        while not st.closed:
            await st.arrived.wait()
            st.arrived.clear()
            items, st.inbox = st.inbox, []
            st.busy = True
            try:
                for item in items:
                    if isinstance(item, StepFrame):
                        await self.on_text(st, item)
                    elif not item.finished:  # a producer that sends whole chunks: its text is a frame all the same
                        await self.on_text(st, StepFrame(item.rid, item.seq, item.kind, item.text))
                    else:
                        await self.on_chunk(st, item)
            finally:
                st.busy = False

    async def on_text(self, st: Stream, frame: StepFrame) -> None:
        """The hot path: one frame of text (every token the model made since the previous frame)."""
        if st.closed:
            return
        self._heard(st, frame)
        async with st.emit_lock:
            if frame.kind == "thinking":
                # Thinking is shown to the user too: the same redaction and judging, on its own guard.
                await self._send(st, st.thinking.feed(frame.text), "thinking")
                return
            if st.thinking.full_text:  # the answer began: thinking is over (finish() is idempotent)
                await self._send(st, st.thinking.finish(), "thinking")
            if not st.closed:
                self._frame_logprobs(st, frame.text, frame.logprobs)
                await self._send(st, st.guard.feed(frame.text), "delta")

    def _text_now(self, st: Stream, frame: StepFrame) -> None:
        """`on_text` of an idle `at_once` stream, in the step message's handler: nothing in it waits."""
        if st.closed:
            return
        self._heard(st, frame)
        if frame.kind == "thinking":
            self._send_now(st, st.thinking.feed(frame.text), "thinking")
            return
        if st.thinking.full_text and not self._send_now(st, st.thinking.finish(), "thinking"):
            return
        self._frame_logprobs(st, frame.text, frame.logprobs)
        self._send_now(st, st.guard.feed(frame.text), "delta")

    def _heard(self, st: Stream, frame: StepFrame) -> None:
        if (holder := self.liveness.runs.get(st.work.rid)) is not None:
            holder.heard()
        self._in_order(st, frame.seq)

    async def on_chunk(self, st: Stream, chunk: RawChunk) -> None:
        """The stream's last message: finish the guards, wait for the last verdicts, end it."""
        if st.closed:
            return
        self.liveness.forget(st.work.rid)  # the producer is done with it: nothing more to wait for from there
        self._in_order(st, chunk.seq)
        async with st.emit_lock:
            if chunk.text:  # a producer may end on text (one that sends no separate frames)
                guard = st.thinking if chunk.kind == "thinking" else st.guard
                if chunk.kind == "delta":
                    self._frame_logprobs(st, chunk.text, None)
                await self._send(st, guard.feed(chunk.text), chunk.kind, chunk.usage)
            if st.closed:
                return
            if st.thinking.full_text:
                await self._send(st, st.thinking.finish(), "thinking", chunk.usage)
            await self._send(st, st.guard.finish(), "delta", chunk.usage)
            if st.lp_pending and not st.closed and st.delivered_chars is None:
                # Released text the frames never covered (they should have): out, without entries.
                text, st.lp_pending = st.lp_pending, ""
                await self._show(st, "delta", text)
        if st.admission is not None:
            await asyncio.wait({st.admission})
        # The last sentences' verdicts decide between `done` and `content_blocked`.
        while st.judging and not st.closed:
            await asyncio.gather(*list(st.judging), return_exceptions=True)
        async with st.emit_lock:
            usage = chunk.usage or Usage(prompt_tokens=st.work.prompt_tokens)
            if chunk.error is not None:
                await self._finish(st, "error", usage, "error", chunk.error)
            elif chunk.finish_reason == "cancelled" or st.delivered_chars is not None:
                await self._finish(st, "stopped", usage, "cancelled", None)
            else:
                # Log probabilities name the model's own tokens: they go out only with an answer output
                # safety left as the model wrote it (a redaction would otherwise be undone by them).
                unchanged = st.guard.released_text == st.guard.full_text
                logprobs = chunk.logprobs if unchanged else None
                await self._finish(st, "complete", usage, chunk.finish_reason or "stop", None, logprobs=logprobs)

    async def _save(self, save: SaveTurn) -> None:
        """Store the turn before the client hears the end. Saving outlives the request's deadline, and is
        asked again while nobody answers (context restarting, the bus reconnecting), for at most
        `save_timeout_s`: an answer the client saw is not dropped for a restart within that bound. Saving
        is idempotent on the turn's rid, so a repeat after a lost reply stores it once."""
        s = self.settings
        await request_until(
            self.bus, subjects.SAVE_TURN, save, SaveTurnAck, bound_s=s.save_timeout_s, attempt_s=s.save_attempt_s
        )

    async def _finish(
        self,
        st: Stream,
        status: str,
        usage: Usage,
        finish: str,
        error: ErrorInfo | None,
        blocked: str | None = None,
        save: bool = True,
        logprobs: list[TokenLogprob] | None = None,
    ) -> None:
        if st.closed:
            return
        st.closed = True
        for task in [*st.judging, st.admission]:
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        if st.watchdog is not None and st.watchdog is not asyncio.current_task():
            st.watchdog.cancel()
        work = st.work
        if save and work.persist and work.chat_id:
            turn = Turn(
                id=uuid.uuid4().hex,
                rid=work.rid,
                user_text=work.text,
                answer=st.answer,
                status=status,
                usage=usage,
                model=work.route.model if work.route else None,  # type: ignore[arg-type]
                created_ms=now_ms(),
                tools=work.tools,
                tool_prompt=work.tool_prompt,
                thinking=st.thinking.released_text,
                finish_reason=finish,
            )
            try:
                await self._save(SaveTurn(tenant=work.tenant, user=work.user, chat_id=work.chat_id, turn=turn))
            except BusError as e:
                log.error("turn not saved", error=e.message)
                error = error or ErrorInfo.of(ErrorCode.unavailable, f"the answer could not be saved: {e.message}")
                status = "error"
        if error is not None:
            await self._end_event(st, ChatEvent(rid=work.rid, type="error", error=error, usage=usage))
        else:
            await self._end_event(
                st,
                ChatEvent(
                    rid=work.rid,
                    type="done",
                    usage=usage,
                    finish_reason=finish,  # type: ignore[arg-type]
                    model=work.route.model if work.route else None,
                    logprobs=logprobs,
                ),
            )
        self.streams.pop(work.rid, None)
        self.bus.release(work.rid)
        self.liveness.forget(work.rid)
        # The whole answer's verdicts, for the record: the rules over all of it and the classifier's
        # verdicts on its sentences, already in hand (a second pass over the answer was ~half the
        # classifier's work per answer, for a figure no client waits for).
        final = [v.__dict__ for v in st.guard.record_verdicts()] if st.guard.full_text.strip() else []
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
                },
                part=SafetyOutPart(
                    status=status,
                    finish_reason=finish,
                    output=st.guard.full_text,
                    released=st.answer if st.admitted else "",
                    thinking=st.thinking.full_text,
                    usage=usage,
                    model=work.route.model if work.route else None,
                    mode=work.route.mode if work.route else None,
                    safety_out=SafetyOutcome(
                        redactions=st.redactions,
                        final_check=final,
                        blocked=blocked,
                        answer_release=work.safety.answer_release,
                    ),
                ),
            )
        )
        # Last: the stream's task waits for frames that will not come (run in it, this ends it by returning).
        if st.reader is not None and st.reader is not asyncio.current_task():
            st.reader.cancel()


async def setup(bus: Bus, settings: SafetyOutSettings) -> Callable[[], Awaitable[None]] | None:
    guard = calibrated_guard(
        settings.calibration,
        use_embeddings=settings.use_embeddings,
        screen=settings.screen,
        dtype=settings.classifier_dtype,
    )
    batcher = None
    if settings.use_embeddings:
        await asyncio.to_thread(guard.check, "warm up", source="model")
        batcher = ScoreBatcher(
            guard.classifier,
            max_texts=settings.max_batch_texts,
            nice=settings.classifier_nice,
            threads=settings.classifier_threads,
        )
    service = SafetyOut(bus, settings, TenantGuards(guard), batcher)
    # Every replica hears every cancel (no queue group): only the one holding the stream acts on it.
    await bus.subscribe(subjects.CHAT_CANCEL_ANY, CancelNotice, service.cancelled, span=False)
    # Every producer's steps for this replica, before the handshake is offered: no frame goes unheard.
    await bus.watch_frames(subjects.stream_steps_to(bus.replica), decode_step, service.on_step)
    await bus.flush()
    await bus.subscribe(subjects.SAFETY_OUT, StreamOpen, service.open, queue="safety_out")

    async def cleanup() -> None:
        await service.liveness.close()
        await service.kept.close()
        if batcher is not None:
            await batcher.close()

    return cleanup
