from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from switchyard.libs.bus import ServiceSettings
from switchyard.libs.engine import EngineConfig, EngineSettings
from switchyard.libs.models import ModelCard, ModelRegistry, ensure_model_path


class InferenceSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_INFERENCE_")

    # 'native' | 'tensorrt_llm' | 'vllm' (SWITCHYARD_VLLM_*: switchyard/libs/engine/settings.py) | 'sim': a simulated GPU (switchyard/libs/engine/sim.py)
    engine: str = "native"
    # The engine sets its own step-loop threads (SWITCHYARD_ENGINE_THREADS): leave torch alone here.
    torch_threads: int = 0
    device: str = "cpu"  # native engine: 'cpu' | 'cuda'
    # 'auto' measures the kernels at load: 'hybrid' (int4 for small decode steps, bf16 otherwise)
    # where bf16 is the fastest batched kernel (AVX-512 BF16, AMX); else 'native' (the engine's own
    # C++ block kernels, switchyard/libs/engine/native) where they beat int8, else 'int8'. Each keeps a prompt's
    # KV independent of batch shape, so a quiet replay reproduces token for token
    # (docs/architecture.md, "Weight formats").
    dtype: str = "auto"  # 'auto' | 'hybrid' | 'native' | 'int8' | 'bf16' | 'fp32'
    model_path: str | None = None
    # The name clients and the router use; None => the GGUF file name without its quantization suffix, or the
    # checkpoint directory's name.
    model_name: str | None = None
    pool: str = "default"
    max_model_len: int = 8192
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 512
    block_size: int = 16
    num_blocks: int = 0
    enable_prefix_caching: bool = True
    # The engine's scheduling (EngineConfig): 'priority' admits and preempts by the plan's priority, a waiting
    # request gaining one level per `priority_aging_s` seconds; 'fcfs' by arrival (vLLM's --scheduling-policy).
    scheduling_policy: Literal["priority", "fcfs"] = "priority"
    priority_aging_s: float = Field(1.0, ge=0)
    # Cached prompt prefixes are reused only within a tenant (its id salts the KV blocks' keys: vLLM's
    # cache_salt), so no tenant can time another's cached prompts. True shares them across tenants again.
    share_prefix_cache: bool = False
    # Converted weights; None => <data_dir>/cache/engine. Shared across data dirs, it makes restarts fast.
    cache_dir: str | None = None
    heartbeat_s: float = 2.0
    metrics_port: int | None = None  # Prometheus /metrics; None => off
    # Localhost by default (figures name the engine's load, not a public page); a container sets 0.0.0.0
    # so a scraper on its network can reach it.
    metrics_host: str = "127.0.0.1"
    # On SIGTERM, how long the answers being streamed may take to finish before the engine stops.
    drain_timeout_s: float = 30.0
    # How long a call the model wrote to an MCP tool may take in the tools stage (the server's own limit,
    # at most 120 s, bounds it there; this covers a tools stage that never answers).
    mcp_call_timeout_s: float = Field(default=130.0, gt=0, le=600)
    # The engine's own knobs, under their shared names (SWITCHYARD_ENGINE_THREADS, SWITCHYARD_MODEL_PATH,
    # SWITCHYARD_KV_CACHE_BYTES, SWITCHYARD_TOKENIZER_CACHE, SWITCHYARD_TRTLLM_MODEL): read with these settings.
    engine_env: EngineSettings = Field(default_factory=EngineSettings)
    # SWITCHYARD_INFERENCE_MODEL: the registry model this process serves (switchyard/libs/models); its entry sets the
    # engine kind, pool, served name and file. None: the settings above as they are (the bundled model).
    model: str | None = None
    registry: ModelRegistry = Field(default_factory=ModelRegistry)

    def card(self) -> ModelCard | None:
        return None if self.model is None else self.registry.get(self.model)

    def serve_card(self) -> None:
        """Take the engine kind, pool, name and file from this process's registry entry (assembling the file
        on first use). The simulated engine only needs a tokenizer: it keeps the bundled model's."""
        card = self.card()
        if card is None:
            return
        path = ensure_model_path(card)
        self.engine, self.pool, self.model_name = card.engine, card.pool, card.name
        self.max_model_len = min(self.max_model_len, card.context_length)
        if card.dtype is not None:
            self.dtype = card.dtype
        if card.engine != "sim":
            self.model_path = path

    def engine_config(self) -> EngineConfig:
        """The engine these settings describe (the service's setup and the pipeline benchmark build it alike):
        every EngineConfig field these settings name alike, the engine kind, and the weights cache."""
        alike = {f.name for f in dataclasses.fields(EngineConfig)} & set(type(self).model_fields)
        config = EngineConfig(kind=self.engine, **{name: getattr(self, name) for name in alike})
        config.cache_dir = self.cache_dir or f"{self.data_dir}/cache/engine"
        card = self.card()
        if config.kind == "sim" and card is not None and card.thinking is not None:
            # The simulated model thinks as the card says its model does (switchyard/libs/engine/sim.py).
            config.sim_thinking = (card.thinking.open, card.thinking.close)
        config = self.engine_env.apply(config)
        return self.engine_env.vllm_config(config) if config.kind == "vllm" else config
