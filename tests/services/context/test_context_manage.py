"""Management subjects over the bus: every one is tenant-scoped, and another tenant's ids are not_found."""

from __future__ import annotations

import uuid

import pytest
from pydantic import BaseModel

from switchyard.libs.bus import BusError
from switchyard.schemas import (
    ConversationList,
    ConversationListQuery,
    ConversationQuery,
    ConversationRename,
    ConversationSearch,
    ConversationSummary,
    DeleteAck,
    ErrorCode,
    FileContent,
    FileInfo,
    FileList,
    FileListQuery,
    FileQuery,
    FileUpload,
    Instructions,
    InstructionsQuery,
    MemoryAdd,
    MemoryDelete,
    MemoryItem,
    MemoryList,
    MemoryQuery,
    SafetyPolicyEntry,
    SafetyPolicyQuery,
    SearchReply,
    TenantSafety,
    Work,
)
from switchyard.schemas import subjects as S
from switchyard.schemas.subjects import SAFETY_POLICY_GET, SAFETY_POLICY_SET
from tests.services.context.harness import Harness


async def _not_found(h: Harness, subject: str, msg: BaseModel, reply: type[BaseModel]) -> None:
    with pytest.raises(BusError) as e:
        await h.client.request(subject, msg, reply)
    assert e.value.code == ErrorCode.not_found


async def test_conversations_list_rename_delete_search(harness: Harness) -> None:
    tenant = "t-" + uuid.uuid4().hex[:8]
    chats = [uuid.uuid4().hex for _ in range(3)]
    for i, chat in enumerate(chats):
        await harness.turn(tenant, chat, f"tell me about topic{i}", f"Topic{i} is interesting.")
    req = harness.client.request
    page = await req(S.CONVERSATIONS_LIST, ConversationListQuery(tenant=tenant, limit=2), ConversationList)
    assert [c.chat_id for c in page.items] == [chats[2], chats[1]] and page.next_cursor
    rest = await req(
        S.CONVERSATIONS_LIST, ConversationListQuery(tenant=tenant, cursor=page.next_cursor), ConversationList
    )
    assert [c.chat_id for c in rest.items] == [chats[0]] and rest.next_cursor is None
    assert page.items[0].title == "Topic2 is interesting." and page.items[0].turns == 1
    assert (await req(S.CONVERSATIONS_LIST, ConversationListQuery(tenant="nobody"), ConversationList)).items == []

    renamed = await req(
        S.CONVERSATIONS_RENAME, ConversationRename(tenant=tenant, chat_id=chats[0], title="Mine"), ConversationSummary
    )
    assert renamed.title == "Mine"
    await _not_found(
        harness,
        S.CONVERSATIONS_RENAME,
        ConversationRename(tenant="evil", chat_id=chats[0], title="x"),
        ConversationSummary,
    )

    hits = await req(S.CONVERSATIONS_SEARCH, ConversationSearch(tenant=tenant, q="TOPIC1"), SearchReply)
    assert {h.chat_id for h in hits.hits} == {chats[1]}
    assert (await req(S.CONVERSATIONS_SEARCH, ConversationSearch(tenant="evil", q="topic"), SearchReply)).hits == []

    await _not_found(harness, S.CONVERSATIONS_DELETE, ConversationQuery(tenant="evil", chat_id=chats[1]), DeleteAck)
    assert (await req(S.CONVERSATIONS_DELETE, ConversationQuery(tenant=tenant, chat_id=chats[1]), DeleteAck)).deleted
    await _not_found(harness, S.CONVERSATIONS_DELETE, ConversationQuery(tenant=tenant, chat_id=chats[1]), DeleteAck)


async def test_memory_crud(harness: Harness) -> None:
    tenant, user = "t-" + uuid.uuid4().hex[:8], "alice"
    req = harness.client.request
    item = await req(S.MEMORY_ADD, MemoryAdd(tenant=tenant, user=user, text=" likes green tea "), MemoryItem)
    assert item.text == "likes green tea"
    listed = await req(S.MEMORY_LIST, MemoryQuery(tenant=tenant, user=user), MemoryList)
    assert [m.id for m in listed.items] == [item.id]
    await _not_found(harness, S.MEMORY_DELETE, MemoryDelete(tenant="evil", user=user, id=item.id), DeleteAck)
    await _not_found(harness, S.MEMORY_DELETE, MemoryDelete(tenant=tenant, user="bob", id=item.id), DeleteAck)
    assert (await req(S.MEMORY_DELETE, MemoryDelete(tenant=tenant, user=user, id=item.id), DeleteAck)).deleted
    assert (await req(S.MEMORY_LIST, MemoryQuery(tenant=tenant, user=user), MemoryList)).items == []


