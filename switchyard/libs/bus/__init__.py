"""The only code that touches nats-py: typed publish, request/reply, queue-group subscribe."""

from switchyard.libs.bus.bus import Bus, BusError, MsgContext, NobodyListens, current_context
from switchyard.libs.bus.embedded import NatsServer, start_nats_server
from switchyard.libs.bus.liveness import Holder, Liveness
from switchyard.libs.bus.runner import run_service, serve
from switchyard.libs.bus.settings import ServiceSettings

__all__ = [
    "Bus",
    "BusError",
    "Holder",
    "Liveness",
    "MsgContext",
    "NatsServer",
    "NobodyListens",
    "ServiceSettings",
    "current_context",
    "run_service",
    "serve",
    "start_nats_server",
]
