"""The families the model definitions serve (switchyard/libs/engine/models), each from its GGUF against
llama.cpp's outputs (the small files and the reference committed by
tests/engine/make_family_reference.py) and from its Hugging Face checkpoint directory against
transformers itself."""

from __future__ import annotations

import json
import os

import pytest
import torch

from switchyard.libs.engine.model import AttnBatch, DecoderModel, KVCache, PrefillSpan, prefill_mask
from switchyard.libs.engine.models import for_gguf, for_hf
from switchyard.libs.engine.weights import load_weights, read_model
from tests.engine.conftest import make_engine
from tests.engine.helpers import drive, make_request
from tests.engine.make_family_reference import DATA, FAMILIES, REFERENCE, gguf_file

# tests/engine/test_gemma.py's margin rule: where our greedy text parts from llama.cpp's, llama.cpp
# must have rated our token within NEAR_TIE of its own.
NEAR_TIE = 0.5
HF_FAMILIES = ("llama", "llama3", "qwen2", "qwen3", "mistral", "phi3")


@pytest.fixture(scope="module")
def reference() -> dict:
    with open(REFERENCE, encoding="utf-8") as f:
        return json.load(f)


def _logits(model: DecoderModel, ids: list[int]) -> torch.Tensor:
    """Every row's next-token logits for `ids`, as one prompt."""
    n = len(ids)
    kv = KVCache(model.cfg, -(-n // 16), 16, model.kv_dtype)
    span = PrefillSpan(0, n, 0, torch.empty(0, dtype=torch.long), prefill_mask(0, n))
    batch = AttnBatch(torch.tensor(ids), torch.arange(n), torch.arange(n), 0, None, None, [span], torch.arange(n))
    with torch.inference_mode():
        return model.forward(batch, kv)


def _greedy(model: DecoderModel, prompts: list[list[int]], n: int) -> list[list[int]]:
    """Greedy tokens of every prompt, all in one engine batch (chunked prefills beside decodes)."""
    eng = make_engine(model, num_blocks=128, max_num_batched_tokens=64)
    reqs = [make_request(f"p{i}", ids, max_tokens=n, ignore_eos=True) for i, ids in enumerate(prompts)]
    out = drive(eng, reqs)
    return [out[f"p{i}"] for i in range(len(prompts))]


def _check_margin(got: list[int], want: list[int], top: list[list]) -> None:
    part = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
    if part is None:
        return
    logits = {int(t): v for t, v in top[part]}
    assert got[part] in logits, (part, got, want)
    assert logits[want[part]] - logits[got[part]] < NEAR_TIE, (part, got, want)


def test_every_family_is_registered_under_its_gguf_and_hf_names():
    for arch, family in [("llama", "llama"), ("qwen2", "qwen2"), ("qwen3", "qwen3"), ("phi3", "phi3")]:
        assert for_gguf(arch).family == family
    assert for_gguf("gemma3").family == "gemma3"
    assert for_hf(["MistralForCausalLM"]).family == "mistral"
    assert for_hf(["Qwen3ForCausalLM"]).family == "qwen3"


def test_an_unknown_architecture_names_the_served_ones_and_vllm(tmp_path):
    with pytest.raises(ValueError, match=r"'bert' is not served .*gemma3.*qwen3.*vLLM serves the rest"):
        for_gguf("bert")
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["MambaForCausalLM"]}))
    with pytest.raises(ValueError, match=r"MambaForCausalLM.*Phi3ForCausalLM.*vLLM serves the rest"):
        read_model(str(tmp_path))


@pytest.mark.parametrize("family", FAMILIES)
def test_f32_gguf_equals_llama_cpp(family, reference):
    """Teacher-forced on llama.cpp's own tokens, our fp32 logits equal llama.cpp's top ones within
    1e-3 of their scale at each of the 32 positions of the 20 prompts; our greedy texts, all in
    one batch, equal llama.cpp's up to a near-tie."""
    name = os.path.basename(gguf_file(family, "f32"))
    cfg, tensors = load_weights(gguf_file(family, "f32"), "fp32", None)
    model = DecoderModel(cfg, tensors, "fp32")
    prompts, entries = reference["prompts"], reference["files"][name]
    worst = 0.0
    for ids, entry in zip(prompts, entries, strict=True):
        logits = _logits(model, ids + entry["tokens"][:-1])[len(ids) - 1 :]
        for row, top in zip(logits, entry["top"], strict=True):
            scale = max(abs(v) for _, v in top)
            worst = max(worst, max(abs(row[t].item() - v) / scale for t, v in top))
    assert worst < 1e-3, worst
    got = _greedy(model, prompts, reference["new_tokens"])
    for tokens, entry in zip(got, entries, strict=True):
        _check_margin(tokens, entry["tokens"], entry["top"])


