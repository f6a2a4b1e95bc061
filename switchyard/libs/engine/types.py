"""The engine's public data types. Torch-free so that importing them is cheap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from switchyard.libs.constraints import GrammarLimits

if TYPE_CHECKING:
    from switchyard.libs.tokenizer import Tokenizer


class ConstraintError(ValueError):
    """A constraint that cannot be compiled (a bad schema, regex or tool list, one over a grammar limit, or
    one that overran its compile) or read its prefix: the request's own fault, refused before it decodes."""


@dataclass(frozen=True)
class Constraint:
    """What the answer's tokens must spell, enforced per step by a grammar's token mask (grammar.py).

    kind: 'json_object' (any JSON object), 'json_schema' (spec: the schema as JSON text), 'regex'
    (spec: the pattern), 'choice' (spec: a JSON list of the allowed strings), or 'tools' (spec: JSON
    `{"mode": "required" | "auto", "tools": [{"name", "parameters"}]}`: a `<tool_call>` whose
    arguments validate; 'auto' leaves the text around a call free)."""

    kind: str
    spec: str = ""
    # Text already at the end of the prompt that the grammar reads first (a forced opening).
    prefix: str = ""


@dataclass
class SamplingParams:
    temperature: float = 0.0  # 0 => greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 => off
    min_p: float = 0.0  # 0 => off; else keep tokens at least min_p times as likely as the most likely
    seed: int | None = None
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False  # keep generating past EOS (benchmarks); an addition to the spec
    # OpenAI's penalties (on output tokens), vLLM's repetition_penalty (prompt and output; 1 => off),
    # and a bias added to chosen token ids' logits (switchyard/libs/engine/logits.py).
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    constraint: Constraint | None = None
    # Return each sampled token's log probability and this many top alternatives (None: off).
    logprobs: int | None = None
    # Not sampling knobs but the request's place in the engine, carried here as vLLM carries them beside
    # its SamplingParams (generate's `priority`, the prompt's `cache_salt`). Lower priority is served
    # sooner (vLLM's convention); a waiting request gains one level per EngineConfig.priority_aging_s.
    priority: int = 0
    # Mixed into the first KV block's key: prefixes are reused only between requests with the same salt.
    cache_salt: str | None = None


@dataclass
class Usage:
    prompt_tokens: int
    cached_tokens: int  # prompt tokens served from the prefix cache
    completion_tokens: int
    ttft_s: float | None
    tpot_s: float | None  # mean time per output token after the first


