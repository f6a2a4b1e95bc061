"""Conversations, files, memory and tenant instructions through the whole pipeline."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.store.db import database_url
from switchyard.libs.store.keys import KeyStore
from tests.e2e.conftest import admin_record, chat
from tests.wait import wait_until


async def _new_key(stack: Stack, tenant: str) -> str:
    # The gateway's own store (SQLite under the stack's data dir): a key made here works at once.
    store = await KeyStore.open(database_url(None, str(stack.data_dir), "gateway"))
    try:
        _, raw = await store.create(tenant, "pro", user="other")
    finally:
        await store.close()
    return raw


OTHER_TENANT = f"e2e-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def other(stack: Stack) -> Iterator[httpx.Client]:
    """A client with a key of another tenant, `OTHER_TENANT`."""
    raw = asyncio.run(_new_key(stack, OTHER_TENANT))
    with httpx.Client(base_url=stack.url, timeout=120, headers={"Authorization": f"Bearer {raw}"}) as c:
        yield c


def test_file_attached_to_a_message_is_in_its_prompt(client: httpx.Client, stack: Stack) -> None:
    fact = "The office cat at Switchyard headquarters is named Biscuit."
    r = client.post("/v1/files", files={"file": ("office.md", f"# Office notes\n\n{fact}\n".encode(), "text/markdown")})
    assert r.status_code == 201, r.text
    chat_id = f"c-{uuid.uuid4().hex[:8]}"
    evs, resp = chat(client, chat_id, "What is the name of the office cat?", fileIds=[r.json()["id"]])
    assert evs and evs[-1].event == "done", [e.event for e in evs] or resp.text
    rec = admin_record(stack, resp.headers["x-request-id"], lambda x: "prompt" in x["record"])
    assert fact in rec["record"]["prompt"]
    assert [f["name"] for f in client.get("/v1/files", params={"chatId": chat_id}).json()["items"]] == ["office.md"]


def test_first_answer_titles_the_conversation_and_it_is_listed(client: httpx.Client, other: httpx.Client) -> None:
    chat_id = f"c-{uuid.uuid4().hex[:8]}"
    evs, _ = chat(client, chat_id, "Name three colours of the rainbow.")
    assert evs[-1].event == "done"
    listed = client.get("/v1/conversations", params={"limit": 5}).json()["items"]
    top = next(c for c in listed if c["chat_id"] == chat_id)
    assert top["title"] and top["turns"] == 1
    assert client.get(f"/v1/conversations/{chat_id}").json()["title"] == top["title"]
    # Another tenant sees none of it.
    for r in (
        other.get(f"/v1/conversations/{chat_id}"),
        other.patch(f"/v1/conversations/{chat_id}", json={"title": "x"}),
        other.delete(f"/v1/conversations/{chat_id}"),
    ):
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert chat_id not in {c["chat_id"] for c in other.get("/v1/conversations").json()["items"]}


def test_remember_that_saves_a_memory(client: httpx.Client) -> None:
    colour = f"teal-{uuid.uuid4().hex[:4]}"
    evs, _ = chat(client, f"c-{uuid.uuid4().hex[:8]}", f"Please remember that my favourite colour is {colour}.")
    assert evs[-1].event == "done", [e.event for e in evs]
    texts = [m["text"] for m in client.get("/v1/memory").json()["items"]]
    assert f"my favourite colour is {colour}" in texts


def test_tenant_instructions_reach_the_prompt(stack: Stack, other: httpx.Client) -> None:
    # Another tenant's, so the instructions change no other test's prompts.
    text = f"Sign every answer with the word Quokka{uuid.uuid4().hex[:4]}."
    admin = {"Authorization": f"Bearer {stack.admin_key}"}
    r = httpx.put(f"{stack.url}/v1/admin/instructions", json={"tenant": OTHER_TENANT, "text": text}, headers=admin)
    assert r.status_code == 200, r.text
    evs, resp = chat(other, f"c-{uuid.uuid4().hex[:8]}", "Hello!")
    assert evs[-1].event == "done"
    rec = admin_record(stack, resp.headers["x-request-id"], lambda x: "prompt" in x["record"])
    assert text in rec["record"]["prompt"]


def test_conversation_search_finds_a_question(client: httpx.Client) -> None:
    word = f"zebu{uuid.uuid4().hex[:6]}"
    chat_id = f"c-{uuid.uuid4().hex[:8]}"
    chat(client, chat_id, f"What is a {word}?")
    hits = wait_until(
        lambda: client.get("/v1/conversations/search", params={"q": word}).json()["hits"], 5, f"a hit for {word}", 0.2
    )
    assert hits and {h["chat_id"] for h in hits} == {chat_id}  # a hit per matching turn, and the title
