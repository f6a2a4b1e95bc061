"""Routing: model and mode from the request, the smallest pool that fits, a sticky replica."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable

from switchyard.libs.bus import Bus, BusError
from switchyard.libs.models import Capability, ModelCard
from switchyard.libs.models.live import LiveModels
from switchyard.schemas import ErrorCode, Forward, Heartbeat, RouteDecision, RoutePart, Work, subjects
from switchyard.services.router.replicas import ReplicaTable, rendezvous, sticky_key
from switchyard.services.router.settings import ModelSpec, RouterSettings

# Messages that benefit from a thinking phase: proofs, multi-step maths, explicit requests to reason.
_REASONING = re.compile(
    r"\b(step[- ]by[- ]step|prove|proof|derive|reason(?:ing)? through|think (?:it )?through|why does|"
    r"calculate|solve)\b",
    re.IGNORECASE,
)


def classify_mode(text: str) -> str:
    return "reasoning" if _REASONING.search(text) else "fast"


def _need(work: Work) -> Capability:
    return "completion" if work.prompt_mode == "raw" else "chat"


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

    def _spec(self, card: ModelCard) -> ModelSpec:
        """The router's own knobs for a model (modes, reasoning budget): configured, else from its registry entry."""
        for spec in self.settings.models:
            if spec.name == card.name:
                return spec
        return ModelSpec(name=card.name, engine=card.engine, modes=list(card.modes))

    def _card(self, work: Work) -> ModelCard:
        name = (work.model or self.settings.registry.default_model).split(":")[0]
        # Unknown model names (SDK defaults like "gpt-4o") go to the default model; the gateway has
        # already refused them on the HTTP APIs (404), so only internal callers get here with one.
        return self.settings.registry.find(name) or self.settings.registry.get(None)

    def _able(self, card: ModelCard, work: Work) -> tuple[ModelCard, str | None]:
        """The model that takes the request: `card` when it can serve the request's prompt mode, else its
        operator-configured fallback (with the reason), else a 400."""
        need = _need(work)
        if card.can(need):
            return card, None
        what = "chat (it has no chat template)" if need == "chat" and not card.chat_template else need
        fallback = self.settings.registry.find(card.fallback) if card.fallback else None
        if fallback is None or not fallback.can(need):
            raise BusError(ErrorCode.bad_request, f"model {card.name} does not serve {what}")
        return fallback, f"fallback: {card.name} does not serve {what}; its configured fallback is {fallback.name}"

    async def _live(self, card: ModelCard, work: Work) -> tuple[ModelCard, list[Heartbeat], str | None]:
        """`card`'s live replicas, else (none within the wait) its configured fallback's, when that one can
        serve the request's prompt mode."""
        try:
            return card, await self._wait_live(card.name), None
        except BusError:
            fallback = self.settings.registry.find(card.fallback) if card.fallback else None
            if fallback is None or not fallback.can(_need(work)):
                raise
        live = self.replicas.live(fallback.name) or await self._wait_live(fallback.name)
        return (
            fallback,
            live,
            f"fallback: no replica of {card.name} is live; its configured fallback is {fallback.name}",
        )

    async def route(self, work: Work) -> Forward:
        asked = self._card(work)
        card, why_fallback = self._able(asked, work)
        reasons: list[str] = [] if why_fallback is None else [why_fallback]
        spec = self._spec(card)
        mode: str
        if work.prompt_mode == "raw":
            mode, why = "fast", "text completion"
        elif work.mode:
            mode, why = work.mode, "requested"
        elif work.model and ":" in work.model:
            mode, why = work.model.split(":", 1)[1], "model name"
        else:
            mode, why = classify_mode(work.text), "classifier"
        if mode not in spec.modes:
            mode, why = "fast", f"{mode} not offered by {spec.name}"
        reasons.append(f"mode {mode} ({why})")
        if mode == "reasoning":
            work.sampling.max_tokens = max(work.sampling.max_tokens, spec.reasoning_max_tokens)

        need = work.prompt_tokens + work.sampling.max_tokens
        served, live, why_down = await self._live(card, work)
        if why_down is not None:
            reasons.append(why_down)
            card, spec = served, self._spec(served)
            if mode not in spec.modes:
                mode = "fast"
        fitting = sorted((r for r in live if r.max_model_len >= need), key=lambda r: r.max_model_len)
        if not fitting:
            raise BusError(
                ErrorCode.bad_request,
                f"prompt of {work.prompt_tokens} tokens plus {work.sampling.max_tokens} "
                f"output tokens exceeds every pool of {spec.name}",
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
        work.route = RouteDecision(
            model=spec.name,
            mode=mode,
            pool=pool,
            replica=chosen.replica,  # type: ignore[arg-type]
            reason="; ".join(reasons),
            fallback_from=asked.name if card.name != asked.name else None,
        )
        work.mode = mode  # type: ignore[assignment]
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
