"""Subject names. Pipeline stages are queue groups: any number of replicas share a stage's work.

Every subject with a variable part is built here, and each part goes through `token`: a client's id
that held `>` or `*` would otherwise subscribe to every tenant's stream, and one with `.` would name
another subject. The gateway refuses such ids at the edge (`ID_PATTERN`); `token` is the
second wall, for whatever reaches a subject some other way.
"""

from __future__ import annotations

import re

STAGES = ("gateway", "context", "safety_in", "router", "tools", "inference", "safety_out", "logger")

CONTEXT = "pipeline.context"
# request/reply: judges the user's text while the model prefills (asked by safety_out, or by tools first)
SAFETY_IN = "pipeline.safety_in"
ROUTE = "pipeline.route"
TOOLS = "pipeline.tools"
SAFETY_OUT = "pipeline.safety_out"  # request/reply: the streaming handshake
# plain, queue groups `safety_in` and `tools`: context publishes each `Work` as it takes it, so those stages
# start their model passes on the user's text early (switchyard/libs/early.py). Not under `pipeline.`: nothing
# answers it and nothing is reported to the client from it.
EARLY = "early.work"

TOOLS_SPECS = "tools.specs"  # request/reply: the server-side tools, for GET /v1/tools
# request/reply, queue group `tools`: what a tools replica found at each registered MCP server
TOOLS_MCP_STATUS = "tools.mcp.status"
# request/reply, queue group `tools`: inference hands over a call the model wrote to an MCP tool
TOOLS_MCP_CALL = "tools.mcp.call"
# MCP servers an operator registered (`/v1/admin/mcp-servers`), watched by every tools replica; key
# `global.<name>` or `t<tenant digest>.<name>` (switchyard/schemas/mcp.py), value an McpServerEntry.
MCP_BUCKET = "mcp_servers"
SAVE_TURN = "context.save_turn"  # request/reply: persist a finished turn before `done`
CONVERSATION_GET = "context.conversation.get"
# Opens (creating when absent) a tenant's conversation; not_found when the id belongs to another tenant.
CONVERSATION_OPEN = "context.conversation.open"

# Inference replicas announce themselves in a JetStream key-value bucket of live replicas, key `<pool>.<replica>`; entries expire with their TTL.
REPLICAS_BUCKET = "replicas"
REPLICAS_TTL_S = 10.0

# Conversations, memory, files and instructions (request/reply, queue group `context`).
CONVERSATIONS_LIST = "context.conversations.list"
CONVERSATIONS_RENAME = "context.conversations.rename"
CONVERSATIONS_DELETE = "context.conversations.delete"
CONVERSATIONS_SEARCH = "context.conversations.search"
TURN_DELETE = "context.turn.delete"
MEMORY_LIST = "context.memory.list"
MEMORY_ADD = "context.memory.add"
MEMORY_DELETE = "context.memory.delete"
FILES_PUT = "context.files.put"
FILES_LIST = "context.files.list"
FILES_GET = "context.files.get"
FILES_DELETE = "context.files.delete"
INSTRUCTIONS_GET = "context.instructions.get"
INSTRUCTIONS_SET = "context.instructions.set"
# A tenant's safety policy, kept by the context service beside its instructions.
SAFETY_POLICY_GET = "context.safety_policy.get"
SAFETY_POLICY_SET = "context.safety_policy.set"

# The logger's queries over request records (request/reply).
ADMIN_REQUEST_GET = "admin.requests.get"
ADMIN_REQUESTS_LIST = "admin.requests.list"
# Dashboard aggregates over a window, bucketed.
ADMIN_STATS = "admin.requests.stats"
# Full records a page at a time (datasets); preference pairs joined with both answers.
ADMIN_REQUESTS_EXPORT = "admin.requests.export"
ADMIN_PREFERENCES_EXPORT = "admin.preferences.export"
ADMIN_FEEDBACK_LIST = "admin.feedback.list"
ADMIN_KEY_USAGE = "admin.keys.usage"

# API keys: a key created, revoked or changed, so every gateway drops its cached copy.
KEYS_CHANGED = "keys.changed"

# The model registry every gateway, context, router and inference process follows (a watch): one entry per
# model, key `<pool>` (a subject token), value its ModelCard (switchyard/libs/models/live.py). Seeded from the
# settings at stack start; `/v1/admin/models` adds and removes entries through the stack supervisor.
MODELS_BUCKET = "models"
# request/reply, answered by the stack supervisor (`switchyard run`), the one process that starts processes:
# start a pool for a new entry / stop one (switchyard/schemas/models.py PoolStart, PoolStop, PoolReply). No
# responder: a deployment without the supervisor (compose), which cannot start pools.
POOLS_START = "supervisor.pools.start"
POOLS_STOP = "supervisor.pools.stop"

# request/reply: sentence embeddings from the service that hosts the encoder (switchyard/schemas/embeddings.py)
EMBEDDINGS = "tools.embeddings"
# request/reply: a prompt rendered and encoded as the context stage does it, and ids decoded (switchyard/schemas/tokens.py)
TOKENIZE = "context.tokenize"
DETOKENIZE = "context.detokenize"

# Key standing (abuse detection): the logger suspends, an admin reinstates, every gateway enforces.
STANDING_BUCKET = "key_standing"

