"""Writes tests/e2e/data/served_qwen3.json: llama.cpp's tokens and greedy text for one prompt on the Qwen3
GGUF that llama.cpp's own converter wrote (tests/engine/data/families/qwen3-f32.gguf, made by
tests/engine/make_family_reference.py), the reference tests/e2e/test_bring_your_model.py holds the stack's
answer to. llama-cpp-python is not a dependency of the suite, so its output is committed.

    pip install llama-cpp-python==0.3.36
    python -m tests.e2e.make_served_reference
"""

from __future__ import annotations

import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GGUF = os.path.join(HERE, "..", "engine", "data", "families", "qwen3-f32.gguf")
OUT = os.path.join(HERE, "data", "served_qwen3.json")
# Chosen for its wide top-2 margins (the smallest is written with the reference): no near-tie to flip.
PROMPT = "My favourite book is"
NEW_TOKENS = 16


def main() -> None:
    import llama_cpp

    # One thread (oversubscribed worker threads crawl on a shared box); an f32 KV cache, so the logits are
    # fp32 throughout, as the engine's fp32 format computes them.
    llm = llama_cpp.Llama(
        GGUF, n_ctx=128, n_threads=1, n_threads_batch=1, type_k=0, type_v=0, logits_all=True, verbose=False
    )
    ids = llm.tokenize(PROMPT.encode(), add_bos=True, special=True)
    stops = {llm.token_eos(), *(t for t in (llm._model.token_eot(),) if t >= 0)}
    llm.reset()
    llm.eval(ids)
    tokens: list[int] = []
    margins: list[float] = []
    for _ in range(NEW_TOKENS):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        first, second = np.argsort(-logits, kind="stable")[:2]
        if int(first) in stops:
            break
        tokens.append(int(first))
        margins.append(round(float(logits[first] - logits[second]), 5))
        llm.eval([int(first)])
    text = llm.detokenize(tokens).decode("utf-8", errors="replace")
    ref = {"llama_cpp_python": llama_cpp.__version__, "prompt": PROMPT, "prompt_ids": ids}
    ref |= {"tokens": tokens, "text": text, "smallest_margin": min(margins) if margins else None}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {text!r} (smallest top-2 margin {ref['smallest_margin']})")


if __name__ == "__main__":
    main()
