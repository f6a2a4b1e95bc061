from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from switchyard.libs.store.knowledge import KnowledgeStore
from switchyard.schemas import SafetyPolicyEntry, TenantSafety


async def test_memory_per_user_and_idempotent_per_request(engine: AsyncEngine) -> None:
    store = KnowledgeStore(engine)
    await store.init()
    a = await store.remember("acme", "alice", "likes tea", source_rid="r1")
    again = await store.remember("acme", "alice", "likes tea", source_rid="r1")
    assert again.id == a.id
    await store.remember("acme", "alice", "lives in Oslo")
    await store.remember("acme", "bob", "likes coffee")
    assert [m.text for m in await store.memories("acme", "alice")] == ["likes tea", "lives in Oslo"]
    assert await store.memories("other", "alice") == []
    assert await store.forget("other", "alice", a.id) is False
    assert await store.forget("acme", "alice", a.id) is True
    assert [m.text for m in await store.memories("acme", "alice")] == ["lives in Oslo"]


async def test_files_scoped_by_tenant(engine: AsyncEngine) -> None:
    store = KnowledgeStore(engine)
    await store.init()
    f1 = await store.add_file("acme", "alice", "notes.txt", "hello world", chat_id="c1")
    f2 = await store.add_file("acme", "alice", "lib.md", "# lib", media_type="text/markdown")
    await store.add_file("acme", "bob", "bob.txt", "bob")
    assert f1.chars == 11
    got = await store.get_file("acme", f1.id)
    assert got is not None and got[1] == "hello world" and got[0].chat_id == "c1"
    assert await store.get_file("other", f1.id) is None
    assert [f.id for f in await store.list_files("acme", "alice")] == [f1.id, f2.id]
    assert [f.chars for f in await store.list_files("acme", "alice")] == [11, 5]
    assert len(await store.list_files("acme")) == 3
    assert [(i.name, t) for i, t in await store.chat_files("acme", "c1")] == [("notes.txt", "hello world")]
    assert await store.chat_files("other", "c1") == []
    f3 = await store.add_file("acme", "alice", "more.txt", "more", chat_id="c1")
    assert await store.delete_chat_files("other", "c1") == 0
    assert await store.delete_file("other", f3.id) is False
    assert await store.delete_file("acme", f3.id) is True
    assert await store.get_file("acme", f3.id) is None
    assert await store.delete_chat_files("acme", "c1") == 1
    assert await store.get_file("acme", f1.id) is None
    assert await store.get_file("acme", f2.id) is not None


async def test_instructions_upsert(engine: AsyncEngine) -> None:
    store = KnowledgeStore(engine)
    await store.init()
    assert (await store.instructions("acme")).text == ""
    await store.set_instructions("acme", "Be brief.")
    await store.set_instructions("acme", "Be very brief.")
    assert (await store.instructions("acme")).text == "Be very brief."
    assert (await store.instructions("other")).text == ""


async def test_safety_policy_upsert_and_read_with_instructions(engine: AsyncEngine) -> None:
    store = KnowledgeStore(engine)
    await store.init()
    assert await store.safety_policy("acme") == SafetyPolicyEntry(tenant="acme")
    first = TenantSafety.model_validate({"strikes": {"threshold": 3}})
    second = TenantSafety.model_validate({"answer_release": "judged", "thresholds": {"S6": {"block_at": None}}})
    await store.set_safety_policy("acme", first)
    saved = await store.set_safety_policy("acme", second)
    got = await store.safety_policy("acme")
    assert got.policy == second and got.updated_ms == saved.updated_ms > 0
    # "Left out" and "null" stay apart through the store: S6 never blocks, its flag threshold is the default.
    assert got.policy.thresholds["S6"].model_fields_set == {"block_at"}
    assert (await store.safety_policy("other")).policy == TenantSafety()

    await store.set_instructions("acme", "Be brief.")
    instructions, policy = await store.tenant_settings("acme")
    assert instructions.text == "Be brief." and policy == second
    instructions, policy = await store.tenant_settings("other")
    assert instructions.text == "" and policy == TenantSafety()


async def test_prompt_inputs_read_what_was_just_written(engine: AsyncEngine) -> None:
    """A prompt's reads in one go (on SQLite through a second, synchronous engine on the same file) see
    every write made before them, as the separate reads do."""
    store = KnowledgeStore(engine)
    await store.init()
    try:
        items, instructions, policy, files = await store.prompt_inputs("acme", "alice", "c1")
        assert (items, instructions.text, policy, files) == ([], "", TenantSafety(), [])
        await store.remember("acme", "alice", "likes tea")
        await store.set_instructions("acme", "Be brief.")
        strict = TenantSafety.model_validate({"thresholds": {"S6": {"block_at": None}}})
        await store.set_safety_policy("acme", strict)
        await store.add_file("acme", "alice", "notes.txt", "hello world", chat_id="c1")
        items, instructions, policy, files = await store.prompt_inputs("acme", "alice", "c1")
        assert [m.text for m in items] == [m.text for m in await store.memories("acme", "alice")] == ["likes tea"]
        assert (instructions, policy) == await store.tenant_settings("acme")
        assert instructions.text == "Be brief." and policy == strict
        assert files == await store.chat_files("acme", "c1") and [t for _, t in files] == ["hello world"]
        # No conversation: its files are not read; another user's memory is not theirs.
        assert await store.prompt_inputs("acme", "bob", None) == ([], instructions, policy, [])
    finally:
        store.close()
