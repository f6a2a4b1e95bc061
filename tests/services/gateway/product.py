"""A gateway in front of the real context service, with a stand-in for the stages after context.

The stand-in takes the prompt context assembled (`pipeline.route`), answers "ok", saves the turn
through `context.save_turn` as safety_out does, then sends `done`: enough for conversation titles,
"remember that ..." and attached files to behave as in the full pipeline.
"""

from __future__ import annotations

import contextlib
import functools
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.tokenizer import Tokenizer, load_tokenizer
from switchyard.schemas import ChatEvent, SaveTurn, SaveTurnAck, Turn, Usage, Work, WorkAccepted, subjects
from switchyard.services.context.service import setup
from switchyard.services.context.settings import ContextSettings
from tests.services.gateway.harness import Gateway, connect, gateway

ANSWER = "Paris is the capital of France."


@functools.cache
def tokenizer() -> Tokenizer:
    return load_tokenizer()


@dataclass
class Product:
    gw: Gateway
    works: dict[str, Work] = field(default_factory=dict)
    ann: str = ""  # tenant acme, user ann
    bob: str = ""  # tenant acme, user bob
    eve: str = ""  # tenant evil
    admin: str = ""

    @property
    def url(self) -> str:
        return self.gw.url

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.ann}"}


async def _pipeline(bus: Bus, works: dict[str, Work]) -> None:
    async def on_work(w: Work) -> None:
        await bus.ack(WorkAccepted(rid=w.rid, replica="router"))  # as a stage acks the hand-over
        works[w.rid] = w
        await bus.emit(ChatEvent(rid=w.rid, type="delta", text=ANSWER))
        if w.chat_id and w.persist:
            turn = Turn(id="", rid=w.rid, user_text=w.text, answer=ANSWER, status="complete", usage=Usage())
            await bus.request(
                subjects.SAVE_TURN, SaveTurn(tenant=w.tenant, user=w.user, chat_id=w.chat_id, turn=turn), SaveTurnAck
            )
        await bus.emit(ChatEvent(rid=w.rid, type="done", finish_reason="stop", usage=Usage(completion_tokens=7)))

    await bus.subscribe(subjects.ROUTE, Work, on_work, queue="router")


@contextlib.asynccontextmanager
async def product(nats_server: NatsServer, data_dir: Path) -> AsyncIterator[Product]:
    ctx_bus = await connect(nats_server, "context")
    down = await connect(nats_server, "router")
    await ctx_bus.ensure_log_stream()
    settings = ContextSettings(data_dir=str(data_dir / "context"), context_budget=2048, max_file_chars=50_000)
    cleanup = await setup(ctx_bus, settings, template=tokenizer())
    p_works: dict[str, Work] = {}
    await _pipeline(down, p_works)
    await ctx_bus.flush()
    await down.flush()
    try:
        async with gateway(nats_server, data_dir / "gw", rate_limits=False) as g:
            p = Product(gw=g, works=p_works)
            _, p.ann = await g.keys.create("acme", "pro", user="ann")
            _, p.bob = await g.keys.create("acme", "pro", user="bob")
            _, p.eve = await g.keys.create("evil", "pro", user="eve")
            _, p.admin = await g.keys.create("ops", "pro", user="root", admin=True)
            yield p
    finally:
        await down.drain()
        await ctx_bus.quiesce()
        await cleanup()
        await ctx_bus.close()


def pdf_with(text: str) -> bytes:
    """A one-page PDF whose text layer is `text` (Helvetica, ASCII)."""
    return pdf_of([f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()])


def pdf_bomb(megabytes: float) -> bytes:
    """A PDF of a few KB whose one FlateDecode content stream inflates to `megabytes` of `(x) Tj` operators."""
    ops = b"(x) Tj " * int(megabytes * 1024 * 1024 / 7)
    return pdf_of([b"BT /F1 12 Tf 72 720 Td " + ops + b"ET"], compress=True)


def pdf_of(contents: list[bytes], *, compress: bool = False) -> bytes:
    """A PDF with one page per content stream (Helvetica), byte offsets computed for the xref."""
    n = len(contents)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n)).encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, n),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, content in enumerate(contents):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            b"/Contents %d 0 R >>" % (5 + 2 * i)
        )
        data = zlib.compress(content, 9) if compress else content
        flate = b" /Filter /FlateDecode" if compress else b""
        objects.append(b"<< /Length %d%s >>\nstream\n" % (len(data), flate) + data + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)
