"""Write llama.cpp's token ids for every corpus text, per vocabulary (tests/tokenizer/refs/<case>.json).

    /work/main/.venv/bin/pip install llama-cpp-python==0.3.36   # test-only, builds llama.cpp
    PYTHONPATH=$PWD python tests/tokenizer/make_refs.py

Ids are llama.cpp's `llama_tokenize(text, add_special=False, parse_special=True)`: the text alone
(no BOS), special tokens written in the text parsed as tokens, which is how our tokenizer treats
text. test_corpus.py compares against these files, and against llama_cpp live where it is installed.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.tokenizer.models import CASES, load_corpus, refs_path, write_variant


def corpus_digest(texts: list[str]) -> str:
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()


def llama_ids(model_path: str, texts: list[str]) -> list[list[int]]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path, vocab_only=True, verbose=False)
    return [llm.tokenize(t.encode("utf-8"), add_bos=False, special=True) for t in texts]


def llama_detokenize(llm: object, ids: list[int]) -> str:
    """llama.cpp's detokenizer, special tokens rendered (Llama.detokenize's 32-byte buffer cuts long pieces)."""
    import ctypes

    import llama_cpp

    arr = (llama_cpp.llama_token * len(ids))(*ids)
    size = 64 + 64 * len(ids)
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_detokenize(llm._model.vocab, arr, len(ids), buf, size, False, True)  # type: ignore[attr-defined]
    return buf.raw[:n].decode("utf-8", "replace")


def main() -> None:
    import llama_cpp

    texts = load_corpus()
    tmp = Path(tempfile.mkdtemp(prefix="tokrefs-"))
    for key, (base, changes) in CASES.items():
        ids = llama_ids(write_variant(key, tmp), texts)
        doc = {
            "vocabulary": base,
            "changes": changes,
            "llama_cpp_python": llama_cpp.__version__,
            "corpus_sha256": corpus_digest(texts),
            "ids": ids,
        }
        refs_path(key).write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"{key}: {len(ids)} texts, {sum(map(len, ids))} tokens -> {refs_path(key)}")


if __name__ == "__main__":
    main()
