"""Tokenizers from a GGUF file (byte-level BPE and SentencePiece, equal to llama.cpp's) or from a Hugging
Face checkpoint directory (its tokenizer.json, equal to transformers'), special tokens and chat templates
(the model's own or a named fallback). No torch here."""

from switchyard.libs.tokenizer.incremental import IncrementalDecoder
from switchyard.libs.tokenizer.paths import default_model_path
from switchyard.libs.tokenizer.settings import TokenizerSettings
from switchyard.libs.tokenizer.template import (
    ModelTemplate,
    TemplateError,
    model_template,
    render_continuing,
    render_prompt,
    tool_section,
)
from switchyard.libs.tokenizer.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "IncrementalDecoder",
    "ModelTemplate",
    "TemplateError",
    "Tokenizer",
    "TokenizerSettings",
    "default_model_path",
    "load_tokenizer",
    "model_template",
    "render_continuing",
    "render_prompt",
    "tool_section",
]
