"""Classify the new message; a block ends the request with `policy_violation` before anything is shown.

safety_in is asked (request/reply on `pipeline.safety_in`) while the model prefills: by safety_out when
it opens the stream, or first by tools when a tool is about to run. Nothing the model writes is shown,
and no tool runs, before the verdict is in. Concurrent requests share one classifier pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from switchyard.libs.bus import Bus, BusError
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.early import EarlyPasses
from switchyard.libs.safety import InputGuard, Verdict, worst_action
from switchyard.libs.safety.batcher import ScoreBatcher, Scores
from switchyard.libs.safety.guard import calibrated_guard
from switchyard.libs.safety.taxonomy import HARM_CATEGORIES, action_rank, worst_first
from switchyard.libs.safety.tenant import TenantGuards
from switchyard.schemas import ErrorCode, InputDecision, SafetyInPart, SafetyVerdict, StageRecord, Work, subjects
from switchyard.services.safety_in.settings import SafetyInSettings


def to_wire(v: Verdict, source: str) -> SafetyVerdict:
    return SafetyVerdict(
        category=v.category,
        score=v.score,
        action=v.action,  # type: ignore[arg-type]
        classifier=v.classifier,
        version=v.version,
        detail=v.detail,
        source=source,
        block_at=v.block_at,
    )


def client_texts(work: Work) -> list[str]:
    """Everything the client wrote that the model will see: the new message and, on the OpenAI and
    Anthropic APIs, the user and system messages of the conversation it sends, any of which could
    carry the attack. A stored conversation's earlier turns were judged when they were new.

    The newest first: when the classifier reads only the first few (`classifier_max_messages`), it
    reads what the model weighs most."""
    texts = [work.text]
    if work.system:
        texts.append(work.system)
    # Assistant turns are judged as answers were; a refusal in them ("I can't help make explosives")
    # names the harm it refused and must not block the next question.
    texts += [
        m.content
        for m in reversed(work.messages)
        if m.role in ("user", "system") and m.content.strip() and m.content != work.text
    ]
    return texts


def _strings(value: Any) -> list[str]:
    """Every string in a tool spec (names, descriptions, parameter names, enums), keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def turn_texts(work: Work) -> tuple[list[str], list[str]]:
    """What else the client put in the prompt, for the rules alone: (assistant turns, tool messages and
    tool specs). The classifier does not read them (see `client_texts`); the rules do, since an
    injection or a smuggled control sequence means the same whichever role carries it."""
    assistant = [m.content for m in work.messages if m.role == "assistant" and m.content.strip()]
    tool = [m.content for m in work.messages if m.role == "tool" and m.content.strip()]
    tool += ["\n".join(_strings(spec)) for spec in work.client_tools]
    return assistant, tool


def rule_verdicts(guard: InputGuard, work: Work) -> list[list[Verdict]]:
    """The rules' verdicts on `turn_texts`. In an assistant turn only the rules about the prompt itself
    count (injection, jailbreak, hidden text, credentials): a refusal there names the harm it refused."""
    assistant, tool = turn_texts(work)
    judged = guard.check_many([*assistant, *tool], source="user")
    for i in range(len(assistant)):
        judged[i] = [v for v in judged[i] if v.category not in HARM_CATEGORIES]
    return judged


def data_texts(work: Work) -> list[str]:
    """What the client's conversation carries as data: the results of its own tools (role `tool`: fetched
    pages, files, API answers), the newest first. An instruction there is suspicious, so the classifier
    scores prompt injection in them (`SafetyPolicy.data_only`); like every data source, they flag,
    never block."""
    return [m.content for m in reversed(work.messages) if m.role == "tool" and m.content.strip()]


async def judge_data(
    guard: InputGuard, texts: list[str], batcher: ScoreBatcher | None, max_scored: int
) -> list[Verdict]:
    """``data_texts`` judged as tool output, the worst verdict per category."""
    if not texts:
        return []
    if batcher is not None:
        judged = await guard.check_many_batched(texts, batcher, source="tool", max_scored=max_scored)
    else:
        judged = guard.check_many(texts[:max_scored], source="tool")
    return worst_per_category(judged)


def worst_per_category(judged: list[list[Verdict]]) -> list[Verdict]:
    best: dict[str, Verdict] = {}
    for verdicts in judged:
        for v in verdicts:
            had = best.get(v.category)
            if had is None or (action_rank(v.action), v.score) > (action_rank(had.action), had.score):
                best[v.category] = v
    return worst_first(best.values())


