"""A model that is a Hugging Face checkpoint directory, served by the real vLLM (CPU build) as it is.

The directory is written by transformers (tests/hf_models.py: a small random-weight Llama with a real
tokenizer.json). vLLM loads it without any conversion; the prompt ids are the ones our tokenizer makes
from the same directory (what the context stage sends), and vLLM's greedy tokens are transformers' own
`generate` on the same ids, in fp32. Runs in the vLLM virtualenv, like test_vllm_engine.py
(tests/engine/test_vllm_venv.py starts both there)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from switchyard.libs.engine import SamplingParams, create_engine
from switchyard.libs.tokenizer import load_tokenizer

pytestmark = pytest.mark.vllm

if os.environ.get("SWITCHYARD_TEST_VLLM_INNER") != "1":
    pytest.importorskip("vllm", reason="runs in the vLLM venv: tests/engine/test_vllm_venv.py starts it there")
else:
    import vllm  # noqa: F401  (required here: an ImportError fails the run)

from switchyard.libs.engine.vllm_engine import VllmEngineConfig  # noqa: E402

NEW_TOKENS = 32
QUESTIONS = ["Name three colors of the rainbow.", "Écris un haïku sur la mer 🌊", "def fib(n):"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.hf_models import write_checkpoint

    # head_dim 32: vLLM's CPU attention kernels refuse the family's 16.
    path = write_checkpoint(tmp_path_factory.mktemp("vllm-hf") / "tiny-llama", "llama", head_dim=32)
    # A second EOS only generation_config.json names (<|endoftext|>): an answer ends there too.
    gen = json.loads((path / "generation_config.json").read_text())
    gen["eos_token_id"] = [gen["eos_token_id"], 0]
    (path / "generation_config.json").write_text(json.dumps(gen))
    return path


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine-cache")


@pytest.fixture(scope="module")
async def engine(checkpoint, cache_dir):
    eng = create_engine(
        VllmEngineConfig(
            model_path=str(checkpoint),
            # Set, and ignored: a model that is a directory is that checkpoint.
            vllm_model=str(cache_dir / "elsewhere"),
            enforce_eager=True,
            cache_dir=str(cache_dir),
            max_num_seqs=4,
            kv_cache_bytes=1 << 28,
        )
    )
    await eng.start()
    yield eng
    await eng.stop()


def _prompts(engine) -> list[list[int]]:
    """The ids the context stage would send: the directory's template, then its tokenizer."""
    tok = engine.tokenizer
    return [tok.encode(tok.apply_chat_template([{"role": "user", "content": q}])) for q in QUESTIONS]


async def _ids(engine, rid: str, prompt: list[int], params: SamplingParams) -> tuple[list[int], object]:
    ids: list[int] = []
    last = None
    async for c in engine.generate(rid, prompt, params):
        ids.extend(c.token_ids)
        last = c
    return ids, last


async def test_the_directory_is_served_as_it_is_with_its_own_tokenizer(engine, checkpoint, cache_dir):
    assert engine.hf_model == str(checkpoint) and engine.gguf is None
    assert engine.tokenizer is load_tokenizer(str(checkpoint))
    assert engine.model_name == "tiny-llama" and engine.max_model_len == 2048  # config.json's positions
    assert not (cache_dir / "hf").exists() and not (cache_dir / "elsewhere").exists()  # nothing converted
    assert engine.tokenizer.eos_token_ids == {engine.tokenizer.token_to_id("<|im_end|>"), 0}


async def test_greedy_tokens_equal_transformers_generate(engine, checkpoint):
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(checkpoint), dtype=torch.float32, local_files_only=True
    ).eval()
    model.generation_config.eos_token_id = None  # both sides ignore EOS: every one of the tokens is compared
    for n, prompt in enumerate(_prompts(engine)):
        ours, final = await _ids(engine, f"greedy-{n}", prompt, SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True))
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, eos_token_id=None
            )
        assert ours == out[0, len(prompt) :].tolist(), QUESTIONS[n]
        assert final.finish_reason == "length" and final.usage.prompt_tokens == len(prompt)


async def test_an_answer_ends_at_an_eos_id_generation_config_names(engine):
    """The stop ids vLLM gets are our tokenizer's, read from the same directory: `<|endoftext|>`, which only
    generation_config.json names, ends the answer (forced first here by a logit bias), its text empty."""
    prompt = _prompts(engine)[0]
    ids, final = await _ids(engine, "eos", prompt, SamplingParams(max_tokens=8, logit_bias={0: 100.0}))
    assert ids == [0] and final.finish_reason == "stop" and final.text == ""
    assert sorted(engine._params(SamplingParams(), len(prompt)).stop_token_ids) == [0, 2]
