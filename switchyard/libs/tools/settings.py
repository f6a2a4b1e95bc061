"""Configuration for the tool library; the tools service fills it from its own env settings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from switchyard import CHECKOUT

# Defaults point into the repository so tests and `make run` work from any cwd.
REPO_ROOT = CHECKOUT
INFRA = REPO_ROOT / "infra"


class ToolSettings(BaseModel):
    # demo data
    orders_sql: Path = INFRA / "demo" / "orders.sql"
    orders_db: str = ":memory:"  # or a file path (e.g. var/orders.db); created from orders_sql if missing
    policies_dir: Path = INFRA / "policies"
    web_index: Path = INFRA / "web_index" / "pages.jsonl"

    # per-tool time limits (seconds), enforced by the runner around each call
    orders_timeout_s: float = 2.0
    docs_timeout_s: float = 5.0
    web_timeout_s: float = 5.0
    code_timeout_s: float = 8.0  # slightly above sandbox_wall_s so the sandbox reports its own timeout
    max_calls: int = 6  # a plan never runs more calls than this

    # planner: cosine similarity to a tool's example intents that plans it (when rules did not)
    planner_similarity: float = 0.55

    # docs / web search
    docs_top_k: int = 3
    docs_use_embeddings: bool = True
    web_top_k: int = 3
    web_provider: Literal["local", "http"] = "local"
    web_url: str | None = None  # SearxNG-style endpoint, e.g. http://127.0.0.1:8888/search

    # code sandbox limits
    sandbox_wall_s: float = 5.0
    sandbox_cpu_s: int = 3
    sandbox_memory_mb: int = 512  # RLIMIT_AS: virtual memory, so leave room for the interpreter
    sandbox_max_procs: int = 16
    sandbox_max_file_mb: int = 8
    sandbox_tmpfs_mb: int = 32
    sandbox_max_output_bytes: int = 16_384
    sandbox_python: str | None = None  # interpreter for user code; default: the current one
    allow_unisolated_code: bool = False  # run code with rlimits only when namespaces are unavailable

    # how much of each result goes into the prompt
    max_output_chars: int = Field(default=2000, ge=200)

    # MCP servers (switchyard/libs/tools/mcp): how often each replica lists a server's tools again, how long
    # a listing may take and how many bytes it may bring, how close a clause must be to a tool's
    # description for the planner to call it, and a stdio server's process limits (inside the sandbox).
    mcp_refresh_s: float = 60.0
    mcp_list_timeout_s: float = 10.0
    mcp_list_max_bytes: int = 1_048_576
    mcp_max_tools_per_server: int = 64
    mcp_similarity: float = 0.5
    mcp_stdio_cpu_s: int = 10
    mcp_stdio_memory_mb: int = 1024
    # How many times the model may call MCP tools itself in one request (each round: its calls run, their
    # results go back to it, it writes again); then it answers without tools.
    mcp_max_rounds: int = Field(default=3, ge=0, le=8)
