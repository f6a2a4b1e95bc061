"""GGUF-backed tokenizers (byte-level BPE and SentencePiece, equal to llama.cpp's), special tokens and
chat templates (the file's own or a named fallback). No torch here."""

from libs.tokenizer.incremental import IncrementalDecoder
from libs.tokenizer.paths import default_model_path
from libs.tokenizer.settings import TokenizerSettings
from libs.tokenizer.template import ModelTemplate, TemplateError, model_template, render_prompt, tool_section
from libs.tokenizer.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "IncrementalDecoder",
    "ModelTemplate",
    "TemplateError",
    "Tokenizer",
    "TokenizerSettings",
    "default_model_path",
    "load_tokenizer",
    "model_template",
    "render_prompt",
    "tool_section",
]
