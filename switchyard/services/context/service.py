"""Context handlers: prompt assembly for the pipeline, and the conversation subjects the gateway and
safety_out call. Management subjects (lists, memory, files, instructions) live in `manage.py`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from opentelemetry import trace

from switchyard.libs.bus import Bus, BusError
from switchyard.libs.models import ModelRegistry
from switchyard.libs.models.live import LiveModels
from switchyard.libs.plan import PlanError, plan_work, template_inputs
from switchyard.libs.store.conversations import ConversationStore
from switchyard.libs.store.db import make_engine
from switchyard.libs.store.knowledge import KnowledgeStore
from switchyard.libs.tokenizer import TemplateError
from switchyard.schemas import (
    ChatMessage,
    ContextPart,
    ConversationQuery,
    ConversationReply,
    DetokenizeQuery,
    ErrorCode,
    FileVerdict,
    Forward,
    RequestPlan,
    SaveTurn,
    SaveTurnAck,
    TenantSafety,
    TokenizeQuery,
    Work,
    subjects,
)
from switchyard.services.context.facts import fact_to_remember
from switchyard.services.context.file_check import FileChecks
from switchyard.services.context.manage import Manager
from switchyard.services.context.memory_check import MemoryRules
from switchyard.services.context.models import ModelTemplates
from switchyard.services.context.prompt import (
    ChatTemplate,
    PromptParts,
    PromptRenderer,
    PromptTooLong,
    generation,
    group_client_messages,
    turns_to_history,
)
from switchyard.services.context.settings import ContextSettings
from switchyard.services.context.tokens import TokenCodec, Tokens

log = structlog.get_logger()

# Turns that go back into a prompt: an errored turn has no answer worth repeating.
HISTORY_STATUSES = ("complete", "stopped")
# Prompts up to this many characters are rendered on the event loop (at most about a millisecond's work),
# longer ones on a worker thread.
INLINE_RENDER_CHARS = 2000


def not_found(chat_id: str) -> BusError:
    return BusError(ErrorCode.not_found, f"conversation {chat_id} not found")


def check_logit_bias(work: Work, renderer: PromptRenderer, model: str | None) -> None:
    """A `logit_bias` on a token id the model does not have is the client's mistake: refused here, where the
    model's vocabulary is first known, rather than left to the engine (which could only end the answer empty)."""
    vocab = renderer.template.vocab_size
    bad = next((t for t in work.sampling.logit_bias if not 0 <= t < vocab), None)
    if bad is not None:
        raise BusError(
            ErrorCode.bad_request,
            f"logit_bias token id {bad} is not in the vocabulary of model {model or 'default'!r} "
            f"(token ids 0 to {vocab - 1})",
        )


