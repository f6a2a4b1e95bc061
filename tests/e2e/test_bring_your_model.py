"""A model as its users hold it, added to the running stack through `POST /v1/admin/models` and served:
a Hugging Face checkpoint directory that `transformers` itself wrote (random weights, a real
`tokenizer.json`), on the native engine and on the real vLLM where its environment is; and a Qwen3 GGUF
that llama.cpp's own converter wrote. Each answer is greedy and equals what the reference library
generates from the same prompt ids (transformers' `generate`; llama.cpp's, committed by
tests/e2e/make_served_reference.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchyard.cli.stack import Stack
from tests.engine.test_vllm_venv import REQUIRED, vllm_python
from tests.hf_models import write_checkpoint

pytestmark = pytest.mark.e2e

PROMPT = "The lighthouse keeper wrote in her log that the storm"
DATA = Path(__file__).resolve().parent / "data"
QWEN3_GGUF = Path(__file__).resolve().parents[1] / "engine" / "data" / "families" / "qwen3-f32.gguf"
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url, timeout=900, headers={"Authorization": f"Bearer {stack.admin_key}"}) as c:
        yield c


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("hf") / "tiny-llama", "llama", seed=7, head_dim=32)


def added(admin: httpx.Client, card: dict[str, Any]) -> Iterator[str]:
    r = admin.post("/v1/admin/models", json=card)
    assert r.status_code == 201, r.text
    try:
        yield card["name"]
    finally:
        admin.delete(f"/v1/admin/models/{card['name']}")


def prompt_ids(client: httpx.Client, model: str, prompt: str = PROMPT) -> list[int]:
    r = client.post("/tokenize", json={"model": model, "prompt": prompt})
    assert r.status_code == 200, r.text
    ids: list[int] = r.json()["tokens"]
    return ids


def served_text(client: httpx.Client, model: str, prompt: str = PROMPT) -> str:
    body = {"model": model, "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    text: str = r.json()["choices"][0]["text"]
    return text


def library_text(path: Path, ids: list[int]) -> str:
    """What transformers generates greedily from `ids`, stopping where the checkpoint's generation config says."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    assert tok(PROMPT)["input_ids"] == ids, "the stack tokenized the prompt unlike the checkpoint's own tokenizer"
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
    new = out[0, len(ids) :].tolist()
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])
    if new and new[-1] in stops:
        new = new[:-1]
    return str(tok.decode(new))


def test_a_checkpoint_directory_added_at_run_time_answers_as_transformers_does(
    stack: Stack, client: httpx.Client, admin: httpx.Client, checkpoint: Path
) -> None:
    card = {"name": "tiny-llama", "pool": "tinyllama", "engine": "native", "path": str(checkpoint)}
    card |= {"context_length": 2048, "dtype": "fp32"}
    for name in added(admin, card):
        assert name in {m["id"] for m in client.get("/v1/models").json()["data"]}
        ids = prompt_ids(client, name)
        text = served_text(client, name)
        assert text, "the model answered nothing"
        assert text == library_text(checkpoint, ids)


@pytest.mark.vllm
def test_the_same_directory_on_the_real_vllm_answers_as_transformers_does(
    stack: Stack, client: httpx.Client, admin: httpx.Client, checkpoint: Path
) -> None:
    if not vllm_python().exists():
        if REQUIRED:
            pytest.fail(f"SWITCHYARD_TEST_VLLM=1 but there is no vLLM environment at {vllm_python()}")
        pytest.skip("no vLLM environment: `make setup-vllm` to run this")
    card = {"name": "tiny-llama-vllm", "pool": "tinyllamavllm", "engine": "vllm", "path": str(checkpoint)}
    card |= {"context_length": 2048}
    for name in added(admin, card):
        ids = prompt_ids(client, name)
        text = served_text(client, name)
        assert text, "the model answered nothing"
        assert text == library_text(checkpoint, ids)


def test_a_qwen3_gguf_from_llama_cpps_converter_answers_as_llama_cpp_does(
    stack: Stack, client: httpx.Client, admin: httpx.Client
) -> None:
    ref = json.loads((DATA / "served_qwen3.json").read_text())
    assert len(ref["tokens"]) == NEW_TOKENS and ref["smallest_margin"] > 0.01
    card = {"name": "qwen3-tiny", "pool": "qwen3tiny", "engine": "native", "path": str(QWEN3_GGUF)}
    card |= {"context_length": 2048, "dtype": "fp32"}
    for name in added(admin, card):
        assert prompt_ids(client, name, ref["prompt"]) == ref["prompt_ids"]
        assert served_text(client, name, ref["prompt"]) == ref["text"]
