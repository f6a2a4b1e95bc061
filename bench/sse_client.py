"""A lean load generator for streamed `/v1/chat/completions`: raw HTTP/1.1 over asyncio streams.

At thousands of tokens a second the client shares the machine with the stack it measures, so it does
the least a client can: one keep-alive connection per stream slot, one request written as bytes, and
per read of the socket a timestamp and a count of the content deltas in it (a bytes regex; no JSON
parse, no SSE object per event). It never reads a field it does not report. Its own CPU is measured by
the caller and reported apart.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from bench.pipeline_client import request_body

# A content delta with text in it (the opening `"content":""` frame carries none).
_DELTA = re.compile(rb'"delta":\{"content":"[^"]')
_COMPLETION = re.compile(rb'"completion_tokens":(\d+)')
_DONE = b"data: [DONE]"
_END = b"\r\n0\r\n\r\n"  # the last chunk of a chunked body


@dataclass
class Streamed:
    """One streamed request as the client saw it."""

    rid: str
    t_send_ns: int
    delta_ns: list[int] = field(default_factory=list)  # one entry per content delta (reads may carry several)
    completion_tokens: int | None = None
    error: str | None = None

    @property
    def ttft_ms(self) -> float | None:
        return (self.delta_ns[0] - self.t_send_ns) / 1e6 if self.delta_ns else None

    @property
    def itl_ms(self) -> float | None:
        """The time per token the client saw after its first delta (first delta to last, over the tokens
        after the first): its inter-token latency, however the tokens were grouped into deltas."""
        n = self.completion_tokens
        if not n or n < 2 or len(self.delta_ns) < 2:
            return None
        return (self.delta_ns[-1] - self.delta_ns[0]) / 1e6 / (n - 1)

    @property
    def gaps_ms(self) -> list[float]:
        return [(b - a) / 1e6 for a, b in zip(self.delta_ns, self.delta_ns[1:], strict=False)]


class Connection:
    def __init__(self, host: str, port: int, api_key: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Bearer {api_key}"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        return self.reader, self.writer

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    async def stream(self, body: bytes) -> Streamed:
        reused = self.writer is not None and not self.writer.is_closing()
        reader, writer = await self._open()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: {self.auth}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        s = Streamed(rid="", t_send_ns=time.time_ns())
        writer.write(head + body)
        try:
            try:
                status, headers = await self._head(reader)
            except (OSError, asyncio.IncompleteReadError):
                if not reused:
                    raise
                # The server closed the kept-alive connection before reading this request (llama-server does
                # after each stream): it is sent once more, on a new connection, and timed from there.
                await self.close()
                reader, writer = await self._open()
                s.t_send_ns = time.time_ns()
                writer.write(head + body)
                status, headers = await self._head(reader)
            s.rid = headers.get("x-request-id", "")
            if status != 200:
                n = int(headers.get("content-length", "0"))
                s.error = f"HTTP {status}: {(await reader.readexactly(n)).decode(errors='replace')[:300]}"
                if headers.get("connection") == "close":
                    await self.close()
                return s
            tail = b""
            while True:
                data = await reader.read(65536)
                now = time.time_ns()
                if not data:
                    s.error = "connection closed mid-stream"
                    await self.close()
                    return s
                buf = tail + data
                # A delta split across two reads is counted once, in the second: a match that starts 21 bytes
                # (its length less one) before the tail ends cannot lie wholly in the tail.
                for _ in _DELTA.finditer(buf, max(0, len(tail) - 21)):
                    s.delta_ns.append(now)
                if b'"error"' in data:
                    s.error = data.decode(errors="replace")[:300]
                if m := _COMPLETION.search(buf):
                    s.completion_tokens = int(m.group(1))
                if _DONE in buf and buf.endswith(_END):
                    return s
                tail = buf[-64:]
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            s.error = f"{type(e).__name__}: {e}"
            await self.close()
            return s

    @staticmethod
    async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        return status, headers


def chat_body(model: str, text: str, tokens: int) -> bytes:
    return json.dumps(request_body(model, text, tokens)).encode()


async def drive(
    urls: list[str], api_key: str, model: str, texts: Iterable[str], concurrency: int, tokens: int
) -> list[Streamed]:
    """`concurrency` streams open at every moment (closed loop, one connection each) until every text is
    sent; the connections alternate between `urls` (the gateway replicas)."""
    todo = iter(texts)
    out: list[Streamed] = []

    async def worker(i: int) -> None:
        host, port = urls[i % len(urls)].removeprefix("http://").rstrip("/").split(":")
        conn = Connection(host, int(port), api_key)
        try:
            for text in todo:  # one iterator shared by every worker: each text is sent once
                out.append(await conn.stream(chat_body(model, text, tokens)))
        finally:
            await conn.close()

    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return out
