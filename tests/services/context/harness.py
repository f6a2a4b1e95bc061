"""A client-side view of the context service for bus-level tests."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from switchyard.libs.bus import Bus
from switchyard.schemas import ChatEvent, SaveTurn, SaveTurnAck, Turn, Usage, Work, subjects


@dataclass
class Harness:
    client: Bus
    forwarded: dict[str, asyncio.Future[Work]]
    events: dict[str, asyncio.Future[ChatEvent]]

    async def assemble(self, work: Work) -> Work | ChatEvent:
        """Send work to the context stage; the forwarded work, or the error event for its rid."""
        loop = asyncio.get_running_loop()
        self.forwarded[work.rid] = loop.create_future()
        self.events[work.rid] = loop.create_future()

        async def on_event(ev: ChatEvent) -> None:
            if ev.type == "holder":
                return  # context saying it took the work, for the gateway's liveness watch
            if not self.events[ev.rid].done():
                self.events[ev.rid].set_result(ev)

        sub = await self.client.subscribe(subjects.chat_events(work.rid), ChatEvent, on_event)
        await self.client.flush()
        await self.client.publish(subjects.CONTEXT, work, rid=work.rid, tenant=work.tenant)
        futures: list[asyncio.Future[Work] | asyncio.Future[ChatEvent]] = [
            self.forwarded[work.rid],
            self.events[work.rid],
        ]
        done, _ = await asyncio.wait(futures, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        await sub.unsubscribe()
        assert done, "context neither forwarded nor failed"
        result: Work | ChatEvent = done.pop().result()
        return result

    async def turn(self, tenant: str, chat_id: str, text: str, answer: str, user: str = "alice") -> Work:
        rid = uuid.uuid4().hex
        w = await self.assemble(Work(rid=rid, tenant=tenant, user=user, key_id="k", chat_id=chat_id, text=text))
        assert isinstance(w, Work)
        ack = await self.client.request(
            subjects.SAVE_TURN,
            SaveTurn(
                tenant=tenant,
                user=user,
                chat_id=chat_id,
                turn=Turn(id="", rid=rid, user_text=text, answer=answer, status="complete", usage=Usage()),
            ),
            SaveTurnAck,
        )
        assert ack.turn_id
        return w
