"""Per-token log probabilities as OpenAI shows them: their tokens spell the answer, bytes included."""

from __future__ import annotations

from switchyard.libs.engine.types import TokenLogprobs
from switchyard.libs.tokenizer import load_tokenizer
from switchyard.services.inference.logprobs import to_openai


def test_the_closing_end_of_sequence_token_has_no_entry_and_the_tokens_spell_the_text() -> None:
    tok = load_tokenizer()
    text = "A colour is blue, café."
    ids = tok.encode(text)
    eos = min(tok.eos_token_ids)
    items = [TokenLogprobs(t, -0.5, [(t, -0.5), (eos, -1.0)]) for t in [*ids, eos]]
    out = to_openai(tok, items)
    assert len(out) == len(ids)
    assert b"".join(bytes(e.bytes) for e in out).decode() == text
    # Only the answer's own tokens are dropped: an end token among the alternatives stays.
    assert out[0].top_logprobs[1].token == tok.id_to_token(eos)
