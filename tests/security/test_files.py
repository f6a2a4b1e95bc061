"""Issue 28, item 5: a 9,856-byte PDF whose FlateDecode stream inflates to 6.3 MB of text operators once
held the gateway 31 CPU-s before its 413. It is read in a child process under limits now: 413 naming
the limit within about a second, and an ordinary PDF still reads."""

from __future__ import annotations

import time

import httpx

from tests.security.conftest import assert_error, assert_healthy
from tests.services.gateway.product import pdf_bomb, pdf_with


def test_a_pdf_decompression_bomb_is_413_at_once(client: httpx.Client) -> None:
    bomb = pdf_bomb(6.3)
    assert len(bomb) < 20_000
    t0 = time.monotonic()
    r = client.post("/v1/files", files={"file": ("bomb.pdf", bomb, "application/pdf")})
    elapsed = time.monotonic() - t0
    assert_error(r, 413, "payload_too_large")
    assert "decompress" in r.json()["error"]["message"]
    assert elapsed < 10  # generous: about a second of the server's own work (31 CPU-s before)
    ok = client.post(
        "/v1/files", files={"file": ("spec.pdf", pdf_with("The gate code is ZEBRA-42."), "application/pdf")}
    )
    assert ok.status_code == 201, ok.text
    assert "ZEBRA-42" in client.get(f"/v1/files/{ok.json()['id']}").json()["text"]
    assert_healthy(client)
