"""Messages bigger than the server's max payload travel as numbered parts on their own subject.

A finished answer with log probabilities (1,000 tokens, 20 alternatives each) is over a megabyte, and
NATS refuses any message over its max payload (1 MiB by default): the answer was lost whole. The bus
splits such a message into parts, each under the limit and marked `x-part: i/n`, published in order on
the same subject; the per-request readers (`Bus.watch`, `Bus.watch_frames`, the resume capture) put
them back together before decoding. Parts of one message are consecutive on their subject (one
publisher, one connection: NATS keeps their order), so a reader needs only the parts it has so far.
"""

from __future__ import annotations

from switchyard.libs.bus import headers as H

# Room left under the max payload for the headers of a part.
HEADROOM = 4096
# A message of more parts than this is refused on both sides: it is no answer, it is a flood.
MAX_PARTS = 64


def split(data: bytes, max_payload: int) -> list[bytes]:
    """`data` in parts that each fit; one part when it fits whole."""
    size = max(1, max_payload - HEADROOM)
    if len(data) <= size:
        return [data]
    parts = [data[i : i + size] for i in range(0, len(data), size)]
    if len(parts) > MAX_PARTS:
        raise ValueError(f"message of {len(data)} bytes is over {MAX_PARTS} parts of {size}")
    return parts


class Joiner:
    """Puts one subscription's parts back together; whole messages pass straight through."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def add(self, data: bytes, headers: dict[str, str] | None) -> bytes | None:
        """The whole message once its last part is in (at once for an unsplit one), else None."""
        mark = headers.get(H.PART) if headers else None
        if mark is None:
            return data
        at, _, of = mark.partition("/")
        i, n = int(at), int(of)
        if i == 1:
            self._parts = []
        if not 1 <= i <= n <= MAX_PARTS or i != len(self._parts) + 1:
            self._parts = []  # a part out of order (its earlier ones were lost): the message is lost
            raise ValueError(f"part {mark} out of order")
        self._parts.append(data)
        if i < n:
            return None
        whole, self._parts = b"".join(self._parts), []
        return whole
