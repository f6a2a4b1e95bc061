"""Writes tests/engine/data/families/: one small GGUF per family and type, made by llama.cpp's own
converter from tests/hf_models.py's seeded checkpoints, and `llamacpp.json`, llama.cpp's greedy
tokens and top logits on each, the reference tests/engine/test_families.py compares the native
engine to (neither the converter nor llama-cpp-python is a dependency of the suite).

    pip install --target /tmp/convdeps sentencepiece   # the converter imports it
    pip install llama-cpp-python==0.3.36               # its sdist holds vendor/llama.cpp
    python -m tests.engine.make_family_reference LLAMA_CPP_DIR   # e.g. .../vendor/llama.cpp

The checkpoints carry SmolLM2's 49152-token vocabulary, 6 MB of embedding per f32 matrix; after the
converter has written a file, its vocabulary is cut to the first VOCAB tokens (the embedding and
output rows with it, and the merges that name a dropped token), so that each file stays under a
megabyte. Prompts are token ids (seeded, below VOCAB): no tokenizer is under test. Per prompt and
file: the NEW_TOKENS greedy tokens and, at each of their positions, llama.cpp's TOP highest logits.
llama.cpp runs an f32 file with an f32 KV cache, a quantized one with its default (f16).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "families")
REFERENCE = os.path.join(DATA, "llamacpp.json")
# Mistral's checkpoint converts to a `llama` GGUF without its window (the converter writes none),
# the llama file's bytes here (same seed, same shapes): tests/engine/test_families.py reads it from
# its directory instead, window and all.
FAMILIES = ("llama", "llama3", "qwen2", "qwen3", "phi3")
TYPES = ("f32", "q8_0")
VOCAB = 512
NEW_TOKENS = 32
# Top logits kept per position: 4 of an f32 file (greedy parts only at exact ties), 8 of a quantized
# one, whose near-ties the margin rule needs to find our token among.
TOP = {"f32": 4, "q8_0": 8}
N_PROMPTS = 20


def gguf_file(family: str, outtype: str) -> str:
    return os.path.join(DATA, f"{family}-{outtype}.gguf")


def prompts() -> list[list[int]]:
    """N_PROMPTS seeded prompts of 3 to 40 token ids, past the special tokens (ids 0-16)."""
    rng = np.random.default_rng(0)
    return [rng.integers(17, VOCAB, int(rng.integers(3, 41))).tolist() for _ in range(N_PROMPTS)]


def shrink_vocab(src: str, dst: str, vocab: int) -> None:
    """`src` with its first `vocab` tokens only: the token list, types and merges, and the rows of
    the embedding and output matrices (rows are whole blocks in every GGUF type)."""
    import gguf

    reader = gguf.GGUFReader(src, "r")
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()[:vocab]
    kept = set(tokens)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            value = tokens
        elif key == "tokenizer.ggml.token_type":
            value = value[:vocab]
        elif key == "tokenizer.ggml.merges":
            value = [m for m in value if all(p in kept for p in m.split(" ")) and m.replace(" ", "") in kept]
        elif key.endswith("_token_id") and int(value) >= vocab:
            continue
        elif key == "general.name":
            # The converter names the model after its family, and llama.cpp applies a named model's
            # vocabulary rules: Phi-3's look up "</s>", which SmolLM2's vocabulary does not have.
            value = "random test checkpoint"
        sub = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, value, field.types[0], sub_type=sub)
    for t in reader.tensors:
        data = np.asarray(t.data)  # [rows, values or bytes per row]
        if t.name in ("token_embd.weight", "output.weight"):
            data = data[:vocab]
        writer.add_tensor(t.name, np.ascontiguousarray(data), raw_shape=list(data.shape), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# What the converter's copy of a checkpoint changes, so that its tokenizer check (a hash of the
# tokens of its test text) sees SmolLM2's tokenizer as saved: for model_type qwen2 transformers loads
# Qwen 2's own tokenizer class over tokenizer.json, and the Phi-3 path reads a BPE tokenizer only
# when tokenizer_class says GPT2Tokenizer (else it wants tokenizer.model). Weights are untouched.
CONVERTER_PATCH = {
    "qwen2": ("config.json", {"model_type": "llama"}),
    "phi3": ("tokenizer_config.json", {"tokenizer_class": "GPT2Tokenizer"}),
}


def convert(llama_cpp_dir: str, checkpoint: str, family: str, outtype: str, out: str) -> None:
    """llama.cpp's convert_hf_to_gguf.py run as a tool, with its own gguf-py, on a copy of the checkpoint."""
    env = dict(os.environ)
    deps = [os.path.join(llama_cpp_dir, "gguf-py"), "/tmp/convdeps", env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in deps if p)
    script = os.path.join(llama_cpp_dir, "convert_hf_to_gguf.py")
    with tempfile.TemporaryDirectory() as tmp:
        src = shutil.copytree(checkpoint, os.path.join(tmp, family))
        if family in CONVERTER_PATCH:
            name, update = CONVERTER_PATCH[family]
            with open(os.path.join(src, name)) as f:
                data = json.load(f)
            with open(os.path.join(src, name), "w") as f:
                json.dump({**data, **update}, f)
        cmd = [sys.executable, script, src, "--outtype", outtype, "--outfile", out]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def greedy(path: str, ids: list[int], top: int) -> dict:
    import llama_cpp

    # One thread: on a shared box, llama.cpp's worker threads slow to a crawl when oversubscribed.
    # An f32 file gets an f32 KV cache (llama.cpp's default f16 one rounds keys and values by about
    # 1e-3), so its logits are fp32 throughout; a quantized one keeps the default.
    cache = {"type_k": 0, "type_v": 0} if path.endswith("-f32.gguf") else {}  # 0: GGML_TYPE_F32
    llm = llama_cpp.Llama(
        path, n_ctx=128, logits_all=True, n_threads=1, n_threads_batch=1, verbose=False, **cache
    )  # fmt: skip
    llm.reset()
    llm.eval(ids)
    tokens, tops = [], []
    for _ in range(NEW_TOKENS):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        best = np.argsort(-logits, kind="stable")[:top]
        tokens.append(int(best[0]))
        tops.append([[int(t), round(float(logits[t]), 5)] for t in best])
        llm.eval([int(best[0])])
    return {"tokens": tokens, "top": tops}


