from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from switchyard.libs.store.conversations import ConversationStore, title_from
from switchyard.schemas import Turn, Usage


def _turn(rid: str, q: str, a: str, status: str = "complete", ms: int = 0) -> Turn:
    return Turn(id="", rid=rid, user_text=q, answer=a, status=status, usage=Usage(prompt_tokens=3), created_ms=ms)  # type: ignore[arg-type]


async def test_open_is_tenant_scoped(engine: AsyncEngine) -> None:
    store = ConversationStore(engine)
    await store.init()
    conv = await store.open("acme", "c1", "alice")
    assert conv.id == "c1" and conv.tenant == "acme" and conv.title is None
    again = await store.open("acme", "c1", "bob")
    assert again.created_ms == conv.created_ms and again.user == "alice" and again.key == conv.key
    # Another tenant's "c1" is a conversation of its own: it neither sees nor takes over acme's.
    assert await store.get("other", "c1") is None and await store.turns("other", "c1") is None
    theirs = await store.open("other", "c1", "mallory")
    assert theirs.id == "c1" and theirs.tenant == "other" and theirs.user == "mallory" and theirs.key != conv.key


async def test_two_tenants_same_chat_id_are_independent(engine: AsyncEngine) -> None:
    store = ConversationStore(engine)
    await store.init()
    await store.save_turn("acme", "alice", "demo", _turn("ra", "acme's question", "acme's answer", ms=10))

    async def seen_by_zeta(chat_id: str) -> list[object]:
        """Everything zeta's calls return for `chat_id`, minus times and generated ids."""
        out: list[object] = [await store.get("zeta", chat_id), await store.turns("zeta", chat_id)]
        out.append(await store.history("zeta", chat_id, ("complete",)))
        out.append(await store.rename("zeta", chat_id, "t"))
        out.append(await store.delete("zeta", chat_id))
        conv = await store.open("zeta", chat_id, "zed")
        out.append((conv.id == chat_id, conv.title, conv.user))
        saved = await store.save_turn("zeta", "zed", chat_id, _turn(f"rz-{chat_id}", "zeta's question", "zeta's"))
        out.append(saved[1])
        got = await store.turns("zeta", chat_id)
        assert got is not None
        out.append([(t.user_text, t.answer) for t in got[1]])
        out.append([t.user_text for t in await store.history("zeta", chat_id, ("complete",))])
        listed, _ = await store.list_conversations("zeta", limit=50)
        out.append(sorted((c.title, c.turns) for c in listed if c.chat_id == chat_id))
        out.append([(h.chat_id == chat_id, h.title, h.snippet) for h in await store.search("zeta", "question")])
        return out

    # What zeta gets for an id acme uses is exactly what it gets for an id nobody uses.
    taken = await seen_by_zeta("demo")
    await store.delete("zeta", "demo")
    assert await seen_by_zeta("fresh") == taken
    assert taken[:5] == [None, None, [], None, False]
    assert taken[5] == (True, None, "zed") and taken[7] == [("zeta's question", "zeta's")]
    # acme's conversation is untouched by all of that, and sees none of zeta's turns.
    got = await store.turns("acme", "demo")
    assert got is not None and got[0].title == "acme's answer" and got[0].user == "alice"
    assert [(t.rid, t.answer) for t in got[1]] == [("ra", "acme's answer")]
    assert [t.rid for t in await store.history("acme", "demo", ("complete",))] == ["ra"]
    assert [h.chat_id for h in await store.search("acme", "question")] == ["demo"]
    assert await store.delete("acme", "demo") is True and await store.get("zeta", "fresh") is not None


async def test_save_turn_is_idempotent_and_titles_once(engine: AsyncEngine) -> None:
    store = ConversationStore(engine)
    await store.init()
    first = await store.save_turn("acme", "alice", "c1", _turn("r1", "hi", "# Hello there!\nHow can I help?"))
    assert first[1] is True
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
    # The same chat id in another tenant is another conversation.
    assert (await store.save_turn("other", "mallory", "c1", _turn("r9", "x", "y")))[1] is True
    got = await store.turns("acme", "c1")
    assert got is not None and [t.rid for t in got[1]] == ["r1", "r2", "r3", "r4"]


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
    assert again[1] is True