class Context:
    def __init__(
        self,
        conversations: ConversationStore,
        knowledge: KnowledgeStore,
        renderer: PromptRenderer,
        memory_items: int = 50,
        tools: list[dict[str, Any]] | None = None,
        models: ModelTemplates | None = None,
    ):
        self.conversations = conversations
        self.knowledge = knowledge
        # The default model's; another model's comes from `models` (its own template and vocabulary).
        self.renderer = renderer
        self.models = models
        self.memory_items = memory_items
        # Tool definitions rendered first in every system block; none are defined yet.
        self.tools = tools or []
        self.file_checks = FileChecks(renderer.file_chars)
        self.memory_rules = MemoryRules()

    async def _parts(self, work: Work) -> tuple[PromptParts, TenantSafety]:
        parts, safety, _withheld = await self._parts_checked(work)
        return parts, safety

    async def _parts_checked(self, work: Work) -> tuple[PromptParts, TenantSafety, list[str]]:
        """`_parts`, and the ids of the memory items left out because input safety's rules catch them."""
        inputs = self.knowledge.prompt_inputs(work.tenant, work.user, work.chat_id)
        if work.chat_id:
            turns, (memory, instructions, safety, chat_files) = await asyncio.gather(
                self.conversations.history(work.tenant, work.chat_id, HISTORY_STATUSES), inputs
            )
            # A stored conversation's turns, then what the client sent with this message (a Responses API
            # request chained by previous_response_id may carry earlier items of its own).
            client_system, client_history = group_client_messages(work.messages)
            history = turns_to_history(turns) + client_history
        else:
            memory, instructions, safety, chat_files = await inputs
            client_system, history = group_client_messages(work.messages)
        newest = memory[-self.memory_items :] if self.memory_items else []
        memory, withheld = await self.memory_rules.usable(newest, safety)
        parts = PromptParts(
            user_text=work.text,
            history=history,
            instructions=instructions.text,
            client_system="\n\n".join(s for s in (client_system, work.system or "") if s),
            # The newest facts, still in saved order so the block only grows at its end.
            memory=memory,
            files=chat_files,
            tools=[*self.tools, *(work.client_tools if work.tool_choice != "none" else [])],
            prefill=work.prefill,
            add_generation_prompt=work.add_generation_prompt,
        )
        return parts, safety, withheld

    async def renderer_for(self, model: str | None) -> PromptRenderer:
        return self.renderer if self.models is None else await self.models.renderer(model)

    async def render_for(self, work: Work, add_generation_prompt: bool = True) -> str:
        """The prompt `assemble` would render for `work`, untrimmed (for counting its tokens)."""
        parts, _ = await self._parts(work)
        p = self.plan(work)
        renderer = await self.renderer_for(p.model)
        kwargs, after = template_inputs(p, renderer.template.template)
        messages = renderer.messages(parts)
        prompt, continuing = generation(parts)
        return await asyncio.to_thread(
            renderer.render_messages, messages, add_generation_prompt and prompt, parts.tools, kwargs, after, continuing
        )

    async def render_visible(self, work: Work, add_generation_prompt: bool = True) -> tuple[str, str | None]:
        """`render_for`'s prompt, and the same prompt without the tenant's instructions (None where the
        tenant has none): what a key that may not read them is shown of it."""
        parts, _ = await self._parts(work)
        p = self.plan(work)
        renderer = await self.renderer_for(p.model)
        kwargs, after = template_inputs(p, renderer.template.template)

        def render(of: PromptParts) -> str:
            return renderer.render_messages(renderer.messages(of), add_generation_prompt, of.tools, kwargs, after)

        full = await asyncio.to_thread(render, parts)
        if not parts.instructions.strip():
            return full, None
        return full, await asyncio.to_thread(render, dataclasses.replace(parts, instructions=""))

    def plan(self, work: Work) -> RequestPlan:
        """The work's plan (the gateway's); made here only for work that arrives without one."""
        try:
            return plan_work(work, self.models.registry if self.models is not None else ModelRegistry())
        except PlanError as e:
            raise BusError(ErrorCode.bad_request, str(e)) from e

    async def assemble(self, work: Work) -> Forward:
        p = self.plan(work)
        if work.prompt_mode == "raw":
            return await self.assemble_raw(work.model_copy(update={"plan": p}))
        # The plan's model: a chat the named model cannot serve is rendered for the fallback that serves it.
        renderer = await self.renderer_for(p.model)
        check_logit_bias(work, renderer, p.model)
        parts, safety, withheld = await self._parts_checked(work)
        kwargs, after = template_inputs(p, renderer.template.template)
        try:
            if parts.chars(renderer.file_chars) <= INLINE_RENDER_CHARS:
                # A short prompt renders in about a tenth of a millisecond: less than the hand-off to a
                # thread and back, which at one stream is on the path to the first byte.
                r = renderer.render(parts, p.max_tokens, p.prompt_budget, kwargs, after)
                file_verdicts = await self.file_checks.check(parts.files, safety)
            else:
                # Rendering and counting a long prompt is CPU work; keep the loop free for other requests meanwhile.
                r, file_verdicts = await asyncio.gather(
                    asyncio.to_thread(renderer.render, parts, p.max_tokens, p.prompt_budget, kwargs, after),
                    self.file_checks.check(parts.files, safety),
                )
        except PromptTooLong as e:
            raise BusError(ErrorCode.payload_too_large, str(e)) from e
        except TemplateError as e:  # the model's template refused these messages (roles out of order, ...)
            raise BusError(ErrorCode.bad_request, f"the chat template refused the messages: {e}") from e
        out = work.model_copy(
            update={
                "plan": p,
                "prompt_messages": r.messages,
                "prompt": r.prompt,
                "prompt_tokens": r.tokens,
                "history_turns": r.history_turns,
                "trimmed_turns": r.trimmed_turns,
                "safety": safety,
                "verdicts": [*work.verdicts, *(v for vs in file_verdicts.values() for v in vs)],
            }
        )
        span = trace.get_current_span()
        span.set_attribute("switchyard.prompt_tokens", r.tokens)
        span.set_attribute("switchyard.history_turns", r.history_turns)
        span.set_attribute("switchyard.trimmed_turns", r.trimmed_turns)
        decision = {
            "history_turns": r.history_turns,
            "trimmed_turns": r.trimmed_turns,
            "prompt_tokens": r.tokens,
            "budget": min(renderer.budget, p.prompt_budget),
            "plan": p.model_dump(mode="json"),
            "memory_items": len(parts.memory),
            "memory_withheld": withheld,
            "files": [info.id for info, _ in parts.files],
            "flagged_files": list(file_verdicts),
            "instructions": bool(parts.instructions),
            "safety_policy": safety.model_dump(mode="json"),
        }
        part = ContextPart(
            prompt=r.prompt,
            chat_id=work.chat_id,
            prompt_tokens=r.tokens,
            # Like the tools stage's `tool_verdicts`, each naming its file.
            file_verdicts=[FileVerdict(file_id=f, **v.model_dump()) for f, vs in file_verdicts.items() for v in vs],
        )
        if r.trimmed_turns:
            log.info("history trimmed", trimmed_turns=r.trimmed_turns, kept=r.history_turns)
        return Forward(subject=subjects.ROUTE, work=out, decision=decision, part=part)

    async def assemble_raw(self, work: Work) -> Forward:
        """A text completion: the client's text is the whole prompt, verbatim (no template, history, memory,
        files or instructions); the tenant's safety policy is still read, for the safety stages. Its token
        count is the model's own tokenizer's (the router checks it against the pool's context length)."""
        (_instructions, safety), renderer = await asyncio.gather(
            self.knowledge.tenant_settings(work.tenant), self.renderer_for(work.plan.model if work.plan else work.model)
        )
        check_logit_bias(work, renderer, work.plan.model if work.plan else work.model)
        tokens = await asyncio.to_thread(renderer.template.count, work.text)
        out = work.model_copy(
            update={
                "prompt_messages": [ChatMessage(role="user", content=work.text)],
                "prompt": work.text,
                "prompt_tokens": tokens,
                "safety": safety,
            }
        )
        trace.get_current_span().set_attribute("switchyard.prompt_tokens", tokens)
        decision = {"prompt_mode": "raw", "prompt_tokens": tokens, "safety_policy": safety.model_dump(mode="json")}
        part = ContextPart(prompt=work.text, chat_id=work.chat_id, prompt_tokens=tokens)
        return Forward(subject=subjects.ROUTE, work=out, decision=decision, part=part)

    async def open(self, q: ConversationQuery) -> ConversationReply:
        """The tenant's conversation (created when absent), without its turns."""
        conv = await self.conversations.open(q.tenant, q.chat_id, q.user)
        return ConversationReply(chat_id=conv.id, title=conv.title, created_ms=conv.created_ms)

    async def get(self, q: ConversationQuery) -> ConversationReply:
        got = await self.conversations.turns(q.tenant, q.chat_id)
        if got is None:
            raise not_found(q.chat_id)
        conv, turns = got
        return ConversationReply(chat_id=conv.id, title=conv.title, created_ms=conv.created_ms, turns=turns)

    async def save_turn(self, req: SaveTurn) -> SaveTurnAck:
        turn_id, new = await self.conversations.save_turn(req.tenant, req.user, req.chat_id, req.turn)
        # Only a turn that passed the safety checks and completed may teach the assistant a fact.
        fact = fact_to_remember(req.turn.user_text) if new and req.turn.status == "complete" else None
        if fact and not self.memory_rules.verdicts(fact, (await self.knowledge.tenant_settings(req.tenant))[1]):
            await self.knowledge.remember(req.tenant, req.user, fact, source_rid=req.turn.rid)
            log.info("fact remembered", chat_id=req.chat_id)
        return SaveTurnAck(turn_id=turn_id)