# What a client may send where an id reaches a subject or names a stored thing (rid, file id, memory item,
# key id): every id the server makes (uuid hex rids and `<rid>-<n>`, `file-<hex>`, `key_<hex>`) matches.
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# NATS reads `.` as a separator, `*` and `>` as wildcards, and whitespace or control characters end the
# protocol line; none of them may appear in a subject token.
_NOT_A_TOKEN = re.compile(r"[.*>\s\x00-\x1f\x7f]")
MAX_TOKEN_CHARS = 256

# Wildcard subscriptions, written once: the cancel listeners and the captured events of every stream.
CHAT_CANCEL_ANY = "chat.cancel.*"
CHAT_EVENTS_ALL = "chat.events.>"
CHAT_OWNER_ALL = "chat.owner.>"

LOG_STREAM = "LOG"
LOG_SUBJECTS = "log.>"
LOG_STAGES_ANY = "log.*"  # one token under `log.`: the stages' records (`log_stage`), spans and feedback
LOG_SPANS = "log.spans"
# Feedback travels through JetStream like the stage records, so it survives a logger restart.
LOG_FEEDBACK = "log.feedback"
# The start of every pipeline stage's subject (a stage's deadline ends the client's stream too).
PIPELINE_PREFIX = "pipeline."

# The gateway's in-memory JetStream stream of each chat's events and owner marker, for resuming a stream.
CHAT_EVENTS_STREAM = "CHAT_EVENTS"


def template(subject: str) -> str:
    """`subject` with its variable part named instead of given, for low-cardinality span names:
    `chat.events.{rid}.direct`, not the rid itself."""
    parts = subject.split(".")
    if parts[:2] == ["chat", "events"] and len(parts) == 4:
        return f"chat.events.{{rid}}.{parts[3]}"
    if parts[0] in ("stream", "chat") and len(parts) == 3:
        return f"{parts[0]}.{parts[1]}.{{rid}}"
    if parts[:2] == ["stream", "steps"] and len(parts) == 4:
        return "stream.steps.{checker}.{producer}"
    if parts[:2] == ["chat", "steps"] and len(parts) == 4:
        return "chat.steps.{gateway}.{checker}"
    if parts[0] == "infer" and len(parts) == 3 and parts[1] != "heartbeat":
        return f"infer.{parts[1]}.{{replica}}"
    return subject


def token(value: str) -> str:
    """`value` as one subject token; ValueError when it is empty, too long, or holds a separator,
    a wildcard, whitespace or a control character."""
    if not value or len(value) > MAX_TOKEN_CHARS or _NOT_A_TOKEN.search(value):
        raise ValueError(f"not a subject token: {value[:80]!r}")
    return value


def infer(pool: str, replica: str) -> str:
    return f"infer.{token(pool)}.{token(replica)}"


def infer_any(pool: str) -> str:
    """Queue group of every replica of a pool: where work goes when its chosen replica is gone."""
    return f"infer.{token(pool)}"


def stream_steps(checker: str, producer: str) -> str:
    """Inference replica `producer`'s engine steps for the streams safety_out replica `checker` holds: one
    message per step (switchyard/schemas/frames.py). One publisher per subject, so a message split in parts
    arrives whole and in order."""
    return f"stream.steps.{token(checker)}.{token(producer)}"


def stream_steps_to(checker: str) -> str:
    """Every inference replica's steps for safety_out replica `checker`: its one subscription for them."""
    return f"stream.steps.{token(checker)}.*"


def chat_events(rid: str) -> str:
    """Events of `rid` that the relaying gateway hears on the rid's own subscription: every stage's tool,
    holder, prompt and error events, and the answer itself when the request names no relaying replica."""
    return f"chat.events.{token(rid)}.direct"


def chat_events_kept(rid: str) -> str:
    """A copy of what safety_out sent the relaying gateway on `chat_steps`, for `CHAT_EVENTS` to keep:
    nobody subscribes to it, so it costs the gateway nothing."""
    return f"chat.events.{token(rid)}.kept"


def chat_events_of(rid: str) -> str:
    """Both of the above, in the order the server took them: what resuming replays (its event ids)."""
    return f"chat.events.{token(rid)}.*"


def chat_steps(gateway: str, checker: str) -> str:
    """safety_out replica `checker`'s passes for the streams gateway replica `gateway` relays: one message
    per pass (switchyard/schemas/frames.py). One publisher per subject, so its order is the pass order."""
    return f"chat.steps.{token(gateway)}.{token(checker)}"


def chat_steps_to(gateway: str) -> str:
    """Every safety_out replica's passes for gateway replica `gateway`: its one subscription for them."""
    return f"chat.steps.{token(gateway)}.*"


def chat_owner(rid: str) -> str:
    """The marker that says whose stream `rid` is (not `chat.events.<rid>`: that carries ChatEvents only)."""
    return f"chat.owner.{token(rid)}"


def chat_cancel(rid: str) -> str:
    return f"chat.cancel.{token(rid)}"


def log_stage(stage: str) -> str:
    return f"log.{token(stage)}"


def health(stage: str) -> str:
    return f"health.{token(stage)}"


def health_of(stage: str, replica: str) -> str:
    """One replica's own health subject: no answer means that process is gone."""
    return f"health.{token(stage)}.{token(replica)}"
