"""The stack supervisor's side of `/v1/admin/models`: it writes the registry into the bus's key-value store at
start, and answers the gateway's requests to start a pool for a new entry and to stop one.

The supervisor is the only process that starts processes, so the gateway asks it (request/reply on
`subjects.POOLS_START` / `POOLS_STOP`); a deployment without one has no responder there, which the gateway
answers with a 503. It runs on its own thread and loop beside the stack's threads: a start waits for the new
pool's first heartbeat, or for its process to exit, or for the request's bound, and a pool that does not come
up is stopped and its entry removed before the answer, which carries the end of the pool's log."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from switchyard.libs.bus import Bus
from switchyard.libs.bus.kv import TypedKV
from switchyard.libs.models.admit import check_files, check_names
from switchyard.libs.models.live import LiveModels, open_models, reset
from switchyard.libs.models.registry import ModelRegistry
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import ErrorCode, Heartbeat, ModelCard, PoolReply, PoolStart, PoolStop, subjects

if TYPE_CHECKING:
    from switchyard.cli.stack import Stack

log = structlog.get_logger()
# What a failed start's answer carries of the pool's log.
LOG_TAIL_CHARS = 4000
# A pool stopping lets its streams finish first (SWITCHYARD_INFERENCE_DRAIN_TIMEOUT_S, 30 s by default).
STOP_WAIT_S = 40.0
SEED_WITHIN_S = 20.0


def pool_tag(pool: str) -> str:
    """The stack's name for the process that serves pool `pool` (its log is logs/<tag>.log)."""
    return f"inference-{pool}"


