"""Subject names. Pipeline stages are queue groups: any number of replicas share a stage's work."""

from __future__ import annotations

STAGES = ("gateway", "context", "safety_in", "router", "tools", "inference", "safety_out", "logger")

CONTEXT = "pipeline.context"
# request/reply: judges the user's text while the model prefills (asked by safety_out, or by tools first)
SAFETY_IN = "pipeline.safety_in"
ROUTE = "pipeline.route"
TOOLS = "pipeline.tools"
SAFETY_OUT = "pipeline.safety_out"  # request/reply: the streaming handshake

TOOLS_SPECS = "tools.specs"  # request/reply: the server-side tools, for GET /v1/tools
SAVE_TURN = "context.save_turn"  # request/reply: persist a finished turn before `done`
CONVERSATION_GET = "context.conversation.get"
# Opens (creating when absent) a tenant's conversation; not_found when the id belongs to another tenant.
CONVERSATION_OPEN = "context.conversation.open"

# Inference replicas announce themselves in a JetStream key-value bucket of live replicas, key `<pool>.<replica>`; entries expire with their TTL.
REPLICAS_BUCKET = "replicas"
REPLICAS_TTL_S = 10.0

ADMIN_REQUEST_GET = "admin.requests.get"

# Key standing (abuse detection): the logger suspends, an admin reinstates, every gateway enforces.
STANDING_BUCKET = "key_standing"

LOG_STREAM = "LOG"
LOG_SUBJECTS = "log.>"
LOG_SPANS = "log.spans"


def infer(pool: str, replica: str) -> str:
    return f"infer.{pool}.{replica}"


def infer_any(pool: str) -> str:
    """Queue group of every replica of a pool: where work goes when its chosen replica is gone."""
    return f"infer.{pool}"


def stream_raw(rid: str) -> str:
    return f"stream.raw.{rid}"


def chat_events(rid: str) -> str:
    return f"chat.events.{rid}"


def chat_cancel(rid: str) -> str:
    return f"chat.cancel.{rid}"


def log_stage(stage: str) -> str:
    return f"log.{stage}"


def health(stage: str) -> str:
    return f"health.{stage}"


def health_of(stage: str, replica: str) -> str:
    """One replica's own health subject: no answer means that process is gone."""
    return f"health.{stage}.{replica}"