def load_tokenizer(path: str, cache_dir: str | None) -> ChatTemplate:
    from switchyard.libs.tokenizer import load_tokenizer as load

    return load(path, cache_dir)


def load_template(settings: ContextSettings) -> ChatTemplate:
    tok = settings.tokenizer
    return load_tokenizer(tok.resolved_model_path(settings.model_path), tok.tokenizer_cache)


async def setup(
    bus: Bus, settings: ContextSettings, template: ChatTemplate | None = None
) -> Callable[[], Awaitable[None]]:
    # A model added at run time is rendered with its own template from its first request on.
    live = await LiveModels.follow(bus, settings.registry)
    engine = make_engine(settings.db_url())
    conversations, knowledge = ConversationStore(engine), KnowledgeStore(engine)
    await conversations.init()
    await knowledge.init()
    if template is None:
        # Reading the GGUF metadata takes seconds; do not stall the loop (heartbeats, pings) meanwhile.
        template = await asyncio.to_thread(load_template, settings)
    models = ModelTemplates(
        template,
        settings.registry,
        lambda path: load_tokenizer(path, settings.tokenizer.tokenizer_cache),
        settings.context_budget,
        settings.prompt_file_chars,
        default_file=settings.tokenizer.resolved_model_path(settings.model_path),
    )
    ctx = Context(conversations, knowledge, models.default_renderer, settings.prompt_memory_items, models=models)

    async def assemble(work: Work) -> Forward:
        # safety_in and tools start their model passes on the user's text now, not when the request reaches them.
        if settings.early_passes:
            await bus.publish(subjects.EARLY, work, rid=work.rid, tenant=work.tenant)
        return await ctx.assemble(work)

    await bus.stage(subjects.CONTEXT, assemble)
    await bus.subscribe(subjects.CONVERSATION_OPEN, ConversationQuery, ctx.open, queue="context")
    await bus.subscribe(subjects.CONVERSATION_GET, ConversationQuery, ctx.get, queue="context")
    await bus.subscribe(subjects.SAVE_TURN, SaveTurn, ctx.save_turn, queue="context")
    await Manager(conversations, knowledge, settings.max_file_chars, ctx.memory_rules).subscribe(bus)
    if isinstance(template, TokenCodec):  # a tokenizer, not only a template: it can count and decode too
        tokens = Tokens(ctx, models.template, settings.context_budget, settings.tokenize_max_ids)
        await bus.subscribe(subjects.TOKENIZE, TokenizeQuery, tokens.tokenize, queue="context")
        await bus.subscribe(subjects.DETOKENIZE, DetokenizeQuery, tokens.detokenize, queue="context")

    async def cleanup() -> None:
        await live.close()
        knowledge.close()
        await engine.dispose()

    return cleanup