class SafetyIn:
    def __init__(self, bus: Bus, guard: InputGuard, batcher: ScoreBatcher | None, max_scored: int = 16):
        self.bus = bus
        self.guards = TenantGuards(guard)
        # The rules alone, for the rest of what the client sent (`turn_texts`).
        self.rules = TenantGuards(InputGuard(use_embeddings=False))
        self.batcher = batcher
        self.max_scored = max_scored
        # Classifier scores started from context's early copy of the request (`subjects.EARLY`). Scores, not
        # verdicts: the early copy is older than context's reading of the tenant's policy (`Work.safety`),
        # and every tenant's guard reads the same classifier, so the pass serves whatever the policy is.
        self.early: EarlyPasses[list[Scores]] = EarlyPasses()

    async def start_early(self, work: Work) -> None:
        """The classifier's pass on what the client wrote, started while context and the router work."""
        if self.batcher is None:
            return
        texts, batcher = client_texts(work), self.batcher
        scored = self.guards.base.scored_texts(texts, self.max_scored)
        if scored:
            self.early.start(work.rid, tuple(texts), lambda: batcher.score_many(scored))

    async def check(self, work: Work) -> InputDecision:
        t0, started = time.perf_counter(), now_ms()
        guard = self.guards.for_tenant(work.safety)
        texts = client_texts(work)
        early = self.early.take(work.rid, tuple(texts))
        if early is not None:
            judged = guard.check_many_scored(texts, await early, source="user", max_scored=self.max_scored)
        elif self.batcher is not None:
            judged = await guard.check_many_batched(texts, self.batcher, source="user", max_scored=self.max_scored)
        else:
            judged = guard.check_many(texts, source="user")
        if work.messages or work.client_tools:
            judged += await asyncio.to_thread(rule_verdicts, self.rules.for_tenant(work.safety), work)
        verdicts = worst_per_category(judged)
        if "code" in work.planned_tools:  # technical text itself is already judged as such by the guard
            verdicts = guard.for_technical(verdicts)
        data = await judge_data(guard, data_texts(work), self.batcher, self.max_scored)
        wire = [to_wire(v, "user") for v in verdicts] + [to_wire(v, "tool") for v in data]
        action = worst_action([*verdicts, *data])
        decision: dict[str, Any] = {"action": action}
        error = None
        if action == "block":
            names = ", ".join(sorted({v.category for v in wire if v.action == "block"}))
            error = BusError(ErrorCode.policy_violation, f"message blocked by input safety policy ({names})")
        await self.bus.log_stage(
            StageRecord(
                rid=work.rid,
                stage="safety_in",
                tenant=work.tenant,
                started_ms=started,
                duration_ms=(time.perf_counter() - t0) * 1000,
                status="error" if error else "ok",
                error=error.info() if error else None,
                decision=decision,
                # The abuse monitor counts a block against the key as the tenant's strike policy says.
                part=SafetyInPart(safety_in=wire, safety_action=action, strikes=work.safety.strikes),
            )
        )
        if error is not None:
            raise error
        return InputDecision(rid=work.rid, action=action, verdicts=wire)  # type: ignore[arg-type]


async def setup(bus: Bus, settings: SafetyInSettings) -> Callable[[], Awaitable[None]] | None:
    guard = await asyncio.to_thread(
        calibrated_guard,
        settings.calibration,
        use_embeddings=settings.use_embeddings,
        dtype=settings.classifier_dtype,
    )
    # Warm the classifier now, so the first user does not pay for loading the embedding model.
    await asyncio.to_thread(guard.check, "hello", source="user")
    batcher = (
        ScoreBatcher(
            guard.classifier,
            max_texts=settings.max_batch_texts,
            nice=settings.classifier_nice,
            threads=settings.classifier_threads,
            max_chunks=settings.classifier_max_chunks,
        )
        if settings.use_embeddings
        else None
    )
    stage = SafetyIn(bus, guard, batcher, settings.classifier_max_messages)
    await bus.subscribe(subjects.SAFETY_IN, Work, stage.check, queue="safety_in")
    await bus.subscribe(subjects.EARLY, Work, stage.start_early, queue="safety_in", span=False)

    async def cleanup() -> None:
        if batcher is not None:
            await batcher.close()

    return cleanup
