"""GGUF-backed tokenizer: byte-level BPE, special tokens and chat template. No torch here."""

from libs.tokenizer.incremental import IncrementalDecoder
from libs.tokenizer.paths import default_model_path
from libs.tokenizer.settings import TokenizerSettings
from libs.tokenizer.tokenizer import Tokenizer, load_tokenizer

__all__ = ["IncrementalDecoder", "Tokenizer", "TokenizerSettings", "default_model_path", "load_tokenizer"]
