"""A model whose registry path is a Hugging Face directory is rendered and counted by the context stage
with that directory's own files (its tokenizer.json and chat template), over a real nats-server.

The directory is the Qwen 2 tokenizer of tests/tokenizer/hf_dirs.py: its template lays tools out itself
(`<tools>`) and writes its own default system text, and its vocabulary has ids the bundled SmolLM2's
lacks (`<tool_call>`), so the default model's files could not give the same prompt or ids."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from switchyard.libs.bus import Bus, BusError, NatsServer
from switchyard.libs.bus.embedded import start_nats_server
from switchyard.libs.models import ModelRegistry, default_models
from switchyard.libs.telemetry import setup_tracing
from switchyard.libs.tokenizer import Tokenizer, load_tokenizer
from switchyard.schemas import (
    ChatMessage,
    DetokenizeQuery,
    DetokenizeReply,
    ModelCard,
    TokenizeQuery,
    TokenizeReply,
    Work,
    WorkAccepted,
    subjects,
)
from switchyard.services.context.service import setup
from switchyard.services.context.settings import ContextSettings
from tests.services.context.harness import Harness
from tests.tokenizer.hf_dirs import write_qwen2

TOOL = {"name": "lookup", "description": "Look a word up", "parameters": {"type": "object", "properties": {}}}


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hf") / "qwen2"
    write_qwen2(out)
    return out


@pytest.fixture(scope="module")
def own_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server of this module's own: the context stage follows the `models` bucket, which a gateway
    started by another module on the shared server may already have filled with other models."""
    server = start_nats_server(store_dir=str(tmp_path_factory.mktemp("nats-hf")))
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def harness(
    own_nats: NatsServer, qwen_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Harness]:
    nats_server = own_nats
    broken = tmp_path_factory.mktemp("broken")  # a directory without a tokenizer.json
    cards = [
        *default_models(),
        ModelCard(name="tiny-qwen", aliases=["tq"], pool="qwen", engine="vllm", path=str(qwen_dir)),
        ModelCard(name="broken-dir", pool="broken", engine="vllm", path=str(broken)),
    ]
    service = await Bus.connect(nats_server.url, "context", "hf", setup_tracing("context"))
    client = await Bus.connect(nats_server.url, "gateway", "hf", setup_tracing("gateway"))
    await service.ensure_log_stream()
    settings = ContextSettings(
        data_dir=str(tmp_path_factory.mktemp("context")), context_budget=4096, registry=ModelRegistry(models=cards)
    )
    cleanup = await setup(service, settings, template=load_tokenizer())
    h = Harness(client, {}, {})

    async def collect(w: Work) -> None:
        await client.ack(WorkAccepted(rid=w.rid, replica="router"))
        fut = h.forwarded.get(w.rid)
        if fut is not None and not fut.done():
            fut.set_result(w)

    await client.subscribe(subjects.ROUTE, Work, collect)
    await client.flush()
    await service.flush()
    yield h
    await service.quiesce()
    await cleanup()
    await service.close()
    await client.drain()


def _work(model: str | None) -> Work:
    earlier = [ChatMessage(role="user", content="Hi"), ChatMessage(role="assistant", content="Hello!")]
    return Work(
        rid=uuid.uuid4().hex,
        tenant="hf",
        user="u",
        key_id="k",
        text="Look up 'harbour'.",
        messages=earlier,
        client_tools=[TOOL],
        model=model,
    )


async def test_a_directory_models_prompt_is_its_own_template_and_count(harness: Harness, qwen_dir: Path) -> None:
    qwen: Tokenizer = load_tokenizer(str(qwen_dir))
    w = await harness.assemble(_work("tq"))
    assert isinstance(w, Work)
    # Qwen's template: the tools in its own <tools> block, its own tool-call instructions.
    assert w.prompt.startswith("<|im_start|>system\n") and "<tools>\n" in w.prompt and '"name": "lookup"' in w.prompt
    assert "You may call one or more functions" in w.prompt
    assert w.prompt.endswith("<|im_start|>user\nLook up 'harbour'.<|im_end|>\n<|im_start|>assistant\n")
    assert w.prompt_tokens == len(qwen.encode(w.prompt))

    default = await harness.assemble(_work(None))
    assert isinstance(default, Work) and "<tools>" not in default.prompt  # SmolLM2's template does not take tools

    got = await harness.client.request(
        subjects.TOKENIZE, TokenizeQuery(tenant="hf", user="u", model="tiny-qwen", **_fields()), TokenizeReply
    )
    assert got.tokens == qwen.encode(w.prompt) and got.count == w.prompt_tokens


def _fields() -> dict[str, object]:
    w = _work(None)
    return {"text": w.text, "messages": w.messages, "client_tools": w.client_tools}


async def test_ids_only_the_directorys_vocabulary_has(harness: Harness, qwen_dir: Path) -> None:
    c = harness.client
    text = "call <tool_call>{}</tool_call>"
    got = await c.request(subjects.TOKENIZE, TokenizeQuery(tenant="hf", prompt=text, model="tq"), TokenizeReply)
    qwen = load_tokenizer(str(qwen_dir))
    assert got.tokens == qwen.encode(text) and qwen.token_to_id("<tool_call>") in got.tokens
    assert max(got.tokens) >= load_tokenizer().vocab_size  # past the default model's vocabulary
    back = await c.request(
        subjects.DETOKENIZE, DetokenizeQuery(tenant="hf", tokens=got.tokens, model="tq"), DetokenizeReply
    )
    assert back.prompt == text
    with pytest.raises(BusError):  # the default model has no such id
        await c.request(subjects.DETOKENIZE, DetokenizeQuery(tenant="hf", tokens=got.tokens), DetokenizeReply)


async def test_a_directory_without_a_tokenizer_is_a_clear_error(harness: Harness) -> None:
    with pytest.raises(BusError) as e:
        await harness.client.request(
            subjects.TOKENIZE, TokenizeQuery(tenant="hf", prompt="x", model="broken-dir"), TokenizeReply
        )
    assert "tokenizer.json" in e.value.message
