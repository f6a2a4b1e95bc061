"""Management subjects: conversation list/rename/delete/search, memory, files, tenant instructions and
safety policy.

Every handler scopes by the tenant in the request: a chat id names a conversation within its tenant only,
and a file id of another tenant's is `not_found`.
"""

from __future__ import annotations

from switchyard.libs.bus import Bus, BusError
from switchyard.libs.store.conversations import ConversationStore
from switchyard.libs.store.knowledge import KnowledgeStore
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
    TurnDelete,
)
from switchyard.schemas import subjects as subj
from switchyard.schemas.subjects import SAFETY_POLICY_GET, SAFETY_POLICY_SET
from switchyard.services.context.memory_check import MemoryRules

QUEUE = "context"


def _missing(what: str, ident: str) -> BusError:
    return BusError(ErrorCode.not_found, f"{what} {ident} not found")


class Manager:
    def __init__(
        self,
        conversations: ConversationStore,
        knowledge: KnowledgeStore,
        max_file_chars: int,
        memory_rules: MemoryRules | None = None,
    ):
        self.conversations = conversations
        self.knowledge = knowledge
        self.max_file_chars = max_file_chars
        self.memory_rules = memory_rules or MemoryRules()

    async def subscribe(self, bus: Bus) -> None:
        await bus.subscribe(subj.CONVERSATIONS_LIST, ConversationListQuery, self.list_conversations, queue=QUEUE)
        await bus.subscribe(subj.CONVERSATIONS_RENAME, ConversationRename, self.rename, queue=QUEUE)
        await bus.subscribe(subj.CONVERSATIONS_DELETE, ConversationQuery, self.delete, queue=QUEUE)
        await bus.subscribe(subj.CONVERSATIONS_SEARCH, ConversationSearch, self.search, queue=QUEUE)
        await bus.subscribe(subj.TURN_DELETE, TurnDelete, self.delete_turn, queue=QUEUE)
        await bus.subscribe(subj.MEMORY_LIST, MemoryQuery, self.memory_list, queue=QUEUE)
        await bus.subscribe(subj.MEMORY_ADD, MemoryAdd, self.memory_add, queue=QUEUE)
        await bus.subscribe(subj.MEMORY_DELETE, MemoryDelete, self.memory_delete, queue=QUEUE)
        await bus.subscribe(subj.FILES_PUT, FileUpload, self.file_put, queue=QUEUE)
        await bus.subscribe(subj.FILES_LIST, FileListQuery, self.file_list, queue=QUEUE)
        await bus.subscribe(subj.FILES_GET, FileQuery, self.file_get, queue=QUEUE)
        await bus.subscribe(subj.FILES_DELETE, FileQuery, self.file_delete, queue=QUEUE)
        await bus.subscribe(subj.INSTRUCTIONS_GET, InstructionsQuery, self.instructions_get, queue=QUEUE)
        await bus.subscribe(subj.INSTRUCTIONS_SET, Instructions, self.instructions_set, queue=QUEUE)
        await bus.subscribe(SAFETY_POLICY_GET, SafetyPolicyQuery, self.safety_policy_get, queue=QUEUE)
        await bus.subscribe(SAFETY_POLICY_SET, SafetyPolicyEntry, self.safety_policy_set, queue=QUEUE)

    # ---- conversations --------------------------------------------------------------------

    async def list_conversations(self, q: ConversationListQuery) -> ConversationList:
        items, nxt = await self.conversations.list_conversations(q.tenant, q.user, q.limit, q.cursor)
        return ConversationList(items=items, next_cursor=nxt)

    async def rename(self, q: ConversationRename) -> ConversationSummary:
        conv = await self.conversations.rename(q.tenant, q.chat_id, q.title)
        if conv is None:
            raise _missing("conversation", q.chat_id)
        return ConversationSummary(
            chat_id=conv.id, title=conv.title, created_ms=conv.created_ms, updated_ms=conv.updated_ms
        )

    async def delete(self, q: ConversationQuery) -> DeleteAck:
        if not await self.conversations.delete(q.tenant, q.chat_id):
            raise _missing("conversation", q.chat_id)
        await self.knowledge.delete_chat_files(q.tenant, q.chat_id)
        return DeleteAck(id=q.chat_id)

    async def delete_turn(self, q: TurnDelete) -> DeleteAck:
        if not await self.conversations.delete_turn(q.tenant, q.chat_id, q.rid):
            raise _missing("turn", q.rid)
        return DeleteAck(id=q.rid)

    async def search(self, q: ConversationSearch) -> SearchReply:
        return SearchReply(hits=await self.conversations.search(q.tenant, q.q, q.user, q.limit))

    # ---- memory ---------------------------------------------------------------------------

    async def memory_list(self, q: MemoryQuery) -> MemoryList:
        return MemoryList(items=await self.knowledge.memories(q.tenant, q.user))

    async def memory_add(self, q: MemoryAdd) -> MemoryItem:
        text = q.text.strip()
        _instructions, safety = await self.knowledge.tenant_settings(q.tenant)
        self.memory_rules.check_new(text, safety)  # nothing is stored for an item the rules catch
        return await self.knowledge.remember(q.tenant, q.user, text)

    async def memory_delete(self, q: MemoryDelete) -> DeleteAck:
        if not await self.knowledge.forget(q.tenant, q.user, q.id):
            raise _missing("memory item", q.id)
        return DeleteAck(id=q.id)

    # ---- files ----------------------------------------------------------------------------

    async def file_put(self, q: FileUpload) -> FileInfo:
        if len(q.text) > self.max_file_chars:
            raise BusError(
                ErrorCode.payload_too_large, f"file has {len(q.text)} characters; the limit is {self.max_file_chars}"
            )
        if "\x00" in q.text:
            raise BusError(ErrorCode.unsupported_media_type, "only text files can be uploaded")
        if q.chat_id is not None:
            await self.conversations.open(q.tenant, q.chat_id, q.user)
        return await self.knowledge.add_file(q.tenant, q.user, q.name, q.text, q.media_type, q.chat_id)

    async def file_list(self, q: FileListQuery) -> FileList:
        return FileList(items=await self.knowledge.list_files(q.tenant, q.user, q.chat_id))

    async def file_get(self, q: FileQuery) -> FileContent:
        got = await self.knowledge.get_file(q.tenant, q.id)
        if got is None:
            raise _missing("file", q.id)
        return FileContent(info=got[0], text=got[1])

    async def file_delete(self, q: FileQuery) -> DeleteAck:
        if not await self.knowledge.delete_file(q.tenant, q.id):
            raise _missing("file", q.id)
        return DeleteAck(id=q.id)

    # ---- tenant instructions --------------------------------------------------------------

    async def instructions_get(self, q: InstructionsQuery) -> Instructions:
        return await self.knowledge.instructions(q.tenant)

    async def instructions_set(self, q: Instructions) -> Instructions:
        return await self.knowledge.set_instructions(q.tenant, q.text)

    # ---- tenant safety policy -------------------------------------------------------------

    async def safety_policy_get(self, q: SafetyPolicyQuery) -> SafetyPolicyEntry:
        return await self.knowledge.safety_policy(q.tenant)

    async def safety_policy_set(self, q: SafetyPolicyEntry) -> SafetyPolicyEntry:
        return await self.knowledge.set_safety_policy(q.tenant, q.policy)
