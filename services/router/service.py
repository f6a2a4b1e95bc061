"""Routing: model and mode from the request, the smallest pool that fits, a sticky replica."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable

from libs.bus import Bus, BusError
from schemas import ErrorCode, Forward, Heartbeat, RouteDecision, RoutePart, Work, subjects
from services.router.replicas import ReplicaTable, rendezvous, sticky_key
from services.router.settings import ModelSpec, RouterSettings

# Messages that benefit from a thinking phase: proofs, multi-step maths, explicit requests to reason.
_REASONING = re.compile(
    r"\b(step[- ]by[- ]step|prove|proof|derive|reason(?:ing)? through|think (?:it )?through|why does|"
    r"calculate|solve)\b",
    re.IGNORECASE,
)


def classify_mode(text: str) -> str:
    return "reasoning" if _REASONING.search(text) else "fast"


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

    def _model(self, work: Work) -> ModelSpec:
        name = (work.model or self.settings.default_model).split(":")[0]
        for spec in self.settings.models:
            if spec.name == name:
                return spec
        # Unknown model names (SDK defaults like "gpt-4o") fall back to the default model.
        return next(s for s in self.settings.models if s.name == self.settings.default_model)

    async def route(self, work: Work) -> Forward:
        spec = self._model(work)
        reasons: list[str] = []
        mode: str
        if work.mode:
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
        live = await self._wait_live(spec.name)
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
    registry = await bus.kv(subjects.REPLICAS_BUCKET, Heartbeat, ttl_s=subjects.REPLICAS_TTL_S)
    # Every router replica watches every replica's heartbeat (a watch, not a queue group).
    await registry.watch(router.registry_changed)
    await bus.stage(subjects.ROUTE, router.route)
    # Ready (health answered, which serve() subscribes after setup) only once some replica is live:
    # a router that knows no replica could only fail the requests /readyz invites.
    await router.first_replica.wait()

    async def cleanup() -> None:
        registry.stop()

    return cleanup
