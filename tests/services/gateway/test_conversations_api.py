"""Conversations, memory and tenant instructions through the gateway, against the real context service."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from switchyard.libs.bus import NatsServer
from tests.services.gateway.product import ANSWER, Product, product


@pytest.fixture(scope="module")
async def p(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Product]:
    async with product(nats_server, tmp_path_factory.mktemp("product")) as prod:
        yield prod


@pytest.fixture
async def c(p: Product) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(), timeout=20) as client:
        yield client


def assert_error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "code", "message"}
    assert body["error"]["code"] == code


async def chat(c: httpx.AsyncClient, chat_id: str, text: str, **extra: Any) -> httpx.Response:
    r = await c.post("/chat", json={"chatId": chat_id, "text": text, **extra})
    assert r.status_code == 200, r.text
    assert "event: done" in r.text, r.text
    return r


async def test_create_list_newest_first_with_pages(p: Product) -> None:
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.bob)) as c:  # a user with no chats yet
        made = []
        for i in range(3):
            r = await c.post("/v1/conversations", json={"title": f"Trip {i}"} if i != 1 else None)
            assert r.status_code == 201, r.text
            made.append(r.json())
            await asyncio.sleep(0.01)  # distinct update times: the order is by last activity
        assert made[0]["title"] == "Trip 0" and made[1]["title"] is None and len(made[1]["chat_id"]) == 32
        first = (await c.get("/v1/conversations", params={"limit": 2})).json()
        assert [x["chat_id"] for x in first["items"]] == [made[2]["chat_id"], made[1]["chat_id"]]
        assert first["next_cursor"]
        rest = (await c.get("/v1/conversations", params={"limit": 2, "cursor": first["next_cursor"]})).json()
        assert [x["chat_id"] for x in rest["items"]] == [made[0]["chat_id"]] and rest["next_cursor"] is None
        # Writing to the oldest one brings it to the top.
        await chat(c, made[0]["chat_id"], "hello")
        top = (await c.get("/v1/conversations", params={"limit": 1})).json()["items"][0]
        assert top["chat_id"] == made[0]["chat_id"] and top["turns"] == 1 and top["title"] == "Trip 0"
        assert_error(await c.get("/v1/conversations", params={"limit": 0}), 400, "bad_request")
        assert_error(await c.post("/v1/conversations", json={"title": "  "}), 400, "bad_request")
        assert_error(await c.post("/v1/conversations", json={"chatId": "bad id!"}), 400, "bad_request")


async def test_create_with_own_id_and_first_answer_titles_it(c: httpx.AsyncClient) -> None:
    chat_id = "mine-" + uuid.uuid4().hex[:8]
    r = await c.post("/v1/conversations", json={"chatId": chat_id})
    assert r.status_code == 201 and r.json()["chat_id"] == chat_id and r.json()["title"] is None
    await chat(c, chat_id, "What is the capital of France?")
    conv = (await c.get(f"/v1/conversations/{chat_id}")).json()
    assert conv["title"] == ANSWER
    assert [(t["user_text"], t["answer"], t["status"]) for t in conv["turns"]] == [
        ("What is the capital of France?", ANSWER, "complete")
    ]
    listed = (await c.get("/v1/conversations")).json()["items"]
    assert any(x["chat_id"] == chat_id and x["title"] == ANSWER for x in listed)


async def test_rename_delete_search(c: httpx.AsyncClient) -> None:
    chat_id = uuid.uuid4().hex
    await chat(c, chat_id, "Tell me about zeppelins")
    r = await c.patch(f"/v1/conversations/{chat_id}", json={"title": "  Airships  "})
    assert r.status_code == 200 and r.json()["title"] == "Airships"
    assert (await c.get(f"/v1/conversations/{chat_id}")).json()["title"] == "Airships"
    assert_error(await c.patch(f"/v1/conversations/{chat_id}", json={"title": ""}), 400, "bad_request")
    assert_error(await c.patch(f"/v1/conversations/{chat_id}", json={}), 400, "bad_request")
    assert_error(await c.patch("/v1/conversations/nope", json={"title": "x"}), 404, "not_found")

    hits = (await c.get("/v1/conversations/search", params={"q": "zeppelin"})).json()["hits"]
    assert [h["chat_id"] for h in hits] == [chat_id] and "zeppelin" in hits[0]["snippet"].lower()
    by_title = (await c.get("/v1/conversations/search", params={"q": "airSHIPS"})).json()["hits"]
    assert by_title and by_title[0]["chat_id"] == chat_id
    assert (await c.get("/v1/conversations/search", params={"q": "no-such-words-here"})).json()["hits"] == []
    assert_error(await c.get("/v1/conversations/search"), 400, "bad_request")

    r = await c.delete(f"/v1/conversations/{chat_id}")
    assert r.status_code == 200 and r.json() == {"id": chat_id, "deleted": True}
    assert_error(await c.get(f"/v1/conversations/{chat_id}"), 404, "not_found")
    assert_error(await c.delete(f"/v1/conversations/{chat_id}"), 404, "not_found")
    assert (await c.get("/v1/conversations/search", params={"q": "zeppelin"})).json()["hits"] == []


def _as_seen(r: httpx.Response, chat_id: str) -> tuple[int, object]:
    """A response with what differs between any two requests (ids, times) left out."""

    def scrub(v: object) -> object:
        if isinstance(v, dict):
            return {k: scrub(x) for k, x in v.items() if k not in ("id", "rid", "turn_id", "created_ms", "updated_ms")}
        if isinstance(v, list):
            return [scrub(x) for x in v]
        return v.replace(chat_id, "<id>") if isinstance(v, str) else v

    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return r.status_code, [
            line.split(":", 1)[1].strip() for line in r.text.splitlines() if line.startswith("event:")
        ]
    return r.status_code, scrub(r.json())


async def test_two_tenants_same_chat_id_are_independent(p: Product, c: httpx.AsyncClient) -> None:
    """Chat ids are per tenant: eve can use the id ann uses, sees none of ann's turns, and nothing eve
    gets back depends on whether ann uses the id (no 404 on a taken id, no way to take it over)."""
    taken, fresh = "demo-" + uuid.uuid4().hex[:8], "demo-" + uuid.uuid4().hex[:8]
    await chat(c, taken, "secret plans for the launch")

    async def as_eve(eve: httpx.AsyncClient, chat_id: str) -> list[object]:
        path = f"/v1/conversations/{chat_id}"
        out: list[object] = [
            _as_seen(await eve.get(path), chat_id),
            _as_seen(await eve.patch(path, json={"title": "mine"}), chat_id),
            _as_seen(await eve.delete(path), chat_id),
            _as_seen(await eve.post("/v1/conversations", json={"chatId": chat_id}), chat_id),
        ]
        r = await chat(eve, chat_id, "eve's question")
        out += [_as_seen(r, chat_id), p.works[r.headers["x-request-id"]].prompt]
        r = await chat(eve, chat_id, "eve again")
        out += [_as_seen(r, chat_id), p.works[r.headers["x-request-id"]].prompt]
        out.append(_as_seen(await eve.get(path), chat_id))
        out.append(_as_seen(await eve.patch(path, json={"title": "Eve's"}), chat_id))
        out.append(_as_seen(await eve.get("/v1/conversations/search", params={"q": "secret"}), chat_id))
        listed = (await eve.get("/v1/conversations", params={"limit": 200})).json()["items"]
        out.append([(x["title"], x["turns"]) for x in listed if x["chat_id"] == chat_id])
        return out

    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.eve)) as eve:
        seen = await as_eve(eve, taken)
        assert seen == await as_eve(eve, fresh)
        assert [seen[i] for i in (0, 3)] == [
            (
                404,
                {"error": {"type": "not_found_error", "code": "not_found", "message": "conversation '<id>' not found"}},
            ),
            (201, {"chat_id": "<id>", "title": None, "turns": 0}),
        ]
        assert seen[4] == (200, ["delta", "done"]), seen[4]
        assert "secret" not in str(seen)
        conv = (await eve.get(f"/v1/conversations/{taken}")).json()
        assert conv["title"] == "Eve's" and [t["user_text"] for t in conv["turns"]] == ["eve's question", "eve again"]
        # Deleting eve's "demo" leaves ann's alone.
        assert (await eve.delete(f"/v1/conversations/{taken}")).status_code == 200
    # Ann's conversation of that id is untouched by all of that.
    conv = (await c.get(f"/v1/conversations/{taken}")).json()
    assert conv["title"] == ANSWER and [t["user_text"] for t in conv["turns"]] == ["secret plans for the launch"]
    r = await chat(c, taken, "and the date?")
    prompt = p.works[r.headers["x-request-id"]].prompt
    assert "secret plans for the launch" in prompt and "eve" not in prompt


async def test_lists_are_per_user_within_a_tenant(p: Product, c: httpx.AsyncClient) -> None:
    chat_id = uuid.uuid4().hex
    await chat(c, chat_id, "ann's own chat")
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.bob)) as bob:
        assert chat_id not in {x["chat_id"] for x in (await bob.get("/v1/conversations?limit=200")).json()["items"]}


async def test_routes_need_a_key(p: Product) -> None:
    async with httpx.AsyncClient(base_url=p.url) as anon:
        for method, path in [
            ("GET", "/v1/conversations"),
            ("POST", "/v1/conversations"),
            ("GET", "/v1/conversations/search?q=x"),
            ("PATCH", "/v1/conversations/x"),
            ("DELETE", "/v1/conversations/x"),
            ("GET", "/v1/memory"),
            ("DELETE", "/v1/memory/x"),
            ("GET", "/v1/files"),
            ("PUT", "/v1/admin/instructions"),
        ]:
            assert_error(await anon.request(method, path), 401, "unauthorized")


async def test_memory_api_and_remember_that(p: Product, c: httpx.AsyncClient) -> None:
    r = await c.post("/v1/memory", json={"text": "  I prefer metric units  "})
    assert r.status_code == 201, r.text
    item = r.json()
    assert item["text"] == "I prefer metric units" and item["source_rid"] == ""
    assert_error(await c.post("/v1/memory", json={"text": ""}), 400, "bad_request")

    chat_id = uuid.uuid4().hex
    saved = await chat(c, chat_id, "Please remember that my cat is called Tom.")
    items = (await c.get("/v1/memory")).json()["items"]
    assert [m["text"] for m in items] == ["I prefer metric units", "my cat is called Tom"]
    assert items[1]["source_rid"] == saved.headers["x-request-id"]

    later = await chat(c, uuid.uuid4().hex, "What is my cat called?")
    prompt = p.works[later.headers["x-request-id"]].prompt
    assert "my cat is called Tom" in prompt and "I prefer metric units" in prompt

    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.eve)) as eve:
        assert (await eve.get("/v1/memory")).json()["items"] == []
        assert_error(await eve.delete(f"/v1/memory/{item['id']}"), 404, "not_found")
    r = await c.delete(f"/v1/memory/{item['id']}")
    assert r.status_code == 200 and r.json()["deleted"] is True
    assert_error(await c.delete(f"/v1/memory/{item['id']}"), 404, "not_found")
    assert [m["text"] for m in (await c.get("/v1/memory")).json()["items"]] == ["my cat is called Tom"]


async def test_tenant_instructions(p: Product, c: httpx.AsyncClient) -> None:
    body = {"tenant": "acme", "text": "Always answer like a pirate."}
    assert_error(await c.put("/v1/admin/instructions", json=body), 403, "forbidden")
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.admin)) as admin:
        r = await admin.put("/v1/admin/instructions", json=body)
        assert r.status_code == 200 and r.json()["text"] == body["text"] and r.json()["updated_ms"] > 0
        got = (await admin.get("/v1/admin/instructions", params={"tenant": "acme"})).json()
        assert got["tenant"] == "acme" and got["text"] == body["text"]
        assert (await admin.get("/v1/admin/instructions")).json() == {"tenant": "ops", "text": "", "updated_ms": 0}
        assert_error(await admin.put("/v1/admin/instructions", json={"text": "x"}), 400, "bad_request")
    r = await chat(c, uuid.uuid4().hex, "hello")
    assert "Always answer like a pirate." in p.works[r.headers["x-request-id"]].prompt
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.eve)) as eve:
        r = await chat(eve, uuid.uuid4().hex, "hello")
        assert "pirate" not in p.works[r.headers["x-request-id"]].prompt


async def test_chat_page_and_its_files_are_served(p: Product) -> None:
    async with httpx.AsyncClient(base_url=p.url) as anon:  # the page itself needs no key
        r = await anon.get("/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in r.headers["content-security-policy"]
        for name in ("chat.js", "chat.markdown.js", "chat.css"):
            assert f"/static/{name}" in r.text
            asset = await anon.get(f"/static/{name}")
            assert asset.status_code == 200 and asset.content
        assert_error(await anon.get("/static/../settings.py"), 404, "not_found")
