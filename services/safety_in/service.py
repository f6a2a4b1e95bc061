"""Classify the new message; a block ends the request with `policy_violation` before the model sees it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from libs.bus import Bus, BusError
from libs.safety import InputGuard, Verdict, worst_action
from libs.safety.tenant import TenantGuards
from schemas import ErrorCode, Forward, SafetyVerdict, Work, subjects
from services.safety_in.settings import SafetyInSettings


def to_wire(v: Verdict, source: str) -> SafetyVerdict:
    return SafetyVerdict(
        category=v.category,
        score=v.score,
        action=v.action,  # type: ignore[arg-type]
        classifier=v.classifier,
        version=v.version,
        detail=v.detail,
        source=source,
    )


class SafetyIn:
    def __init__(self, guard: InputGuard):
        self.guard = guard
        self.guards = TenantGuards(guard)

    async def check(self, work: Work) -> Forward:
        # The classifier is CPU work (embeddings); keep the event loop free for other requests.
        guard = self.guards.for_tenant(work.safety)
        verdicts = await asyncio.to_thread(guard.check, work.text, source="user")
        work.verdicts = [to_wire(v, "user") for v in verdicts]
        action = worst_action(verdicts)
        decision = {
            "action": action,
            # The abuse monitor counts a flag against the key only where the tenant's policy says so.
            "flag_is_strike": work.safety.flag_is_strike,
            "record": {"safety_in": [v.model_dump() for v in work.verdicts], "safety_action": action},
        }
        if action == "block":
            blocked = [v for v in work.verdicts if v.action == "block"]
            names = ", ".join(sorted({v.category for v in blocked}))
            raise BusError(
                ErrorCode.policy_violation, f"message blocked by input safety policy ({names})", decision=decision
            )
        return Forward(subject=subjects.ROUTE, work=work, decision=decision)


async def setup(bus: Bus, settings: SafetyInSettings) -> Callable[[], Awaitable[None]] | None:
    guard = await asyncio.to_thread(InputGuard, use_embeddings=settings.use_embeddings)
    # Warm the classifier now, so the first user does not pay for loading the embedding model.
    await asyncio.to_thread(guard.check, "hello", source="user")
    await bus.stage(subjects.SAFETY_IN, SafetyIn(guard).check)
    return None