def test_title_from_answer() -> None:
    assert title_from("**Paris** is the capital.", "q") == "Paris is the capital."
    assert title_from("", "What is the capital of France?") == "What is the capital of France?"
    long = title_from("word " * 40, "q")
    assert long is not None and long.endswith("…") and len(long) <= 61
    assert title_from("", "") is None


async def test_turns_keep_tool_steps_and_thinking_and_older_tables_gain_the_columns(engine: AsyncEngine) -> None:
    from sqlalchemy import Index, MetaData, Table, insert

    from switchyard.libs.store.conversations import conversations, turns
    from switchyard.schemas import ToolEvent

    # The tables as an older version created them (chat ids were the conversations' keys, one
    # namespace for all tenants), holding one turn.
    old = MetaData()
    Table(
        "conversations",
        old,
        *[c._copy() for c in conversations.columns if c.name != "chat_id"],
        Index("ix_conversations_tenant_updated", "tenant", "updated_ms"),
    )
    old_turns = Table(
        "turns", old, *[c._copy() for c in turns.columns if c.name not in ("tools", "tool_prompt", "thinking")]
    )
    async with engine.begin() as conn:
        await conn.run_sync(old.create_all)
        await conn.execute(
            insert(old.tables["conversations"]).values(
                [
                    {"id": "c1", "tenant": "acme", "user": "alice", "title": None, "created_ms": 1, "updated_ms": 1},
                    {"id": "c2", "tenant": "zeta", "user": "zed", "title": "Zeta's", "created_ms": 2, "updated_ms": 2},
                ]
            )
        )
        await conn.execute(
            insert(old_turns).values(
                id="t0", conversation_id="c1", rid="r0", user_text="hi", answer="hello", status="complete",
                usage={}, created_ms=1,
            )
        )  # fmt: skip
    store = ConversationStore(engine)
    await store.init()
    await store.init()  # a restart: nothing left to migrate
    ev = ToolEvent(
        id="c1", name="orders_lookup", arguments={"order": 42}, status="ok", output="shipped", sources=["db"]
    )
    turn = _turn("r1", "where is 42?", "It shipped.", ms=5).model_copy(
        update={"tools": [ev], "tool_prompt": "<tool_results>shipped</tool_results>", "thinking": "look it up"}
    )
    await store.save_turn("acme", "alice", "c1", turn)
    got = await store.turns("acme", "c1")
    assert got is not None
    before, after = got[1]
    assert (before.rid, before.answer, before.tools, before.tool_prompt, before.thinking) == ("r0", "hello", [], "", "")
    assert after.tools == [ev] and after.tool_prompt == turn.tool_prompt and after.thinking == "look it up"
    # The older rows answer under their chat ids, each in its own tenant only, and those ids are
    # free in every other tenant.
    zeta = await store.get("zeta", "c2")
    assert zeta is not None and zeta.title == "Zeta's" and await store.get("acme", "c2") is None
    assert [c.chat_id for c in (await store.list_conversations("acme"))[0]] == ["c1"]
    assert (await store.save_turn("zeta", "zed", "c1", _turn("r2", "mine", "zeta's own")))[1] is True
    theirs = await store.turns("zeta", "c1")
    assert theirs is not None and [t.rid for t in theirs[1]] == ["r2"]
    ours = await store.turns("acme", "c1")
    assert ours is not None and [t.rid for t in ours[1]] == ["r0", "r1"]
    assert await store.delete("acme", "c1") is True and await store.get("zeta", "c1") is not None


async def test_delete_turn_is_tenant_scoped_and_takes_an_emptied_conversation(engine: AsyncEngine) -> None:
    store = ConversationStore(engine)
    await store.init()
    await store.save_turn("acme", "alice", "chain", _turn("r1", "q1", "a1", ms=1))
    await store.save_turn("acme", "alice", "chain", _turn("r2", "q2", "a2", ms=2))
    assert not await store.delete_turn("zeta", "chain", "r1")  # another tenant's turn is absent
    assert not await store.delete_turn("acme", "chain", "nope")
    assert await store.delete_turn("acme", "chain", "r1")
    got = await store.turns("acme", "chain")
    assert got is not None and [t.rid for t in got[1]] == ["r2"]
    assert await store.delete_turn("acme", "chain", "r2")
    assert await store.get("acme", "chain") is None  # no turn left: the conversation goes too