@dataclass
class TokenLogprobs:
    """A sampled token's log probability under the model's own distribution (before penalties, bias,
    grammar and temperature, as vLLM reports by default) and the `top` most likely (id, logprob)."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class StreamChunk:
    request_id: str
    text: str  # new text since the previous chunk (stop strings never leak)
    token_ids: list[int]  # new token ids
    finished: bool = False
    finish_reason: str | None = None  # 'stop' | 'length' | 'cancelled' | 'error'
    usage: Usage | None = None  # set on the final chunk
    # time.monotonic() of the step that sampled token_ids: per-token latency measured where tokens are made
    token_at: float | None = None
    logprobs: list[TokenLogprobs] | None = None  # one per token_ids entry, when params.logprobs is set

    def then(self, later: StreamChunk) -> StreamChunk:
        """This chunk and the next of the same request as one: what a consumer that fell a step behind
        takes in one go (a frame carries every token made since the previous one)."""
        lps = (
            None
            if self.logprobs is None and later.logprobs is None
            else [*(self.logprobs or []), *(later.logprobs or [])]
        )
        return StreamChunk(
            self.request_id,
            self.text + later.text,
            [*self.token_ids, *later.token_ids],
            later.finished,
            later.finish_reason,
            later.usage,
            later.token_at if later.token_at is not None else self.token_at,
            lps,
        )


def take_ready(queue: asyncio.Queue[StreamChunk], chunk: StreamChunk) -> StreamChunk:
    """`chunk` merged with every later chunk of its request already waiting in `queue`, up to the last."""
    while not chunk.finished and not queue.empty():
        chunk = chunk.then(queue.get_nowait())
    return chunk


async def relay(queue: asyncio.Queue[StreamChunk], cancel: Callable[[], None]) -> AsyncGenerator[StreamChunk, None]:
    """A request's chunks from its engine queue, up to the finished one, each with whatever else was
    already waiting (`take_ready`); a consumer that leaves early cancels the request (no steps for nobody)."""
    finished = False
    try:
        while not finished:
            chunk = take_ready(queue, await queue.get())
            finished = chunk.finished
            yield chunk
    finally:
        if not finished:
            cancel()


@dataclass
class EngineConfig:
    kind: str = "native"  # 'native' | 'tensorrt_llm' | 'vllm' | 'sim' (a simulated GPU, for measuring)
    model_path: str | None = None  # None => default_model_path()
    device: str = "cpu"
    dtype: str = "auto"  # 'fp32' | 'bf16' | 'int8' | 'hybrid' | 'auto' (measured at load)
    block_size: int = 16
    num_blocks: int = 0  # 0 => size from max_num_seqs * context (capped by kv_cache_bytes)
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 512
    enable_prefix_caching: bool = True
    cache_dir: str | None = None  # converted-weights cache; None => ./var/cache/engine
    max_model_len: int = 8192
    threads: int = 0  # torch intra-op threads of the step loop; 0 => follow the batch and the load (below)
    # With `threads` 0: a step of more than this many sequences leaves a core to the pipeline (cores - 1);
    # a smaller one may take every core (0: never). Small batches leave the pipeline little to do per step.
    wide_step_batch: int = 4
    # With `threads` 0: whether such a step takes every core only while the engine measures that wide
    # steps beat narrow ones (threads.py: they lose by 10x when another process holds a core), or always.
    adaptive_threads: bool = True
    # Niceness of the step thread and its OpenMP team: the pipeline's processes preempt it (0: unchanged).
    step_nice: int = 5
    kv_cache_bytes: int = 1 << 30  # KV budget when num_blocks is 0
    tokenizer_cache_dir: str | None = None  # None => var/cache/tokenizer; "" => none
    trtllm_model: str | None = None  # tensorrt_llm: HF checkpoint dir (cli export-hf); None => model_path if one
    # The native kernels' instruction set: 'auto' (the best the CPU has), 'avx512' (AMX tiles off) or
    # 'avx2' (AVX-512 VNNI off too): the same bits at that class's speed, to measure it on a newer CPU.
    kernel_isa: str = "auto"
    # 'priority': waiting requests are admitted, and running ones preempted, by priority with aging
    # (scheduler.py); 'fcfs': by arrival, the youngest preempted first. vLLM's --scheduling-policy.
    scheduling_policy: str = "priority"
    # Seconds a waiting request waits to gain one priority level (the aging rate); 0 ignores priorities.
    priority_aging_s: float = 1.0
    # The simulated engine (kind 'sim', switchyard/libs/engine/sim.py): its prefill time, a fixed time per decode
    # step (0: from the table), and the table of (batch size: ms per step) it interpolates.
    sim_ttft_ms: float = 10.26
    sim_tpot_ms: float = 0.0
    sim_step_table: str = "1:4.63,5:4.58,25:5.19,50:5.91,100:7.57,150:9.81,200:12.65,250:16.14"
    # A thinking model's delimiters (its card's ThinkingSpec): the simulated model then thinks for
    # `sim_think_tokens` tokens between them before it answers, unless the prompt already closed the thinking.
    sim_thinking: tuple[str, str] | None = None
    sim_think_tokens: int = 24
    # Bounds on constraints and their compiles (SWITCHYARD_GRAMMAR_* through EngineSettings); the defaults
    # are built without reading the environment.
    grammar_limits: GrammarLimits = field(default_factory=GrammarLimits.model_construct)


@dataclass
class EngineMetrics:
    running: int = 0
    waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_free: int = 0
    prefix_cache_queries_tokens: int = 0
    prefix_cache_hits_tokens: int = 0
    preemptions: int = 0
    last_batch_size: int = 0
    max_batch_size_seen: int = 0
    steps: int = 0
    generated_tokens: int = 0
    wide_steps: int = 0  # steps that ran on every core (EngineConfig.wide_step_batch)


@runtime_checkable
class AsyncEngine(Protocol):
    model_name: str
    tokenizer: Tokenizer
    max_model_len: int

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def generate(
        self, request_id: str, prompt: str | list[int], params: SamplingParams
    ) -> AsyncIterator[StreamChunk]: ...

    def cancel(self, request_id: str) -> None: ...

    def metrics(self) -> EngineMetrics: ...