async def test_files_and_instructions_reach_the_prompt(harness: Harness) -> None:
    tenant, user, chat = "t-" + uuid.uuid4().hex[:8], "alice", uuid.uuid4().hex
    req = harness.client.request
    attached = await req(
        S.FILES_PUT,
        FileUpload(tenant=tenant, user=user, name="policy.txt", text="Refunds within 30 days.", chat_id=chat),
        FileInfo,
    )
    library = await req(S.FILES_PUT, FileUpload(tenant=tenant, user=user, name="lib.md", text="# notes"), FileInfo)
    assert attached.chat_id == chat and attached.chars == 23
    got = await req(S.FILES_GET, FileQuery(tenant=tenant, id=attached.id), FileContent)
    assert got.text == "Refunds within 30 days."
    await _not_found(harness, S.FILES_GET, FileQuery(tenant="evil", id=attached.id), FileContent)
    listed = await req(S.FILES_LIST, FileListQuery(tenant=tenant, user=user), FileList)
    assert [f.id for f in listed.items] == [attached.id, library.id]
    in_chat = await req(S.FILES_LIST, FileListQuery(tenant=tenant, chat_id=chat), FileList)
    assert [f.id for f in in_chat.items] == [attached.id]
    # Another tenant attaching to the same chat id attaches to a conversation of its own.
    theirs = await req(
        S.FILES_PUT, FileUpload(tenant="evil", user="m", name="x.txt", text="EVIL FILE", chat_id=chat), FileInfo
    )
    assert theirs.chat_id == chat
    in_chat = await req(S.FILES_LIST, FileListQuery(tenant=tenant, chat_id=chat), FileList)
    assert [f.id for f in in_chat.items] == [attached.id]
    with pytest.raises(BusError) as e:
        await req(S.FILES_PUT, FileUpload(tenant=tenant, user=user, name="big.txt", text="x" * 200_001), FileInfo)
    assert e.value.code == ErrorCode.payload_too_large

    await req(S.INSTRUCTIONS_SET, Instructions(tenant=tenant, text="Always answer in French."), Instructions)
    assert (
        await req(S.INSTRUCTIONS_GET, InstructionsQuery(tenant=tenant), Instructions)
    ).text == "Always answer in French."
    assert (await req(S.INSTRUCTIONS_GET, InstructionsQuery(tenant="evil"), Instructions)).text == ""

    w = await harness.assemble(
        Work(rid=uuid.uuid4().hex, tenant=tenant, user=user, key_id="k", chat_id=chat, text="refund?")
    )
    assert isinstance(w, Work)
    system = w.prompt_messages[0].content
    assert system.index("Always answer in French.") < system.index("Refunds within 30 days.")
    assert "# notes" not in system  # library files are for search, not every prompt
    assert "EVIL FILE" not in system
    other = await harness.assemble(Work(rid=uuid.uuid4().hex, tenant="evil2", user=user, key_id="k", text="refund?"))
    assert isinstance(other, Work) and "French" not in other.prompt

    assert (await req(S.FILES_DELETE, FileQuery(tenant=tenant, id=attached.id), DeleteAck)).deleted
    await _not_found(harness, S.FILES_DELETE, FileQuery(tenant=tenant, id=attached.id), DeleteAck)


async def test_safety_policy_is_stored_per_tenant_and_rides_on_every_request(harness: Harness) -> None:
    tenant = "t-" + uuid.uuid4().hex[:8]
    req = harness.client.request
    unset = await req(SAFETY_POLICY_GET, SafetyPolicyQuery(tenant=tenant), SafetyPolicyEntry)
    assert unset.updated_ms == 0 and unset.policy == TenantSafety()
    policy = TenantSafety.model_validate(
        {"answer_release": "judged", "strikes": {"enabled": False}, "thresholds": {"S14": {"block_at": None}}}
    )
    saved = await req(SAFETY_POLICY_SET, SafetyPolicyEntry(tenant=tenant, policy=policy), SafetyPolicyEntry)
    assert saved.updated_ms > 0
    got = await req(SAFETY_POLICY_GET, SafetyPolicyQuery(tenant=tenant), SafetyPolicyEntry)
    assert got.policy == policy and got.policy.thresholds["S14"].model_fields_set == {"block_at"}
    assert (await req(SAFETY_POLICY_GET, SafetyPolicyQuery(tenant="evil"), SafetyPolicyEntry)).policy == TenantSafety()

    # With and without a stored conversation, the request leaves context carrying its tenant's policy.
    for chat_id in (uuid.uuid4().hex, None):
        w = await harness.assemble(
            Work(rid=uuid.uuid4().hex, tenant=tenant, user="alice", key_id="k", chat_id=chat_id, text="hi")
        )
        assert isinstance(w, Work) and w.safety == policy
        assert w.safety.thresholds["S14"].model_fields_set == {"block_at"}
    other = await harness.assemble(Work(rid=uuid.uuid4().hex, tenant="evil", user="m", key_id="k", text="hi"))
    assert isinstance(other, Work) and other.safety == TenantSafety()
