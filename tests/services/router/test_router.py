from __future__ import annotations

import pytest

from switchyard.libs.bus import BusError
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.models import ModelCard, ModelRegistry
from switchyard.libs.plan import plan
from switchyard.schemas import ErrorCode, Heartbeat, Work
from switchyard.services.router.service import Router, classify_mode
from switchyard.services.router.settings import ModelSpec, PoolSpec, RouterSettings


def beat(replica: str, pool: str = "default", ctx: int = 8192) -> Heartbeat:
    return Heartbeat(replica=replica, pool=pool, model="SmolLM2-135M-Instruct", max_model_len=ctx, ts_ms=now_ms())


def work(chat_id: str | None = "c1", prompt_tokens: int = 100, **kw: object) -> Work:
    return Work(
        rid="r", tenant="t", user="u", key_id="k", chat_id=chat_id, text="hello", prompt_tokens=prompt_tokens, **kw
    )  # type: ignore[arg-type]


def router(**kw: object) -> Router:
    models = [
        ModelSpec(
            name="SmolLM2-135M-Instruct",
            pools=[PoolSpec(name="2k", context_length=2048), PoolSpec(name="8k", context_length=8192)],
        )
    ]
    return Router(RouterSettings(models=models, wait_for_replica_s=0.2, **kw))  # type: ignore[arg-type]


async def test_sticky_by_conversation_and_failover() -> None:
    r = router()
    for name in ("a", "b", "c"):
        r.replicas.observe(beat(name))
    first = (await r.route(work("chat-1"))).work.route
    assert first is not None
    for _ in range(5):
        again = (await r.route(work("chat-1"))).work.route
        assert again is not None and again.replica == first.replica and "sticky" in again.reason
    # Conversations spread over replicas.
    chosen = {(await r.route(work(f"chat-{i}"))).work.route.replica for i in range(30)}  # type: ignore[union-attr]
    assert chosen == {"a", "b", "c"}
    r.replicas.forget(first.replica)
    moved = (await r.route(work("chat-1"))).work.route
    assert moved is not None and moved.replica != first.replica
    assert f"failover: replica {first.replica} is gone" in moved.reason


async def test_smallest_pool_that_fits() -> None:
    r = router()
    r.replicas.observe(beat("small", "2k", 2048))
    r.replicas.observe(beat("big", "8k", 8192))
    assert (await r.route(work(prompt_tokens=500))).work.route.pool == "2k"  # type: ignore[union-attr]
    assert (await r.route(work(prompt_tokens=3000))).work.route.pool == "8k"  # type: ignore[union-attr]
    with pytest.raises(BusError) as e:
        await r.route(work(prompt_tokens=9000))
    assert e.value.code == ErrorCode.bad_request


async def test_modes_and_no_replica() -> None:
    r = router()
    with pytest.raises(BusError) as e:
        await r.route(work())
    assert e.value.code == ErrorCode.unavailable
    r.replicas.observe(beat("a"))
    fwd = await r.route(work(model="SmolLM2-135M-Instruct:reasoning"))
    # The client's max_tokens bounds the whole answer, thinking included: no stage raises it.
    assert fwd.work.route.mode == "reasoning" and fwd.work.sampling.max_tokens == 256  # type: ignore[union-attr]
    assert fwd.work.plan is not None and (fwd.work.plan.max_tokens, fwd.work.plan.thinking) == (256, "prompted")
    assert (await r.route(work(mode="fast"))).work.route.mode == "fast"  # type: ignore[union-attr]
    assert classify_mode("Prove that the square root of 2 is irrational") == "reasoning"
    assert classify_mode("hi there") == "fast"


async def test_the_same_chat_id_of_two_tenants_is_hashed_apart() -> None:
    r = router()
    for name in [f"r{i}" for i in range(8)]:
        r.replicas.observe(beat(name))
    # Chat ids are per tenant: across many tenants' "demo" chats the choice must vary, not follow the id.
    chosen = set()
    for t in range(16):
        w = work("demo")
        w.tenant = f"tenant-{t}"
        routed = (await r.route(w)).work.route
        assert routed is not None
        chosen.add(routed.replica)
    assert len(chosen) > 1


def gemma_beat(replica: str = "g") -> Heartbeat:
    return Heartbeat(replica=replica, pool="gemma", model="gemma-3-270m", max_model_len=32768, ts_ms=now_ms())


