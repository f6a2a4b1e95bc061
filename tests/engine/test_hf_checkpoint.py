"""`python -m switchyard.cli export-hf DIR`: a Hugging Face checkpoint of the served GGUF, offline, readable as ours."""

import json

import pytest
import torch

from switchyard.cli.__main__ import main as cli_main
from switchyard.libs.engine.weights import load_weights
from switchyard.libs.tokenizer import load_tokenizer
from tests.engine.conftest import CACHE_DIR
from tests.tokenizer.models import load_corpus

pytestmark = pytest.mark.slow

EXPECTED_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}


def test_export_hf_writes_our_model(tmp_path, monkeypatch, model_path, tokenizer):
    transformers = pytest.importorskip("transformers")
    from safetensors import safe_open

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub look-up would fail the test, not reach the internet
    out = tmp_path / "hf"
    assert cli_main(["export-hf", str(out), "--gguf", model_path, "--dtype", "bfloat16"]) == 0
    assert EXPECTED_FILES <= {p.name for p in out.iterdir()}

    cfg = json.loads((out / "config.json").read_text())
    gguf_cfg, gguf_tensors = load_weights(model_path, "fp32", CACHE_DIR)  # the GGUF dequantized, cached
    assert cfg["vocab_size"] == tokenizer.vocab_size and "quantization_config" not in cfg
    assert cfg["num_hidden_layers"] == gguf_cfg.num_layers and cfg["num_key_value_heads"] == gguf_cfg.num_kv_heads
    assert cfg["rope_theta"] == gguf_cfg.rope_theta and cfg["torch_dtype"] == "bfloat16"  # for transformers 4.x

    hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    prompt = "<|im_start|>user\nWhat is 2 + 2? Ünïcode, too.<|im_end|>\n<|im_start|>assistant\n"
    assert hf_tok.encode(prompt, add_special_tokens=False) == tokenizer.encode(prompt)
    assert hf_tok.eos_token_id == tokenizer.eos_token_id
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    # The directory, served as a model of its own, tokenizes as the GGUF does (llama.cpp's ids) for us and for
    # transformers alike, digits included (transformers' own GGUF reader would drop SmolLM2's digit split).
    ours = load_tokenizer(str(out))
    for text in load_corpus():
        want = tokenizer.encode(text)
        assert ours.encode(text) == want == hf_tok.encode(text), text
    assert ours.eos_token_ids == tokenizer.eos_token_ids and ours.template.source == tokenizer.template.source

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        embed = f.get_tensor("model.embed_tokens.weight")
        down = f.get_tensor("model.layers.0.mlp.down_proj.weight")
    assert embed.dtype == torch.bfloat16 and embed.shape == (tokenizer.vocab_size, gguf_cfg.hidden_size)
    torch.testing.assert_close(embed.float(), gguf_tensors["token_embd.weight"].float(), atol=0.02, rtol=0.02)
    torch.testing.assert_close(down.float(), gguf_tensors["blk.0.ffn_down.weight"].float(), atol=0.02, rtol=0.02)
