"""File uploads (text, markdown, PDF), their limits, and attaching them to a chat's prompt."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from switchyard.libs.bus import NatsServer
from switchyard.services.gateway.product import files_api
from tests.services.gateway.product import Product, pdf_with, product
from tests.services.gateway.test_conversations_api import assert_error, chat


@pytest.fixture(scope="module")
async def p(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Product]:
    async with product(nats_server, tmp_path_factory.mktemp("files")) as prod:
        yield prod


@pytest.fixture
async def c(p: Product) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(), timeout=20) as client:
        yield client


async def upload(
    c: httpx.AsyncClient, name: str, data: bytes, media: str | None = "text/plain", **fields: str
) -> httpx.Response:
    part = (name, data, media) if media is not None else (name, data)
    return await c.post("/v1/files", files={"file": part}, data=fields or None)


async def test_text_upload_list_get_delete(c: httpx.AsyncClient) -> None:
    r = await upload(c, "notes.txt", "Line one\r\nSecond line — ünïcode\n".encode())
    assert r.status_code == 201, r.text
    info = r.json()
    assert info["name"] == "notes.txt" and info["media_type"] == "text/plain" and info["chat_id"] is None
    assert info["id"].startswith("file-") and info["chars"] == len("Line one\nSecond line — ünïcode\n")
    assert info["id"] in {f["id"] for f in (await c.get("/v1/files")).json()["items"]}
    got = (await c.get(f"/v1/files/{info['id']}")).json()
    assert got["text"] == "Line one\nSecond line — ünïcode\n"
    r = await c.delete(f"/v1/files/{info['id']}")
    assert r.status_code == 200 and r.json() == {"id": info["id"], "deleted": True}
    assert_error(await c.get(f"/v1/files/{info['id']}"), 404, "not_found")
    assert_error(await c.delete(f"/v1/files/{info['id']}"), 404, "not_found")


async def test_markdown_by_suffix_and_pdf_text(c: httpx.AsyncClient) -> None:
    r = await upload(c, "dir/readme.md", b"# Title\n\n* point", "application/octet-stream")
    assert r.status_code == 201, r.text
    assert r.json()["media_type"] == "text/markdown" and r.json()["name"] == "readme.md"
    r = await upload(c, "spec.pdf", pdf_with("The warehouse code is ZEBRA-42."), "application/pdf")
    assert r.status_code == 201, r.text
    assert r.json()["media_type"] == "application/pdf"
    assert "ZEBRA-42" in (await c.get(f"/v1/files/{r.json()['id']}")).json()["text"]


async def test_rejections(c: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_error(await upload(c, "bad.txt", b"ok \xff\xfe not utf-8"), 400, "bad_request")
    assert_error(await upload(c, "pic.png", b"\x89PNG....", "image/png"), 415, "unsupported_media_type")
    assert_error(await upload(c, "run.exe", b"MZ...", "application/octet-stream"), 415, "unsupported_media_type")
    assert_error(await upload(c, "nul.txt", b"a\x00b"), 415, "unsupported_media_type")
    assert_error(await upload(c, "fake.pdf", b"not a pdf", "application/pdf"), 400, "bad_request")
    assert_error(await upload(c, "broken.pdf", b"%PDF-1.4\ngarbage", "application/pdf"), 400, "bad_request")
    assert_error(await upload(c, "empty.txt", b"  \n"), 400, "bad_request")
    # Over the context service's character limit (50k in this harness).
    assert_error(await upload(c, "big.txt", b"a" * 60_000), 413, "payload_too_large")
    # Over the gateway's byte limit: refused while reading, before anything reaches context.
    monkeypatch.setattr(files_api, "MAX_UPLOAD_BYTES", 10_000)
    assert_error(await upload(c, "huge.txt", b"a" * 20_000), 413, "payload_too_large")
    monkeypatch.undo()
    assert_error(await c.post("/v1/files", json={"text": "hi"}), 415, "unsupported_media_type")
    assert_error(await c.post("/v1/files", data={"name": "x"}, files={"other": ("a.txt", b"x")}), 400, "bad_request")
    r = await c.post(
        "/v1/files", content=b"--xyz\r\nbroken", headers={"content-type": "multipart/form-data; boundary=xyz"}
    )
    assert_error(r, 400, "bad_request")
    assert_error(await upload(c, "a.txt", b"hello", chatId="no such chat!"), 400, "bad_request")


async def test_attach_to_a_chat_puts_the_text_in_its_prompt(p: Product, c: httpx.AsyncClient) -> None:
    fid = (await upload(c, "faq.md", b"The secret launch day is Thursday the 9th.", "text/markdown")).json()["id"]
    chat_id = uuid.uuid4().hex
    r = await chat(c, chat_id, "When is the launch?", fileIds=[fid])
    work = p.works[r.headers["x-request-id"]]
    assert "The secret launch day is Thursday the 9th." in work.prompt
    assert work.prompt.index("Thursday the 9th") < work.prompt.index("When is the launch?")
    # Still in the next message's prompt, and attached once however often it is named again.
    r = await chat(c, chat_id, "And what day is that?", fileIds=[fid, fid])
    assert "Thursday the 9th" in p.works[r.headers["x-request-id"]].prompt
    attached = (await c.get("/v1/files", params={"chatId": chat_id})).json()["items"]
    assert [f["name"] for f in attached] == ["faq.md"]
    # The library copy stays; deleting the conversation drops only the attached one.
    await c.delete(f"/v1/conversations/{chat_id}")
    assert (await c.get(f"/v1/files/{fid}")).status_code == 200
    assert (await c.get("/v1/files", params={"chatId": chat_id})).json()["items"] == []


async def test_upload_straight_into_a_chat(p: Product, c: httpx.AsyncClient) -> None:
    chat_id = uuid.uuid4().hex
    r = await upload(c, "menu.txt", b"Soup of the day: lentil.", chatId=chat_id)
    assert r.status_code == 201 and r.json()["chat_id"] == chat_id
    r = await chat(c, chat_id, "What soup is there?")
    assert "Soup of the day: lentil." in p.works[r.headers["x-request-id"]].prompt


async def test_another_tenants_files_are_404(p: Product, c: httpx.AsyncClient) -> None:
    fid = (await upload(c, "private.txt", b"ann's private notes")).json()["id"]
    chat_id = uuid.uuid4().hex
    await chat(c, chat_id, "hello")
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.eve)) as eve:
        # The same chat id is eve's own conversation: the file goes there, never into ann's.
        r = await upload(eve, "x.txt", b"eve's file", chatId=chat_id)
        assert r.status_code == 201 and r.json()["chat_id"] == chat_id
        assert [f["name"] for f in (await eve.get("/v1/files", params={"chatId": chat_id})).json()["items"]] == [
            "x.txt"
        ]
        assert_error(await eve.get(f"/v1/files/{fid}"), 404, "not_found")
        assert_error(await eve.delete(f"/v1/files/{fid}"), 404, "not_found")
        assert fid not in {f["id"] for f in (await eve.get("/v1/files")).json()["items"]}
        before = len(p.works)
        r = await eve.post("/chat", json={"chatId": uuid.uuid4().hex, "text": "read it", "fileIds": [fid]})
        assert_error(r, 404, "not_found")
        assert len(p.works) == before
    assert (await c.get(f"/v1/files/{fid}")).status_code == 200
    assert (await c.get("/v1/files", params={"chatId": chat_id})).json()["items"] == []
    r = await chat(c, chat_id, "anything new?")
    assert "eve's file" not in p.works[r.headers["x-request-id"]].prompt
    assert_error(await c.post("/chat", json={"chatId": "x1", "text": "hi", "fileIds": ["f"] * 11}), 400, "bad_request")
