"""One message per engine step for each checker, instead of one per stream per step.

An engine step wakes every stream it made tokens for in the same turn of the event loop; each stream's
frame goes to the outbox (switchyard/libs/bus/outbox.py), which sends each checker (safety_out replica)
the frames of its streams as one message (`stream.steps.<checker>.<producer>`, switchyard/schemas/frames.py).
A stream's end goes through it too, after its last frame, so it never overtakes it.
"""

from __future__ import annotations

from typing import Any

from switchyard.libs.bus.outbox import Outbox
from switchyard.schemas.frames import TextKind, encode_step_frame


class StepOutbox(Outbox):
    def frame(
        self,
        subject: str,
        rid: str,
        seq: int,
        kind: TextKind,
        text: str,
        tokens: int,
        logprobs: list[dict[str, Any]] | None = None,
    ) -> None:
        self.add(subject, encode_step_frame(rid, seq, kind, text, tokens, logprobs))
