"""Keys an operator manages over HTTP (issue 30), on two gateways with their own caches of verified keys
(kept 60 s here, so nothing below passes by the cache expiring): a key created on one works on both at
once; revoked or rotated on one, its old secret is refused by both at once; the allowed models (403), the
expiry (401) and the token budgets shared by both gateways (429 naming the budget)."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from switchyard.libs.bus import NatsServer
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.models.registry import GEMMA_MODEL_NAME
from switchyard.libs.store.keys import KeyStore
from switchyard.schemas import EmbedReply, EmbedRequest, subjects
from switchyard.schemas.embeddings import EMBEDDING_MODEL as EMBEDDING
from tests.services.gateway.harness import USAGE, Gateway, Responder, gateway

MODEL = "SmolLM2-135M-Instruct"
OTHER = GEMMA_MODEL_NAME
PER_REQUEST = USAGE.prompt_tokens + USAGE.completion_tokens  # what the scripted pipeline reports


@pytest.fixture(scope="module")
async def pair(
    nats_server: NatsServer, responder: Responder, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Gateway, Gateway, str]]:
    data = tmp_path_factory.mktemp("keys")
    url = f"sqlite+aiosqlite:///{data / 'keys.db'}"
    # One database, two stores: each gateway has its own cache, as separate processes do.
    store_a, store_b = await KeyStore.open(url, 60.0), await KeyStore.open(url, 60.0)
    _, admin = await store_a.create("ops", "pro", user="root", admin=True)
    common: dict[str, Any] = {"key_cache_s": 60.0, "key_budgets_bucket": f"kb_{uuid.uuid4().hex[:8]}"}
    async with (
        gateway(nats_server, data / "a", keys=store_a, **common) as a,
        gateway(nats_server, data / "b", keys=store_b, **common) as b,
    ):
        yield a, b, admin
    await store_a.close()
    await store_b.close()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def chat(url: str, key: str, model: str = MODEL) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        return await c.post(
            "/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "hello"}]},
            headers=bearer(key),
        )


async def admin(url: str, admin_key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        return await c.request(method, path, json=body, headers=bearer(admin_key))


async def test_created_key_works_at_once_and_revoked_is_refused_at_once_everywhere(
    pair: tuple[Gateway, Gateway, str],
) -> None:
    a, b, root = pair
    made = await admin(a.url, root, "POST", "/v1/admin/keys", {"tenant": "acme", "tier": "free", "name": "ci"})
    assert made.status_code == 201, made.text
    body = made.json()
    secret, key_id = body["key"], body["id"]
    assert body["state"] == "active" and body["prefix"] == secret[:10]
    # Works at once on both gateways (and each now holds it in its 60 s cache).
    assert (await chat(a.url, secret)).status_code == 200
    assert (await chat(b.url, secret)).status_code == 200
    sdk = openai.AsyncOpenAI(base_url=f"{b.url}/v1", api_key=secret, max_retries=0)
    got = await sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}])
    assert got.choices[0].message.content == "Hello"

    # The secret never appears again: not in the list, not in the key's own view.
    listed = (await admin(b.url, root, "GET", "/v1/admin/keys?tenant=acme")).json()["data"]
    assert key_id in [k["id"] for k in listed] and {k["tenant"] for k in listed} == {"acme"}
    assert all("key" not in k for k in listed) and secret not in str(listed)
    one = (await admin(b.url, root, "GET", f"/v1/admin/keys/{key_id}")).json()
    assert one["name"] == "ci" and "key" not in one

    revoked = await admin(a.url, root, "POST", f"/v1/admin/keys/{key_id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    # At once on the other gateway too, though its cache would keep the key for another minute.
    for url in (b.url, a.url):
        r = await chat(url, secret)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "unauthorized"
    with pytest.raises(openai.AuthenticationError):
        await sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}])
    # DELETE is the same revoke; a revoked key cannot be rotated or changed back.
    assert (await admin(b.url, root, "DELETE", f"/v1/admin/keys/{key_id}")).json()["state"] == "revoked"
    assert (await admin(b.url, root, "POST", f"/v1/admin/keys/{key_id}/rotate")).status_code == 404
    assert (await admin(b.url, root, "PATCH", f"/v1/admin/keys/{key_id}", {"name": "x"})).status_code == 404


async def test_rotated_key_old_secret_dead_at_once_new_one_works(pair: tuple[Gateway, Gateway, str]) -> None:
    a, b, root = pair
    made = (await admin(a.url, root, "POST", "/v1/admin/keys", {"tenant": "acme"})).json()
    old = made["key"]
    assert (await chat(a.url, old)).status_code == 200
    assert (await chat(b.url, old)).status_code == 200
    rotated = await admin(b.url, root, "POST", f"/v1/admin/keys/{made['id']}/rotate")
    assert rotated.status_code == 200
    new = rotated.json()["key"]
    assert new != old and rotated.json()["id"] == made["id"] and rotated.json()["rotated_at"]
    for url in (a.url, b.url):
        assert (await chat(url, old)).status_code == 401
        assert (await chat(url, new)).status_code == 200


async def test_models_expiry_and_patch(pair: tuple[Gateway, Gateway, str]) -> None:
    a, b, root = pair
    made = (await admin(a.url, root, "POST", "/v1/admin/keys", {"tenant": "acme", "models": [OTHER]})).json()
    key = made["key"]
    r = await chat(a.url, key)
    assert r.status_code == 403
    err = r.json()["error"]
    assert err["code"] == "forbidden" and err["type"] == "permission_error"
    assert MODEL in err["message"] and OTHER in err["message"]
    # The Anthropic route answers in its own shape, with the same refusal.
    async with httpx.AsyncClient(base_url=b.url) as c:
        msg = await c.post(
            "/v1/messages",
            json={"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-api-key": key},
        )
    assert msg.status_code == 403 and msg.json()["type"] == "error"

    # A change on one gateway reaches the other's cache at once.
    patched = await admin(a.url, root, "PATCH", f"/v1/admin/keys/{made['id']}", {"models": [MODEL, OTHER]})
    assert patched.status_code == 200 and patched.json()["models"] == sorted([MODEL, OTHER])
    assert (await chat(b.url, key)).status_code == 200
    assert (await chat(a.url, key)).status_code == 200

    # Expired: 401, saying so. (Set through the store: the API refuses an expiry in the past.)
    past = await admin(a.url, root, "PATCH", f"/v1/admin/keys/{made['id']}", {"expires_at": "2001-01-01T00:00:00Z"})
    assert past.status_code == 400 and "past" in past.json()["error"]["message"]
    await a.keys.update(made["id"], expires=now_ms() - 1)
    await a.app.state.gateway.key_policy.announce(made["id"], "updated")
    for url in (a.url, b.url):
        r = await chat(url, key)
        assert r.status_code == 401 and "expired" in r.json()["error"]["message"]
    view = (await admin(b.url, root, "GET", f"/v1/admin/keys/{made['id']}")).json()
    assert view["state"] == "expired"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/admin/keys", {"tenant": "acme", "tier": "gold"}),
        ("POST", "/v1/admin/keys", {"tenant": "acme", "budget_tokens_per_day": 0}),
        ("POST", "/v1/admin/keys", {"tenant": "acme", "expires_at": "soon"}),
        ("POST", "/v1/admin/keys", {"tier": "free"}),
        ("POST", "/v1/admin/keys", {"tenant": "acme", "models": "all"}),
        ("PATCH", "/v1/admin/keys/key_x", {"tier": "gold"}),
        ("GET", "/v1/admin/keys/bad.id", None),
        ("GET", "/v1/admin/keys/key_x/usage?since=yesterday", None),
    ],
)
async def test_bad_input_is_400(pair: tuple[Gateway, Gateway, str], method: str, path: str, body: Any) -> None:
    a, _, root = pair
    r = await admin(a.url, root, method, path, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "bad_request"


async def test_only_admins_manage_keys(pair: tuple[Gateway, Gateway, str]) -> None:
    a, _, root = pair
    user = (await admin(a.url, root, "POST", "/v1/admin/keys", {"tenant": "acme"})).json()["key"]
    assert (await admin(a.url, user, "GET", "/v1/admin/keys")).status_code == 403
    assert (await admin(a.url, user, "POST", "/v1/admin/keys", {"tenant": "acme"})).status_code == 403
    async with httpx.AsyncClient(base_url=a.url) as c:
        assert (await c.get("/v1/admin/keys")).status_code == 401
    assert (await admin(a.url, root, "GET", "/v1/admin/keys/key_nope")).status_code == 404


async def test_budget_spent_on_two_gateways_is_429_naming_it(pair: tuple[Gateway, Gateway, str]) -> None:
    a, b, root = pair
    budget = PER_REQUEST + 1  # the second request spends past it
    made = (
        await admin(a.url, root, "POST", "/v1/admin/keys", {"tenant": "acme", "budget_tokens_per_day": budget})
    ).json()
    key = made["key"]
    assert (await chat(a.url, key)).status_code == 200
    assert (await chat(b.url, key)).status_code == 200  # under the budget: 45 of 46 spent
    for url in (a.url, b.url):
        r = await chat(url, key)
        assert r.status_code == 429, r.text
        err = r.json()["error"]
        assert err["code"] == "rate_limited" and err["budget"] == "day"
        assert (err["spent"], err["limit"]) == (2 * PER_REQUEST, budget)
        midnight = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
        assert err["resets_at"] == midnight and midnight in err["message"]
        assert 1 <= int(r.headers["Retry-After"]) <= 86400
    # Raising the budget admits the key again, at once on both gateways.
    await admin(b.url, root, "PATCH", f"/v1/admin/keys/{made['id']}", {"budget_tokens_per_day": 10 * budget})
    assert (await chat(a.url, key)).status_code == 200
    # A month budget refuses likewise and says so.
    await admin(a.url, root, "PATCH", f"/v1/admin/keys/{made['id']}", {"budget_tokens_per_month": PER_REQUEST})
    r = await chat(b.url, key)
    assert r.status_code == 429 and r.json()["error"]["budget"] == "month"
    assert r.json()["error"]["resets_at"].endswith("-01T00:00:00Z")


async def test_embeddings_take_the_keys_models_and_budget(
    pair: tuple[Gateway, Gateway, str], responder: Responder
) -> None:
    """`/v1/embeddings` (not a streamed run) checks the key's models and debits its budget as chat does."""
    a, b, root = pair

    async def on_embed(q: EmbedRequest) -> EmbedReply:
        rows = np.zeros((len(q.texts), 384), dtype="<f4")
        return EmbedReply(
            model=EMBEDDING, dim=384, vectors=base64.b64encode(rows.tobytes()).decode(), tokens=[30] * len(q.texts)
        )

    sub = await responder.bus.subscribe(subjects.EMBEDDINGS, EmbedRequest, on_embed)
    await responder.bus.flush()
    try:
        chat_only = (await admin(a.url, root, "POST", "/v1/admin/keys", {"tenant": "acme", "models": [MODEL]})).json()
        sdk = openai.AsyncOpenAI(base_url=f"{a.url}/v1", api_key=chat_only["key"], max_retries=0)
        with pytest.raises(openai.PermissionDeniedError):
            await sdk.embeddings.create(model=EMBEDDING, input="a")
        # Its canonical name is what the list names, whichever alias the request used.
        budgeted = (
            await admin(
                a.url,
                root,
                "POST",
                "/v1/admin/keys",
                {"tenant": "acme", "models": [EMBEDDING], "budget_tokens_per_day": 50},
            )
        ).json()
        sdk = openai.AsyncOpenAI(base_url=f"{b.url}/v1", api_key=budgeted["key"], max_retries=0)
        await sdk.embeddings.create(model=f"sentence-transformers/{EMBEDDING}", input=["a", "b"])  # 60 tokens
        with pytest.raises(openai.RateLimitError) as e:
            await sdk.embeddings.create(model=EMBEDDING, input="c")
        assert "per day" in e.value.message
        assert (await chat(a.url, budgeted["key"])).status_code == 403  # the chat model is not in its list
    finally:
        await responder.bus.unsubscribe(sub)