@pytest.mark.parametrize("family", FAMILIES)
def test_q8_0_gguf_on_the_native_kernels_follows_llama_cpp(family, reference):
    """The Q8_0 file's blocks through the native kernels (activations quantized per block of 32,
    as llama.cpp's): greedy texts equal llama.cpp's up to a near-tie, logits within 6 % of their
    scale (measured: at most 5.3 %; the random weights' wide spread makes every 8-bit rounding of
    an activation count, and an f16 KV cache on both sides rounds differently placed values)."""
    native = pytest.importorskip("switchyard.libs.engine.native")
    if not native.available():
        pytest.skip(native.unavailable_reason())
    name = os.path.basename(gguf_file(family, "q8_0"))
    cfg, tensors = load_weights(gguf_file(family, "q8_0"), "native", None)
    model = DecoderModel(cfg, tensors, "native")
    prompts, entries = reference["prompts"], reference["files"][name]
    for ids, entry in zip(prompts[:5], entries[:5], strict=True):
        logits = _logits(model, ids + entry["tokens"][:-1])[len(ids) - 1 :]
        for row, top in zip(logits, entry["top"], strict=True):
            scale = max(abs(v) for _, v in top)
            assert max(abs(row[t].item() - v) for t, v in top) < 0.06 * scale
    got = _greedy(model, prompts, reference["new_tokens"])
    for tokens, entry in zip(got, entries, strict=True):
        _check_margin(tokens, entry["tokens"], entry["top"])


def test_the_committed_files_stay_small():
    sizes = {n: os.path.getsize(os.path.join(DATA, n)) for n in os.listdir(DATA)}
    assert all(s < 1 << 20 for s in sizes.values()), sizes


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    pytest.importorskip("transformers")
    from tests.hf_models import write_checkpoint

    root = tmp_path_factory.mktemp("families")
    return {f: str(write_checkpoint(root / f, f)) for f in HF_FAMILIES}


PROMPTS = [[17, 300, 42, 9000, 5, 77], list(range(100, 140)), [48000, 12, 13, 14, 15, 16, 17, 18, 19, 20, 1234]]


@pytest.mark.slow
@pytest.mark.parametrize("family", HF_FAMILIES)
def test_a_checkpoint_directory_equals_transformers(family, checkpoints):
    """config.json + safetensors read into the GGUF's internal form: fp32 logits equal transformers'
    within 1e-4, and greedy tokens (all prompts in one batch) equal `generate`'s. Mistral's window
    (16 keys) and Llama 3's RoPE scaling are in play: 40 prompt tokens, factors on every frequency."""
    import transformers

    path = checkpoints[family]
    cfg, tensors = load_weights(path, "fp32", None)
    model = DecoderModel(cfg, tensors, "fp32")
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    want = []
    for ids in PROMPTS:
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0]
            gen = hf.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0,
            )  # fmt: skip
        assert (_logits(model, ids) - ref).abs().max().item() < 1e-4
        want.append(gen[0, len(ids) :].tolist())
    assert _greedy(model, PROMPTS, 12) == want


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "int8", "native"])
def test_a_checkpoint_directory_converts_to_every_served_format(dtype, checkpoints):
    """The directory's dense matrices go through the GGUF's convert / pack path: each format's
    logits stay near fp32's (Qwen 3: QK-norm and head_dim apart from hidden / heads)."""
    path = checkpoints["qwen3"]
    ref = _logits(DecoderModel(*load_weights(path, "fp32", None), "fp32"), PROMPTS[1])
    if dtype == "native":
        native = pytest.importorskip("switchyard.libs.engine.native")
        if not native.available():
            pytest.skip(native.unavailable_reason())
    model = DecoderModel(*load_weights(path, dtype, None), dtype)
    got = _logits(model, PROMPTS[1])
    # native: weights and activations both in 8-bit blocks, about 6 % here (wide random weights).
    assert (got - ref).abs().max().item() < 0.1 * ref.abs().max().item()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.8


@pytest.mark.slow
def test_a_checkpoint_directory_is_cached_by_its_content(checkpoints, tmp_path):
    """The converted weights are cached under the hash of config.json and the weight files; a second
    load reads the cache (Llama 3's computed RoPE factors included)."""
    path = checkpoints["llama3"]
    cfg, tensors = load_weights(path, "fp32", str(tmp_path))
    (cached,) = os.listdir(tmp_path)
    again_cfg, again = load_weights(path, "fp32", str(tmp_path))
    assert os.listdir(tmp_path) == [cached] and again_cfg == cfg
    assert torch.equal(again["rope_freqs.weight"], tensors["rope_freqs.weight"])
    assert tensors["rope_freqs.weight"].max().item() == 8.0  # the longest wavelengths divided by `factor`


@pytest.mark.slow
def test_a_bf16_checkpoint_reads_as_its_values_upcast(tmp_path):
    """bf16 safetensors are upcast exactly, so fp32 logits still equal transformers' (which upcasts alike)."""
    import transformers

    from tests.hf_models import write_checkpoint

    path = str(write_checkpoint(tmp_path / "qwen2", "qwen2", dtype="bfloat16"))
    model = DecoderModel(*load_weights(path, "fp32", None), "fp32")
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(torch.tensor([PROMPTS[1]])).logits[0]
    assert (_logits(model, PROMPTS[1]) - ref).abs().max().item() < 1e-4