def build_files(llama_cpp_dir: str) -> None:
    """Every family's checkpoint, converted to each type and cut to VOCAB tokens, into DATA."""
    from tests.hf_models import write_checkpoint

    os.makedirs(DATA, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for family in FAMILIES:
            checkpoint = write_checkpoint(os.path.join(tmp, family), family)
            for outtype in TYPES:
                full = os.path.join(tmp, f"{family}-{outtype}-full.gguf")
                convert(llama_cpp_dir, str(checkpoint), family, outtype, full)
                shrink_vocab(full, gguf_file(family, outtype), VOCAB)
                print(gguf_file(family, outtype), os.path.getsize(gguf_file(family, outtype)), flush=True)


def write_reference() -> None:
    """llama.cpp's greedy tokens and top logits on every file in DATA, into REFERENCE."""
    import llama_cpp

    ref: dict = {"llama_cpp_python": llama_cpp.__version__, "vocab": VOCAB, "new_tokens": NEW_TOKENS}
    ref["prompts"] = prompts()
    ref["files"] = {}
    for family in FAMILIES:
        for outtype in TYPES:
            path = gguf_file(family, outtype)
            ref["files"][os.path.basename(path)] = [greedy(path, ids, TOP[outtype]) for ids in ref["prompts"]]
            print(path, flush=True)
    with open(REFERENCE, "w", encoding="utf-8") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {REFERENCE}")


def main() -> None:
    build_files(sys.argv[1])
    write_reference()


if __name__ == "__main__":
    main()
