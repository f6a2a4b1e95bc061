"""`switchyard export-hf DIR [--gguf FILE] [--dtype float32|bfloat16|float16]`: a Hugging Face checkpoint
directory (config, tokenizer, safetensors) from the GGUF we serve, for engines that load only those
(TensorRT-LLM: set SWITCHYARD_TRTLLM_MODEL=DIR). Offline; about 20 s for the bundled model."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from switchyard.libs.engine.hf_checkpoint import DTYPES, write_hf_checkpoint
    from switchyard.libs.tokenizer import TokenizerSettings

    p = argparse.ArgumentParser(prog="switchyard export-hf", description="Write a Hugging Face checkpoint directory")
    p.add_argument("dir", help="the directory to write (created)")
    p.add_argument("--gguf", help="the GGUF file (default: SWITCHYARD_MODEL_PATH, else the bundled model)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="weights as saved (default float32)")
    args = p.parse_args(argv)
    gguf = TokenizerSettings().resolved_model_path(args.gguf)
    files = write_hf_checkpoint(gguf, args.dir, args.dtype)
    print(f"wrote {args.dir} from {gguf}: {', '.join(files)}", file=sys.stderr)
    return 0