class PoolManager:
    def __init__(self, stack: Stack, registry: ModelRegistry, js_replicas: int = 1):
        self.stack = stack
        self.registry = registry
        self._js_replicas = js_replicas
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._beats: dict[str, Heartbeat] = {}
        self._beat = asyncio.Condition()
        self._lock = asyncio.Lock()
        self.live: LiveModels | None = None

    # ---- the thread ------------------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        """Seed the registry and answer requests; returns once both are done (raises what went wrong)."""
        self._thread = threading.Thread(target=self._run, name="supervisor-pools", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"the pool manager did not start within {timeout_s}s")
        if self._failed is not None:
            raise RuntimeError(f"the pool manager failed to start: {self._failed}") from self._failed

    def stop(self, timeout_s: float = 10.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:
            self._failed = e
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._beat = asyncio.Condition()
        self._lock = asyncio.Lock()
        assert self.stack.nats_url is not None
        bus = await Bus.connect(
            self.stack.nats_url, "supervisor", uuid.uuid4().hex[:6], setup_tracing("supervisor"), self._js_replicas
        )
        try:
            kv = await self._seeded(bus)
            self.live = LiveModels(self.registry, kv)
            await self.live.load()
            await kv.watch(self.live.changed)
            replicas = await bus.kv(subjects.REPLICAS_BUCKET, Heartbeat, ttl_s=subjects.REPLICAS_TTL_S)
            await replicas.watch(self._heartbeat)
            await bus.subscribe(subjects.POOLS_START, PoolStart, self.start_pool, queue="supervisor")
            await bus.subscribe(subjects.POOLS_STOP, PoolStop, self.stop_pool, queue="supervisor")
            self._ready.set()
            await self._stop.wait()
            await kv.close()
            await replicas.close()
        finally:
            await bus.close()

    async def _seeded(self, bus: Bus) -> TypedKV[ModelCard]:
        """The registry bucket, holding the settings' entries. A cluster that has just started may not have
        elected its JetStream leader yet: tried again for a while before the stack gives up."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SEED_WITHIN_S
        while True:
            try:
                kv = await open_models(bus)
                await reset(kv, self.registry)
                return kv
            except Exception as e:
                if loop.time() >= deadline:
                    raise
                log.warning("model registry not writable yet", error=str(e))
                await asyncio.sleep(0.5)

    async def _heartbeat(self, key: str, beat: Heartbeat | None) -> None:
        if beat is None:
            self._beats.pop(key, None)
        else:
            self._beats[key] = beat
        async with self._beat:
            self._beat.notify_all()

    def replicas_of(self, pool: str) -> list[Heartbeat]:
        return [b for b in self._beats.values() if b.pool == pool]

    # ---- requests ----------------------------------------------------------------------------------------

    async def start_pool(self, req: PoolStart) -> PoolReply:
        card = req.card
        assert self.live is not None
        async with self._lock:  # a check and its write together: two requests for one name cannot both pass
            try:
                check_names(card, self.live.registry)
                await asyncio.to_thread(check_files, card)
            except ValueError as e:
                return PoolReply(ok=False, code=ErrorCode.bad_request, message=str(e))
            tag = pool_tag(card.pool)
            if tag in self.stack.procs:
                return PoolReply(ok=False, code=ErrorCode.bad_request, message=f"pool {card.pool!r} is running")
            # The entry first: the new process reads its card from the registry, and every router knows the
            # model by the time its replica heartbeats.
            await self.live.kv.put(card.pool, card)
            await self.live.wait_for(lambda r: r.find(card.name) is not None, 5.0)
        log_path = self.stack.data_dir / "logs" / f"{tag}.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        env = {**self.stack.service_env, "SWITCHYARD_INFERENCE_MODEL": card.name}
        log.info("starting pool", model=card.name, pool=card.pool)
        restarts = self.stack.restarts.get(tag, 0)
        await asyncio.to_thread(self.stack.start_service, "inference", env, card.pool, card.engine)
        why = await self._wait_live(card.pool, tag, req.timeout_s, restarts)
        if why is None:
            return PoolReply(ok=True, card=card, replicas=self.replicas_of(card.pool))
        log.warning("pool failed to start", model=card.name, pool=card.pool, why=why)
        await self._remove(card.pool, tag, 5.0)
        return PoolReply(
            ok=False,
            code=ErrorCode.unavailable,
            message=f"model {card.name!r}: its pool {card.pool!r} {why}; the entry was removed",
            card=card,
            log_tail=_tail(log_path, offset),
        )

    async def _wait_live(self, pool: str, tag: str, timeout_s: float, restarts: int) -> str | None:
        """None once a replica of `pool` heartbeats; else why not (its process exited, or, under supervision,
        was restarted: it had exited; or the bound passed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.replicas_of(pool):
            code = self.stack.exit_code(tag)
            if code is None and self.stack.restarts.get(tag, 0) > restarts:
                code = self.stack.last_exit(tag)
            if code is not None:
                return f"exited with code {code} before serving"
            left = deadline - loop.time()
            if left <= 0:
                return f"had no live replica within {timeout_s:g}s"
            with contextlib.suppress(TimeoutError):
                async with self._beat:
                    # Woken by a heartbeat; a process exit is seen at the next round.
                    await asyncio.wait_for(self._beat.wait(), min(left, 0.5))
        return None

    async def _remove(self, pool: str, tag: str, stop_wait_s: float) -> None:
        assert self.live is not None
        await self.live.kv.delete(pool)
        if tag in self.stack.procs:
            await asyncio.to_thread(self.stack.stop_service, tag, stop_wait_s)

    async def stop_pool(self, req: PoolStop) -> PoolReply:
        assert self.live is not None
        card = self.live.registry.find(req.name)
        if card is None:
            return PoolReply(ok=False, code=ErrorCode.not_found, message=f"model {req.name!r} is not served")
        if card.name == self.live.registry.get(None).name:
            return PoolReply(
                ok=False,
                code=ErrorCode.bad_request,
                message=f"model {card.name!r} is the default model (SWITCHYARD_DEFAULT_MODEL): it cannot be removed",
            )
        log.info("stopping pool", model=card.name, pool=card.pool)
        # The entry goes first (every gateway refuses the model from here on), then the process, which lets
        # the streams it holds finish before it exits.
        await self._remove(card.pool, pool_tag(card.pool), STOP_WAIT_S)
        return PoolReply(ok=True, card=card, replicas=self.replicas_of(card.pool))


def _tail(path: Path, offset: int) -> str:
    """What the process wrote to its log since `offset`, its last LOG_TAIL_CHARS characters."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return ""
    return data[-LOG_TAIL_CHARS:].decode("utf-8", "replace")