async def test_the_pool_follows_the_model_or_its_alias_and_the_prompt_mode() -> None:
    r = router()
    r.replicas.observe(beat("a", "8k"))
    r.replicas.observe(gemma_beat())
    route = (await r.route(work(model="gemma3-270m", prompt_mode="raw"))).work.route
    assert route is not None and (route.model, route.pool, route.mode) == ("gemma-3-270m", "gemma", "fast")
    assert route.fallback_from is None
    # A text completion never gets a thinking phase, whatever the classifier reads.
    proof = work(model="smollm2", prompt_mode="raw").model_copy(update={"text": "Prove it step by step"})
    raw = (await r.route(proof)).work.route
    assert raw is not None and (raw.model, raw.mode) == ("SmolLM2-135M-Instruct", "fast")
    # A chat to the base model, with no fallback configured: refused.
    with pytest.raises(BusError) as e:
        await r.route(work(model="gemma-3-270m"))
    assert e.value.code == ErrorCode.bad_request and "no chat template" in e.value.message


async def test_a_configured_fallback_takes_a_chat_the_model_cannot_serve_and_says_so() -> None:
    r = router(registry=ModelRegistry(model_fallbacks={"gemma-3-270m": "SmolLM2-135M-Instruct"}))
    r.replicas.observe(beat("a", "8k"))
    r.replicas.observe(gemma_beat())
    route = (await r.route(work(model="gemma-3-270m"))).work.route
    assert route is not None and (route.model, route.fallback_from) == ("SmolLM2-135M-Instruct", "gemma-3-270m")
    assert "no chat template" in route.reason and "configured fallback" in route.reason
    # With its own replica gone, a text completion for Gemma goes to the fallback too, and says why.
    r.replicas.forget("g")
    route = (await r.route(work(model="gemma-3-270m", prompt_mode="raw"))).work.route
    assert route is not None and (route.model, route.fallback_from) == ("SmolLM2-135M-Instruct", "gemma-3-270m")
    assert "no replica of gemma-3-270m is live" in route.reason


async def test_the_router_reads_the_plan_and_never_rewrites_it() -> None:
    r = router()
    r.replicas.observe(beat("a", "8k"))
    planned = plan(ModelRegistry(), model="smollm2", mode="fast", text="Prove it step by step", max_tokens=40)
    w = work(prompt_tokens=100, plan=planned).model_copy(update={"text": "Prove it step by step"})
    fwd = await r.route(w)
    assert fwd.work.plan is planned and fwd.work.route is not None and fwd.work.route.mode == "fast"
    assert "fits 140 tokens" in fwd.work.route.reason and "mode fast (requested)" in fwd.work.route.reason


async def test_a_chat_fails_over_for_liveness_only_to_a_fallback_that_reads_its_prompt() -> None:
    """The prompt was rendered for the planned model's template: a fallback with other model files would
    read it in the wrong format, so the request is unavailable instead; the same files take it."""
    other = ModelCard(name="other", pool="other", path="/models/other.gguf")
    same = ModelCard(name="same", pool="same")  # the bundled model's files, as SmolLM2's card
    registry = ModelRegistry(
        models=[ModelCard(name="SmolLM2-135M-Instruct", pool="default"), other, same],
        model_fallbacks={"SmolLM2-135M-Instruct": "other"},
    )
    r = router(registry=registry)
    r.replicas.observe(Heartbeat(replica="o", pool="other", model="other", max_model_len=8192, ts_ms=now_ms()))
    with pytest.raises(BusError) as e:
        await r.route(work())
    assert e.value.code == ErrorCode.unavailable and "another chat template" in e.value.message
    # A text completion's prompt is the client's text: any fallback reads it.
    raw = (await r.route(work(prompt_mode="raw"))).work.route
    assert raw is not None and (raw.model, raw.fallback_from) == ("other", "SmolLM2-135M-Instruct")
    registry = ModelRegistry(models=registry.models, model_fallbacks={"SmolLM2-135M-Instruct": "same"})
    r = router(registry=registry)
    r.replicas.observe(Heartbeat(replica="s", pool="same", model="same", max_model_len=8192, ts_ms=now_ms()))
    chat = (await r.route(work())).work.route
    assert chat is not None and (chat.model, chat.fallback_from) == ("same", "SmolLM2-135M-Instruct")
