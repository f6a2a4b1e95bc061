"""PDF text is read in a child process under limits: a decompression bomb, a slow parse and too many pages
are each 413 naming the limit, quickly; a malformed file is 400; an ordinary PDF reads as before."""

from __future__ import annotations

import time

import pytest

from switchyard.schemas import ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.product.pdf import PdfReader
from switchyard.services.gateway.settings import GatewaySettings
from tests.services.gateway.product import pdf_bomb, pdf_of, pdf_with


def reader(**limits: object) -> PdfReader:
    return PdfReader(GatewaySettings.model_validate(limits))


async def test_an_ordinary_pdf_reads() -> None:
    assert await reader().text(pdf_with("The warehouse code is ZEBRA-42.")) == "The warehouse code is ZEBRA-42."
    pages = [f"BT /F1 12 Tf 72 720 Td (page {i}) Tj ET".encode() for i in range(3)]
    assert await reader().text(pdf_of(pages, compress=True)) == "page 0\n\npage 1\n\npage 2"


async def test_a_decompression_bomb_is_413_naming_the_limit_at_once() -> None:
    bomb = pdf_bomb(6.3)  # about 10 KB that inflate to 6.3 MB of text operators (issue 28)
    assert len(bomb) < 20_000
    t0 = time.monotonic()
    with pytest.raises(ApiError) as e:
        await reader().text(bomb)
    assert e.value.code == ErrorCode.payload_too_large
    assert str(GatewaySettings().pdf_max_content_bytes) in e.value.message
    assert time.monotonic() - t0 < 10  # generous: it took 31 CPU-s before; the child starts in well under 1 s


async def test_a_parse_over_its_time_is_killed_and_413() -> None:
    # Under the content limit, but slow to read: about a CPU-second per megabyte of operators.
    slow = reader(pdf_max_content_bytes=64 * 1024 * 1024, pdf_parse_timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(ApiError) as e:
        await slow.text(pdf_bomb(12))
    assert e.value.code == ErrorCode.payload_too_large and "1 s" in e.value.message
    assert time.monotonic() - t0 < 8


async def test_too_many_pages_is_413() -> None:
    pages = [b"BT /F1 12 Tf 72 720 Td (p) Tj ET"] * 4
    with pytest.raises(ApiError) as e:
        await reader(pdf_max_pages=3).text(pdf_of(pages))
    assert e.value.code == ErrorCode.payload_too_large and "3 pages" in e.value.message


async def test_a_malformed_pdf_is_400() -> None:
    with pytest.raises(ApiError) as e:
        await reader().text(b"%PDF-1.4\ngarbage")
    assert e.value.code == ErrorCode.bad_request
