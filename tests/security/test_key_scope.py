"""Issue 38, item 4: a key means the same on every route. Its model list holds wherever a model is named
(token counting too), aliases are stored as the models they name, and a name no model has is refused
when the key is made or changed, with nothing stored."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.models.registry import GEMMA_MODEL_NAME
from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME
from tests.security.conftest import assert_error

HI = [{"role": "user", "content": "hi"}]
# Every route that names a model, with a body naming the default chat model (or the embedding model).
ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/tokenize", {"prompt": "hi"}),
    ("/tokenize", {"model": "smollm2", "messages": HI}),
    ("/detokenize", {"tokens": [1, 2]}),
    ("/v1/messages/count_tokens", {"model": "smollm2", "messages": HI}),
    ("/v1/messages", {"model": "smollm2", "max_tokens": 2, "messages": HI}),
    ("/v1/chat/completions", {"model": "smollm2", "max_tokens": 2, "messages": HI}),
    ("/v1/completions", {"model": "smollm2", "max_tokens": 2, "prompt": "hi"}),
    ("/v1/responses", {"model": "smollm2", "max_output_tokens": 16, "input": "hi"}),
    ("/chat", {"chatId": "scope-1", "text": "hi", "max_tokens": 2}),
]


def admin(stack: Stack, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {stack.admin_key}"}
    return httpx.request(method, f"{stack.url}{path}", json=body, headers=headers, timeout=60)


def new_key(stack: Stack, tenant: str, models: list[str]) -> dict[str, Any]:
    r = admin(stack, "POST", "/v1/admin/keys", {"tenant": tenant, "models": models})
    assert r.status_code == 201, r.text
    made: dict[str, Any] = r.json()
    return made


@pytest.fixture(scope="module")
def tenant() -> str:
    return f"scope-{uuid.uuid4().hex[:6]}"


def test_aliases_are_stored_as_models_and_unknown_names_refused(stack: Stack, tenant: str) -> None:
    made = new_key(stack, tenant, ["gemma3-270m", "SMOLLM2", "all-MiniLM-L6-v2"])
    assert sorted(made["models"]) == sorted([GEMMA_MODEL_NAME, DEFAULT_MODEL_NAME, "all-MiniLM-L6-v2"])
    before = admin(stack, "GET", f"/v1/admin/keys?tenant={tenant}").json()["data"]
    r = admin(stack, "POST", "/v1/admin/keys", {"tenant": tenant, "models": ["smollm2", "gpt-9-ultra"]})
    assert_error(r, 400, "bad_request")
    assert "gpt-9-ultra" in r.json()["error"]["message"]
    patched = admin(stack, "PATCH", f"/v1/admin/keys/{made['id']}", {"models": ["no-such-model"]})
    assert_error(patched, 400, "bad_request")
    # Nothing was stored: the same keys, the same model list.
    after = admin(stack, "GET", f"/v1/admin/keys?tenant={tenant}").json()["data"]
    assert [(k["id"], k["models"]) for k in after] == [(k["id"], k["models"]) for k in before]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[f"{p}:{i}" for i, (p, _) in enumerate(ROUTES)])
def test_a_key_limited_to_another_model_is_refused_on_every_route(
    stack: Stack, tenant: str, path: str, body: dict[str, Any]
) -> None:
    key = new_key(stack, tenant, ["gemma3-270m"])["key"]
    r = httpx.post(f"{stack.url}{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert r.status_code == 403, (path, r.status_code, r.text[:300])
    if not path.startswith("/v1/messages"):
        assert_error(r, 403, "forbidden")


def test_a_key_limited_by_alias_works_where_its_model_is_named(stack: Stack, tenant: str) -> None:
    key = new_key(stack, tenant, ["smollm2"])
    assert key["models"] == [DEFAULT_MODEL_NAME]
    headers = {"Authorization": f"Bearer {key['key']}"}
    with httpx.Client(base_url=stack.url, headers=headers, timeout=120) as c:
        assert c.post("/tokenize", json={"prompt": "hi"}).status_code == 200
        assert c.post("/tokenize", json={"model": "SmolLM2-135M-Instruct", "prompt": "hi"}).status_code == 200
        assert c.post("/detokenize", json={"tokens": [1, 2]}).status_code == 200
        counted = c.post("/v1/messages/count_tokens", json={"model": "smollm2", "messages": HI})
        assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
        assert_error(c.post("/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": "a"}), 403, "forbidden")
