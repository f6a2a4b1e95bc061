from pathlib import Path

from switchyard.libs.tools import ToolCall, ToolContext, ToolRunner, ToolSettings

DEV = ToolContext(tenant="default", user="dev", rid="r1")


async def run_one(runner: ToolRunner, args: dict, ctx: ToolContext = DEV):
    [res] = await runner.run([ToolCall(id="c1", name="orders", arguments=args)], ctx)
    return res


async def test_lookup_by_id_returns_status_items_and_events():
    runner = ToolRunner(ToolSettings())
    res = await run_one(runner, {"order_id": "A1002"})
    assert res.status == "ok"
    assert "A1002" in res.output and "out_for_delivery" in res.output
    assert "Wireless headphones" in res.output
    assert "Out for delivery" in res.output
    order = res.data["order"]
    assert order["items"][0]["sku"] == "HDP-22"
    assert len(order["delivery_events"]) == 5
    assert res.sources == ["orders:A1002"]


async def test_lowercase_id_is_accepted():
    res = await run_one(ToolRunner(ToolSettings()), {"order_id": "a1001"})
    assert res.status == "ok" and "delivered" in res.output


async def test_no_id_gives_most_recent_order_of_caller():
    res = await run_one(ToolRunner(ToolSettings()), {})
    assert res.status == "ok"
    assert res.data["order"]["id"] == "A1003"


async def test_other_users_order_is_not_found():
    runner = ToolRunner(ToolSettings())
    # A2001 exists but belongs to alice; B3001 is 'dev' but in another tenant.
    for oid in ("A2001", "B3001", "Z9999"):
        res = await run_one(runner, {"order_id": oid})
        assert res.data == {"found": False}
        assert "not found" in res.output.lower()
        assert "monitor" not in res.output.lower()
    # The same ids are visible to their owners.
    alice = ToolContext(tenant="default", user="alice", rid="r2")
    assert (await run_one(runner, {"order_id": "A2001"}, alice)).data["found"] is True
    acme_dev = ToolContext(tenant="acme", user="dev", rid="r3")
    assert (await run_one(runner, {"order_id": "B3001"}, acme_dev)).data["found"] is True


async def test_sql_injection_in_id_is_rejected():
    res = await run_one(ToolRunner(ToolSettings()), {"order_id": "A1' OR '1'='1"})
    assert res.status == "error"


async def test_unknown_user_has_no_orders():
    res = await run_one(ToolRunner(ToolSettings()), {}, ToolContext(tenant="default", user="nobody", rid="r"))
    assert res.data == {"found": False}


async def test_file_database_is_created_once(tmp_path: Path):
    db = tmp_path / "var" / "orders.db"
    runner = ToolRunner(ToolSettings(orders_db=str(db)))
    assert (await run_one(runner, {"order_id": "A1001"})).status == "ok"
    await runner.aclose()
    assert db.exists()
    runner2 = ToolRunner(ToolSettings(orders_db=str(db)))
    assert (await run_one(runner2, {"order_id": "A1001"})).status == "ok"
    await runner2.aclose()
