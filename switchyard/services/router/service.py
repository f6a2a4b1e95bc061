"""Routing: the pool and replica for the request plan's model (switchyard/libs/plan.py decided model, mode
and budgets before context rendered): the smallest pool that fits, a sticky replica, failover."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from switchyard.libs.bus import Bus, BusError
from switchyard.libs.models import ModelCard
from switchyard.libs.models.live import LiveModels
from switchyard.libs.plan import PlanError, classify_mode, plan_work
from switchyard.schemas import ErrorCode, Forward, Heartbeat, RequestPlan, RouteDecision, RoutePart, Work, subjects
from switchyard.services.router.replicas import ReplicaTable, rendezvous, sticky_key
from switchyard.services.router.settings import RouterSettings

__all__ = ["Router", "classify_mode", "setup"]


def same_prompt(a: ModelCard, b: ModelCard) -> bool:
    """Whether a prompt rendered for `a` reads the same to `b`: the same model files (tokenizer and template)."""
    return a.path == b.path


class Router:
    def __init__(self, settings: RouterSettings):
        self.settings = settings
        self.replicas = ReplicaTable(settings.replica_ttl_s)
        # Where each conversation went last, so a move can be explained as a failover.
        self._last: dict[str, str] = {}
        self.first_replica = asyncio.Event()

    async def registry_changed(self, key: str, beat: Heartbeat | None) -> None:
        if beat is None:
            self.replicas.forget(key.split(".", 1)[1])
        else:
            self.replicas.observe(beat)
            self.first_replica.set()

    def _plan(self, work: Work) -> RequestPlan:
        try:
            return plan_work(work, self.settings.registry)
        except PlanError as e:
            raise BusError(ErrorCode.bad_request, str(e)) from e

    async def _live(self, card: ModelCard, work: Work) -> tuple[ModelCard, list[Heartbeat], str | None]:
        """`card`'s live replicas, else (none within the wait) its configured fallback's. The prompt is already
        rendered for `card`, and the plan is not rewritten: the fallback takes the request only where that
        prompt reads the same to it (a text completion, or the same model files); otherwise the request
        fails as unavailable rather than reach a model in another's template."""
        try:
            return card, await self._wait_live(card.name), None
        except BusError as e:
            fallback = self.settings.registry.find(card.fallback) if card.fallback else None
            if fallback is None or not fallback.can("completion" if work.prompt_mode == "raw" else "chat"):
                raise
            if work.prompt_mode != "raw" and not same_prompt(card, fallback):
                raise BusError(
                    ErrorCode.unavailable,
                    f"{e.message}; its fallback {fallback.name} reads another chat template, and the prompt "
                    f"was rendered for {card.name}",
                ) from e
        live = self.replicas.live(fallback.name) or await self._wait_live(fallback.name)
        return (
            fallback,
            live,
            f"fallback: no replica of {card.name} is live; its configured fallback is {fallback.name}",
        )

    async def route(self, work: Work) -> Forward:
        plan = self._plan(work)
        if work.plan is None:  # planned here, once, for work that came without a plan
            work = work.model_copy(update={"plan": plan})
        card = self.settings.registry.find(plan.model) or self.settings.registry.get(None)
        reasons: list[str] = [] if plan.fallback_reason is None else [plan.fallback_reason]
        reasons.append(f"mode {plan.mode} ({plan.mode_reason})")
        need = work.prompt_tokens + plan.max_tokens
        if need > plan.prompt_budget and plan.prompt_budget < card.context_length:
            # The gateway cut the window to a key's budget reservation; context fits a chat's prompt in it,
            # a text completion's prompt is the client's own and is checked here.
            raise BusError(
                ErrorCode.payload_too_large,
                f"prompt of {work.prompt_tokens} tokens plus {plan.max_tokens} output tokens exceeds the "
                f"{plan.prompt_budget} tokens this API key's budget has left for it",
            )
        served, live, why_down = await self._live(card, work)
        if why_down is not None:
            reasons.append(why_down)
        fitting = sorted((r for r in live if r.max_model_len >= need), key=lambda r: r.max_model_len)
        if not fitting:
            raise BusError(
                ErrorCode.bad_request,
                f"prompt of {work.prompt_tokens} tokens plus {plan.max_tokens} "
                f"output tokens exceeds every pool of {served.name}",
            )
        pool = fitting[0].pool
        candidates = [r for r in fitting if r.pool == pool]
        reasons.append(f"pool {pool} is the smallest that fits {need} tokens")

        key = sticky_key(work.tenant, work.chat_id, work.rid)
        chosen = rendezvous(key, candidates)
        previous = self._last.get(key)
        if previous and previous != chosen.replica and not self.replicas.is_live(previous):
            reasons.append(f"failover: replica {previous} is gone")
        else:
            reasons.append("sticky by conversation" if work.chat_id else "hashed by request")
        self._last[key] = chosen.replica
        asked = plan.asked or plan.model
        work.route = RouteDecision(
            model=served.name,
            mode=plan.mode,
            pool=pool,
            replica=chosen.replica,  # type: ignore[arg-type]
            reason="; ".join(reasons),
            fallback_from=asked if served.name != asked else None,
        )
        return Forward(subject=subjects.TOOLS, work=work, part=RoutePart(route=work.route))

    async def _wait_live(self, model: str) -> list[Heartbeat]:
        deadline = time.monotonic() + self.settings.wait_for_replica_s
        while True:
            live = self.replicas.live(model)
            if live or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        if not live:
            raise BusError(ErrorCode.unavailable, f"no inference replica of {model} is live")
        return live


async def setup(bus: Bus, settings: RouterSettings) -> Callable[[], Awaitable[None]] | None:
    router = Router(settings)
    # Models added or removed at run time (switchyard/libs/models/live.py) are routed from the next request on.
    models = await LiveModels.follow(bus, settings.registry)
    registry = await bus.kv(subjects.REPLICAS_BUCKET, Heartbeat, ttl_s=subjects.REPLICAS_TTL_S)
    # Every router replica watches every replica's heartbeat (a watch, not a queue group).
    await registry.watch(router.registry_changed)
    await bus.stage(subjects.ROUTE, router.route)
    # Ready (health answered, which serve() subscribes after setup) only once some replica is live:
    # a router that knows no replica could only fail the requests /readyz invites.
    await router.first_replica.wait()

    async def cleanup() -> None:
        registry.stop()
        await models.close()

    return cleanup
