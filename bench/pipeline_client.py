"""The client side of the pipeline benchmark: streamed OpenAI requests over one httpx.AsyncClient, timed
as a user sees them, then each request's record (the engine's own figures and the spans) read back.

Every timestamp is wall-clock `time.time_ns()`, the clock the services stamp their spans with, so on
one host a client time and a span boundary can be subtracted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Sample:
    """One streamed request as the client saw it, and what the pipeline recorded about it."""

    rid: str
    text: str
    t_send_ns: int
    t_end_ns: int = 0
    status: int = 0
    delta_ns: list[int] = field(default_factory=list)  # arrival of each chunk carrying content
    completion_tokens: int | None = None
    error: str | None = None
    record: dict[str, Any] = field(default_factory=dict)
    spans: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.delta_ns)

    @property
    def client_ttft_ms(self) -> float | None:
        return (self.delta_ns[0] - self.t_send_ns) / 1e6 if self.delta_ns else None

    @property
    def gaps_ms(self) -> list[float]:
        return [(b - a) / 1e6 for a, b in itertools.pairwise(self.delta_ns)]

    @property
    def tokens(self) -> int | None:
        usage = self.record.get("usage") or {}
        return self.completion_tokens or usage.get("completion_tokens")

    @property
    def deltas_per_token(self) -> float | None:
        n = self.tokens
        return len(self.delta_ns) / n if n else None

    def _usage(self, key: str) -> float | None:
        v = (self.record.get("usage") or {}).get(key, self.record.get(key))
        return float(v) if isinstance(v, int | float) else None

    @property
    def engine_ttft_ms(self) -> float | None:
        return self._usage("ttft_ms")

    @property
    def engine_tpot_ms(self) -> float | None:
        return self._usage("tpot_ms")

    @property
    def added_ttft_ms(self) -> float | None:
        c, e = self.client_ttft_ms, self.engine_ttft_ms
        return c - e if c is not None and e is not None else None


def request_body(model: str, text: str, tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "max_tokens": tokens,
        "ignore_eos": True,
    }


async def stream_one(client: httpx.AsyncClient, model: str, text: str, tokens: int) -> Sample:
    s = Sample(rid="", text=text, t_send_ns=time.time_ns())
    try:
        async with client.stream("POST", "/v1/chat/completions", json=request_body(model, text, tokens)) as resp:
            s.rid, s.status = resp.headers.get("x-request-id", ""), resp.status_code
            if resp.status_code != 200:
                s.error = f"HTTP {resp.status_code}: {(await resp.aread()).decode(errors='replace')[:300]}"
                return s
            async for line in resp.aiter_lines():
                now = time.time_ns()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    s.error = json.dumps(chunk["error"])[:300]
                    continue
                if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
                    s.delta_ns.append(now)
                if chunk.get("usage"):
                    s.completion_tokens = chunk["usage"].get("completion_tokens")
    except (httpx.HTTPError, ValueError) as e:
        s.error = f"{type(e).__name__}: {e}"
    finally:
        s.t_end_ns = time.time_ns()
    return s


async def drive_level(
    client: httpx.AsyncClient, model: str, texts: Iterable[str], concurrency: int, tokens: int
) -> list[Sample]:
    """`concurrency` streams open at every moment (closed loop) until every text has been sent."""
    todo = iter(texts)
    out: list[Sample] = []

    async def worker() -> None:
        for text in todo:  # one iterator shared by every worker: each text is sent once
            out.append(await stream_one(client, model, text, tokens))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


# The services whose consumer span opens a stage, in pipeline order (bench/pipeline_stages.py reads them).
CONSUMERS = ("context", "safety_in", "router", "tools", "inference")


def _complete(rec: dict[str, Any]) -> bool:
    """The logger writes asynchronously: the record is read once the engine's figures and the spans
    of the gateway, every stage and the inference call are in (each service exports its spans in its
    own batches, so they land at different moments)."""
    record, spans = rec.get("record") or {}, rec.get("spans") or []
    usage = record.get("usage") or {}
    server = any(sp.get("service") == "gateway" and sp.get("kind") == "server" for sp in spans)
    first = any(e.get("name") == "gen_ai.first_token" for sp in spans for e in sp.get("events") or [])
    stages = all(
        any(sp.get("service") == name and str(sp.get("name", "")).startswith("process ") for sp in spans)
        for name in CONSUMERS
    )
    return usage.get("ttft_ms") is not None and server and first and stages


async def fetch_record(client: httpx.AsyncClient, admin_key: str, s: Sample, timeout_s: float = 30.0) -> None:
    if not s.rid:
        return
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {admin_key}"}
    while True:
        try:
            r = await client.get(f"/v1/admin/requests/{s.rid}", headers=headers)
            if r.status_code == 200:
                rec = r.json()
                s.record, s.spans = rec.get("record") or {}, rec.get("spans") or []
                if _complete(rec):
                    return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.5)


async def fetch_records(client: httpx.AsyncClient, admin_key: str, samples: list[Sample], parallel: int = 8) -> None:
    gate = asyncio.Semaphore(parallel)

    async def one(s: Sample) -> None:
        async with gate:
            await fetch_record(client, admin_key, s)

    await asyncio.gather(*(one(s) for s in samples))
