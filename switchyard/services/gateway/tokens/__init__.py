"""Tokenize, detokenize and count tokens."""
