from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from libs.store.conversations import ConversationStore, title_from
from schemas import Turn, Usage


def _turn(rid: str, q: str, a: str, status: str = "complete", ms: int = 0) -> Turn:
    return Turn(id="", rid=rid, user_text=q, answer=a, status=status, usage=Usage(prompt_tokens=3), created_ms=ms)  # type: ignore[arg-type]


async def test_open_is_tenant_scoped(engine: AsyncEngine) -> None:
    store = ConversationStore(engine)
    await store.init()
    conv = await store.open("acme", "c1", "alice")
    assert conv is not None and conv.tenant == "acme" and conv.title is None
    again = await store.open("acme", "c1", "bob")
    assert again is not None and again.created_ms == conv.created_ms and again.user == "alice"
    # Another tenant never sees (nor takes over) the id.
    assert await store.open("other", "c1") is None
    assert await store.get("other", "c1") is None
    assert await store.turns("other", "c1") is None


async def test_save_turn_is_idempotent_and_titles_once(engine: AsyncEngine) -> None:
    store = ConversationStore(engine)
    await store.init()
    first = await store.save_turn("acme", "alice", "c1", _turn("r1", "hi", "# Hello there!\nHow can I help?"))
    assert first is not None and first[1] is True
    dup = await store.save_turn("acme", "alice", "c1", _turn("r1", "hi", "other text"))
    assert dup == (first[0], False)
    await store.save_turn("acme", "alice", "c1", _turn("r2", "stop", "partial", status="stopped"))
    await store.save_turn("acme", "alice", "c1", _turn("r3", "boom", "", status="error"))
    await store.save_turn("acme", "alice", "c1", _turn("r4", "again", "fine"))
    got = await store.turns("acme", "c1")
    assert got is not None
    conv, turns = got
    assert conv.title == "Hello there!"
    assert [t.rid for t in turns] == ["r1", "r2", "r3", "r4"]
    assert turns[0].usage.prompt_tokens == 3 and turns[0].answer.startswith("# Hello")
    got = await store.turns("acme", "c1", statuses=("complete", "stopped"))
    assert got is not None and [t.rid for t in got[1]] == ["r1", "r2", "r4"]
    assert await store.save_turn("other", "mallory", "c1", _turn("r9", "x", "y")) is None


async def test_list_rename_delete_search(engine: AsyncEngine) -> None:
    store = ConversationStore(engine)
    await store.init()
    for i in range(5):
        await store.save_turn("acme", "alice", f"c{i}", _turn(f"r{i}", f"question {i}", f"answer {i}", ms=1000 + i))
    await store.save_turn("acme", "bob", "cb", _turn("rb", "bob's 100% question", "answer_b", ms=2000))
    await store.save_turn("zeta", "zed", "cz", _turn("rz", "question z", "answer z", ms=3000))

    page, cursor = await store.list_conversations("acme", "alice", limit=2)
    assert [c.chat_id for c in page] == ["c4", "c3"] and page[0].turns == 1 and cursor
    page2, cursor2 = await store.list_conversations("acme", "alice", limit=2, cursor=cursor)
    page3, cursor3 = await store.list_conversations("acme", "alice", limit=2, cursor=cursor2)
    assert [c.chat_id for c in page2 + page3] == ["c2", "c1", "c0"] and cursor3 is None
    everyone, _ = await store.list_conversations("acme", limit=50)
    assert {c.chat_id for c in everyone} == {"c0", "c1", "c2", "c3", "c4", "cb"}

    renamed = await store.rename("acme", "c1", "Renamed")
    assert renamed is not None and renamed.title == "Renamed"
    assert await store.rename("zeta", "c1", "stolen") is None

    hits = await store.search("acme", "QUESTION 3")
    assert [(h.chat_id, h.snippet) for h in hits] == [("c3", "question 3")]
    assert [h.chat_id for h in await store.search("acme", "renamed")] == ["c1"]
    # LIKE wildcards are literal text, and search never crosses tenants.
    assert [h.chat_id for h in await store.search("acme", "100%")] == ["cb"]
    assert [h.chat_id for h in await store.search("acme", "_b")] == ["cb"]
    assert await store.search("acme", "question z") == []
    assert [h.chat_id for h in await store.search("acme", "question", user="bob")] == ["cb"]

    assert await store.delete("zeta", "c2") is False
    assert await store.delete("acme", "c2") is True
    assert await store.turns("acme", "c2") is None
    assert await store.delete("acme", "c2") is False
    # The rid of a deleted turn is free again: the chat id can be reused.
    again = await store.save_turn("acme", "alice", "c2", _turn("r2", "question 2", "answer 2"))
    assert again is not None and again[1] is True


def test_title_from_answer() -> None:
    assert title_from("**Paris** is the capital.", "q") == "Paris is the capital."
    assert title_from("", "What is the capital of France?") == "What is the capital of France?"
    long = title_from("word " * 40, "q")
    assert long is not None and long.endswith("…") and len(long) <= 61
    assert title_from("", "") is None


async def test_turns_keep_tool_steps_and_thinking_and_older_tables_gain_the_columns(engine: AsyncEngine) -> None:
    from sqlalchemy import MetaData, Table, insert

    from libs.store.conversations import conversations, turns
    from schemas import ToolEvent

    # The tables as an older version created them, holding one turn.
    old = MetaData()
    Table("conversations", old, *[c._copy() for c in conversations.columns])
    old_turns = Table(
        "turns", old, *[c._copy() for c in turns.columns if c.name not in ("tools", "tool_prompt", "thinking")]
    )
    async with engine.begin() as conn:
        await conn.run_sync(old.create_all)
        await conn.execute(
            insert(old.tables["conversations"]).values(id="c1", tenant="acme", user="alice", created_ms=1, updated_ms=1)
        )
        await conn.execute(
            insert(old_turns).values(
                id="t0", conversation_id="c1", rid="r0", user_text="hi", answer="hello", status="complete",
                usage={}, created_ms=1,
            )
        )  # fmt: skip
    store = ConversationStore(engine)
    await store.init()
    ev = ToolEvent(
        id="c1", name="orders_lookup", arguments={"order": 42}, status="ok", output="shipped", sources=["db"]
    )
    turn = _turn("r1", "where is 42?", "It shipped.", ms=5).model_copy(
        update={"tools": [ev], "tool_prompt": "<tool_results>shipped</tool_results>", "thinking": "look it up"}
    )
    assert await store.save_turn("acme", "alice", "c1", turn) is not None
    got = await store.turns("acme", "c1")
    assert got is not None
    before, after = got[1]
    assert (before.rid, before.answer, before.tools, before.tool_prompt, before.thinking) == ("r0", "hello", [], "", "")
    assert after.tools == [ev] and after.tool_prompt == turn.tool_prompt and after.thinking == "look it up"
