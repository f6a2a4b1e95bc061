"""Grammars compile in a worker process, under a time limit.

xgrammar releases the GIL while it compiles, so a compile on a thread would not stop the step loop;
but a thread cannot be stopped, and the compiler's transient allocations stay in the engine's heap.
In a process, a compile that overruns is ended by killing the worker, and its memory goes with it:
the engine process only deserializes the finished grammar."""

from __future__ import annotations

import ctypes
import multiprocessing
import threading
from multiprocessing.connection import Connection
from typing import Any

import xgrammar as xgr

from switchyard.libs.engine.types import Constraint, ConstraintError

STARTUP_TIMEOUT_S = 120.0


def release_free_memory() -> None:
    """Hands freed heap pages back to the system (glibc keeps them otherwise, and RSS never falls)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def _serve(conn: Connection, tokenizer_json: str) -> None:
    from switchyard.libs.engine.grammar import build_grammar

    compiler = xgr.GrammarCompiler(
        xgr.TokenizerInfo.deserialize_json(tokenizer_json), max_threads=1, cache_enabled=False
    )
    conn.send((True, "ready"))
    while True:
        try:
            kind, spec = conn.recv()
        except EOFError:
            return
        try:
            reply: tuple[bool, str] = (
                True,
                compiler.compile_grammar(build_grammar(Constraint(kind, spec))).serialize_json(),
            )
        except Exception as e:  # a refusal goes back as text: the worker keeps serving
            reply = (False, str(e))
        conn.send(reply)
        del reply
        release_free_memory()


class CompileWorker:
    """One worker process, started on first use and again after it is killed; one compile at a time."""

    def __init__(self, info: xgr.TokenizerInfo, timeout_s: float) -> None:
        self.info = info
        self.timeout_s = timeout_s
        self._tokenizer_json = info.serialize_json()
        self._ctx = multiprocessing.get_context("spawn")  # the engine process has threads; fork is unsafe
        self._proc: Any = None
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self.restarts = 0

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _ensure(self) -> Connection:
        if self._proc is None or not self._proc.is_alive() or self._conn is None:
            self._stop()
            ours, theirs = self._ctx.Pipe()
            self._proc = self._ctx.Process(
                target=_serve, args=(theirs, self._tokenizer_json), name="grammar-compile", daemon=True
            )
            self._proc.start()
            theirs.close()
            self._conn = ours
            # Starting takes seconds (imports): not counted against the first compile's limit.
            if not ours.poll(STARTUP_TIMEOUT_S):
                self._stop()
                raise RuntimeError("the grammar compiler process did not start")
            try:
                ours.recv()
            except (EOFError, OSError) as e:
                self._stop()
                raise RuntimeError("the grammar compiler process did not start") from e
        return self._conn

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
                self.restarts += 1
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None

    def compile(self, c: Constraint, limit_name: str) -> xgr.CompiledGrammar:
        """The compiled grammar; ConstraintError when xgrammar refuses it or it takes over `timeout_s`
        (counted from when the worker has it, not from when it queued behind another compile)."""
        with self._lock:
            conn = self._ensure()
            conn.send((c.kind, c.spec))
            if not conn.poll(self.timeout_s):
                self._stop()
                raise ConstraintError(
                    f"the {c.kind} constraint took over {self.timeout_s:g}s to compile (limit {limit_name})"
                )
            try:
                ok, payload = conn.recv()
            except (EOFError, OSError) as e:
                self._stop()
                raise ConstraintError(f"the {c.kind} constraint ended its compiler process") from e
        if not ok:
            raise ConstraintError(f"invalid {c.kind} constraint: {payload.strip()}")
        grammar = xgr.CompiledGrammar.deserialize_json(payload, self.info)
        del payload
        release_free_memory()
        return grammar

    def close(self) -> None:
        with self._lock:
            self._stop()
