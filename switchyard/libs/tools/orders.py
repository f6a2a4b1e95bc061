"""`orders`: the connected-app example, a read-only lookup in the demo orders database.

Every query is scoped to the caller's (tenant, user); an order id belonging to anyone else
is indistinguishable from one that does not exist, so ids cannot be probed.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

from switchyard.libs.tools.base import ToolError, ToolOutput
from switchyard.libs.tools.types import ToolContext

ORDER_ID_RE = re.compile(r"^[A-Z]\d{3,8}$")


class OrdersDB:
    """One SQLite connection shared by worker threads; a lock serialises access (queries are tiny)."""

    def __init__(self, db: str, sql_path: Path) -> None:
        self._db = db
        self._sql_path = sql_path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            fresh = self._db == ":memory:" or not Path(self._db).exists()
            if self._db != ":memory:":
                Path(self._db).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self._db, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            if fresh:
                conn.executescript(self._sql_path.read_text())
                conn.commit()
            self._conn = conn
        return self._conn

    def interrupt(self) -> None:
        # Called when the runner's time limit cancels the awaiting task: stops the query in its thread.
        if self._conn is not None:
            self._conn.interrupt()

    def lookup(self, tenant: str, user: str, order_id: str | None) -> dict[str, Any] | None:
        with self._lock:
            conn = self._connect()
            base = (
                "SELECT o.* FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.tenant = ? AND c.user_id = ?"
            )
            if order_id is None:
                row = conn.execute(base + " ORDER BY o.placed_at DESC LIMIT 1", (tenant, user)).fetchone()
            else:
                row = conn.execute(base + " AND o.id = ?", (tenant, user, order_id)).fetchone()
            if row is None:
                return None
            order = dict(row)
            order["items"] = [
                dict(r)
                for r in conn.execute(
                    "SELECT sku, name, quantity, unit_price_cents FROM order_items WHERE order_id = ? ORDER BY id",
                    (order["id"],),
                )
            ]
            order["delivery_events"] = [
                dict(r)
                for r in conn.execute(
                    "SELECT at, location, description FROM delivery_events WHERE order_id = ? ORDER BY at",
                    (order["id"],),
                )
            ]
            return order

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _money(cents: int, currency: str) -> str:
    return f"{cents / 100:.2f} {currency}"


def format_order(order: dict[str, Any]) -> str:
    cur = order["currency"]
    lines = [
        f"Order {order['id']} placed {order['placed_at'][:10]}: status {order['status']}, "
        f"total {_money(order['total_cents'], cur)}."
    ]
    if order.get("carrier"):
        lines.append(f"Carrier {order['carrier']}, tracking {order['tracking_number']}.")
    if order.get("estimated_delivery") and order["status"] not in ("delivered", "returned", "cancelled"):
        lines.append(f"Estimated delivery {order['estimated_delivery']}.")
    items = "; ".join(f"{i['quantity']} x {i['name']} ({_money(i['unit_price_cents'], cur)})" for i in order["items"])
    lines.append(f"Items: {items}.")
    if order["delivery_events"]:
        lines.append("Delivery events:")
        lines.extend(
            f"- {e['at'][:16].replace('T', ' ')} {e['location'] or ''}: {e['description']}"
            for e in order["delivery_events"]
        )
    else:
        lines.append("No delivery events yet.")
    return "\n".join(lines)


class OrdersTool:
    name = "orders"
    description = (
        "Look up one of the caller's own orders: status, items and delivery events. "
        "Without an order id, returns the caller's most recent order."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "order_id": {
                "type": "string",
                "description": "Order id such as A1002; omit for the caller's latest order",
            },
        },
        "additionalProperties": False,
    }

    def __init__(self, db: OrdersDB) -> None:
        self.db = db

    async def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        raw = arguments.get("order_id")
        order_id: str | None = None
        if raw is not None:
            order_id = str(raw).strip().upper()
            if not ORDER_ID_RE.match(order_id):
                raise ToolError(f"invalid order id {raw!r}")
        try:
            order = await asyncio.to_thread(self.db.lookup, ctx.tenant, ctx.user, order_id)
        except asyncio.CancelledError:
            self.db.interrupt()
            raise
        if order is None:
            what = f"order {order_id}" if order_id else "any order"
            # Same message whether the id exists for someone else or not at all.
            return ToolOutput(output=f"Not found: no {what} for this account.", data={"found": False})
        return ToolOutput(
            output=format_order(order),
            data={"found": True, "order": order},
            sources=[f"orders:{order['id']}"],
        )
