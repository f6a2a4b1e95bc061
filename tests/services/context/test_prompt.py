from __future__ import annotations

import itertools

import pytest

from switchyard.libs.tokenizer import Tokenizer
from switchyard.schemas import ChatMessage, FileInfo, MemoryItem
from switchyard.services.context.facts import fact_to_remember
from switchyard.services.context.prompt import (
    PromptParts,
    PromptRenderer,
    PromptTooLong,
    aligned_cut,
    group_client_messages,
)


def _history(n: int, words: int = 30) -> list[list[ChatMessage]]:
    return [
        [
            ChatMessage(role="user", content=f"question {i} " + "word " * words),
            ChatMessage(role="assistant", content=f"answer {i} " + "text " * words),
        ]
        for i in range(n)
    ]


def test_system_block_order_is_fixed_and_rendering_is_deterministic(tokenizer: Tokenizer) -> None:
    parts = PromptParts(
        user_text="hello",
        history=_history(1, 2),
        instructions="TENANT RULES",
        client_system="CLIENT SYSTEM",
        memory=[MemoryItem(id="m1", text="FACT ONE"), MemoryItem(id="m2", text="FACT TWO")],
        files=[(FileInfo(id="f1", name="notes.txt"), "FILE BODY")],
        tools=[{"name": "orders_lookup", "parameters": {"b": 1, "a": 2}}],
    )
    r = PromptRenderer(tokenizer, budget=2048)
    one, two = r.render(parts, 64), r.render(parts, 64)
    assert one.prompt == two.prompt and one.tokens == two.tokens == tokenizer.count(one.prompt)
    system = one.messages[0].content
    order = ["orders_lookup", "TENANT RULES", "CLIENT SYSTEM", "FACT ONE", "FACT TWO", "FILE BODY"]
    assert [system.index(s) for s in order] == sorted(system.index(s) for s in order)
    assert [m.role for m in one.messages] == ["system", "user", "assistant", "user"]
    # The model's own template (ChatML for SmolLM2), ending in the generation prompt.
    assert one.prompt.startswith("<|im_start|>system\n") and one.prompt.endswith("<|im_start|>assistant\n")
    assert one.history_turns == 1 and one.trimmed_turns == 0


def test_next_turn_prompt_extends_the_previous_prompt_and_answer(tokenizer: Tokenizer) -> None:
    """Prefix-cache property asserted exactly: for every turn N without a trim,
    prompt(N+1).startswith(prompt(N) + answer(N)), i.e. the previous prompt (which ends with the
    generation prompt `<|im_start|>assistant\\n`) followed by the answer text the model produced."""
    r = PromptRenderer(tokenizer, budget=8192)
    history: list[list[ChatMessage]] = []
    prev: tuple[str, str] | None = None
    for n in range(6):
        parts = PromptParts(user_text=f"message {n}", history=list(history), instructions="Be brief.")
        out = r.render(parts, 128)
        assert out.trimmed_turns == 0 and out.history_turns == n
        if prev is not None:
            assert out.prompt.startswith(prev[0] + prev[1])
        answer = f"reply number {n}, with some text"
        history.append(
            [ChatMessage(role="user", content=f"message {n}"), ChatMessage(role="assistant", content=answer)]
        )
        prev = (out.prompt, answer)


def test_trim_drops_oldest_turns_in_large_stable_steps(tokenizer: Tokenizer) -> None:
    r = PromptRenderer(tokenizer, budget=1024)
    cuts: list[int] = []
    for n in range(1, 40):
        out = r.render(PromptParts(user_text="new question", history=_history(n)), 256)
        assert out.tokens + 256 <= 1024
        assert out.history_turns + out.trimmed_turns == n
        if out.trimmed_turns:
            # Nothing older than the cut survives, the newest turns all do.
            assert "question 0 " not in out.prompt and f"answer {n - 1} " in out.prompt
        cuts.append(out.trimmed_turns)
    assert max(cuts) > 0
    # The cut never moves back, and moves rarely: consecutive turns share it (and their prefix).
    assert cuts == sorted(cuts)
    assert len(set(cuts)) <= len(cuts) // 3
    # Each move drops several turns at once, never a single message.
    moves = [b - a for a, b in itertools.pairwise(cuts) if b != a]
    assert min(moves) >= 2


def test_aligned_cut_prefers_coarse_positions() -> None:
    # fits(cut) when at most `keep` turns remain.
    def fits_keep(n: int, keep: int):  # type: ignore[no-untyped-def]
        return lambda cut: n - cut <= keep

    assert aligned_cut(0, fits_keep(0, 0)) == 0
    assert aligned_cut(10, fits_keep(10, 10)) == 0
    assert aligned_cut(10, fits_keep(10, 9)) == 4  # step 4 (half of 10, as a power of two)
    assert aligned_cut(10, fits_keep(10, 3)) == 8
    assert aligned_cut(10, fits_keep(10, 1)) == 9  # refined only when no coarse cut fits
    assert aligned_cut(10, fits_keep(10, 0)) == 10
    assert aligned_cut(11, fits_keep(11, 9)) == 4  # the next turn picks the same cut


def test_too_long_message_raises(tokenizer: Tokenizer) -> None:
    r = PromptRenderer(tokenizer, budget=300)
    with pytest.raises(PromptTooLong):
        r.render(PromptParts(user_text="word " * 400, history=_history(3)), 64)


def test_client_messages_group_into_turns() -> None:
    system, groups = group_client_messages(
        [
            ChatMessage(role="system", content="S"),
            ChatMessage(role="assistant", content="greeting"),
            ChatMessage(role="user", content="u1"),
            ChatMessage(role="assistant", content="a1"),
            ChatMessage(role="user", content="u2"),
            ChatMessage(role="tool", content="t"),
            ChatMessage(role="assistant", content="a2"),
        ]
    )
    assert system == "S"
    assert [[m.content for m in g] for g in groups] == [["greeting"], ["u1", "a1"], ["u2", "t", "a2"]]


def test_fact_to_remember() -> None:
    assert fact_to_remember("Please remember that my dog is called Rex. What now?") == "my dog is called Rex"
    assert fact_to_remember("REMEMBER THAT I prefer metric units!") == "I prefer metric units"
    assert fact_to_remember("do you remember when we met?") is None
    assert fact_to_remember("remember that") is None


def test_a_stored_tool_turn_renders_back_byte_identical(tokenizer: Tokenizer) -> None:
    """A turn that ran tools is answered from a prompt with its tool-results block just before
    the user's message (the tools stage puts it there). Rendered as history in the next turn, the
    stored turn gives that block back in the same place: the model still sees what the tools
    returned, and the next prompt extends the previous one exactly (its KV blocks are reused)."""
    from switchyard.schemas import ToolEvent, Turn
    from switchyard.services.context.prompt import turns_to_history
    from switchyard.services.tools.service import with_tool_results

    r = PromptRenderer(tokenizer, budget=8192)
    first = r.render(PromptParts(user_text="where is order 42?", history=[], instructions="Be brief."), 128)
    block = '<tool_results>\n<tool_result id="c1" name="orders_lookup" status="ok">\nshipped\n</tool_results>'
    msgs = with_tool_results(first.messages, block)
    prompt1 = tokenizer.apply_chat_template([m.model_dump() for m in msgs], add_generation_prompt=True)
    answer = "Order 42 has shipped."
    turn = Turn(
        id="t1",
        rid="r1",
        user_text="where is order 42?",
        answer=answer,
        status="complete",
        tools=[ToolEvent(id="c1", name="orders_lookup", arguments={"order": 42}, status="ok", output="shipped")],
        tool_prompt=block,
        thinking="The user wants an order status.",
    )
    history = turns_to_history([turn])
    assert [m.role for m in history[0]] == ["system", "user", "assistant"]
    second = r.render(PromptParts(user_text="thanks", history=history, instructions="Be brief."), 128)
    assert second.prompt.startswith(prompt1 + answer)
    assert "The user wants" not in second.prompt  # thinking is shown to the user, never re-prompted
    # A turn without tools renders as before: user and assistant only.
    plain = turns_to_history([turn.model_copy(update={"tools": [], "tool_prompt": ""})])
    assert [m.role for m in plain[0]] == ["user", "assistant"]


def test_prompts_follow_the_models_template_and_stay_prefix_stable() -> None:
    """Gemma 3 base (no template in its file: the "gemma" fallback) through the same renderer: its own
    turn format, tools in its system text, and turn N+1 still extends turn N plus its answer, tool
    turns included."""
    from switchyard.libs.tokenizer import load_tokenizer
    from switchyard.schemas import ToolEvent, Turn
    from switchyard.services.context.prompt import turns_to_history
    from switchyard.services.tools.service import with_tool_results
    from tests.tokenizer.models import gemma3_path

    try:
        gemma = load_tokenizer(gemma3_path())
    except FileNotFoundError as e:
        pytest.skip(str(e))
    r = PromptRenderer(gemma, budget=8192)
    tools = [{"name": "orders_lookup", "parameters": {"a": 1}}]
    first = r.render(PromptParts(user_text="where is order 42?", instructions="Be brief.", tools=tools), 128)
    assert first.prompt.startswith("<start_of_turn>user\n# Tools\n")
    assert first.prompt.endswith("Be brief.\n\nwhere is order 42?<end_of_turn>\n<start_of_turn>model\n")
    # The tools stage re-renders with its results block and gets the same template's text.
    block = "<tool_results>\nshipped\n</tool_results>"
    prompt1 = gemma.apply_chat_template([m.model_dump() for m in with_tool_results(first.messages, block)])
    assert prompt1.endswith("Be brief.\n\n" + block + "\n\nwhere is order 42?<end_of_turn>\n<start_of_turn>model\n")
    answer = "It has shipped."
    turn = Turn(
        id="t1",
        rid="r1",
        user_text="where is order 42?",
        answer=answer,
        status="complete",
        tools=[ToolEvent(id="c1", name="orders_lookup", arguments={"order": 42}, status="ok", output="shipped")],
        tool_prompt=block,
    )
    history = turns_to_history([turn])
    second = r.render(PromptParts(user_text="thanks", history=history, instructions="Be brief.", tools=tools), 128)
    assert second.prompt.startswith(prompt1 + answer)
    third = r.render(
        PromptParts(
            user_text="bye",
            history=[
                *history,
                [ChatMessage(role="user", content="thanks"), ChatMessage(role="assistant", content="ok")],
            ],
            instructions="Be brief.",
            tools=tools,
        ),
        128,
    )
    assert third.prompt.startswith(second.prompt + "ok")


def test_a_prefill_is_continued_and_the_tools_stage_renders_it_alike(tokenizer: Tokenizer) -> None:
    """The answer's start (Anthropic's prefill, vLLM's continue_final_message) ends the prompt, inside the
    assistant's message: no end of turn after it, no new assistant header; the tools stage, putting its
    results before the user's message, renders the same way."""
    from switchyard.libs.tokenizer import render_continuing
    from switchyard.services.tools.service import with_tool_results

    r = PromptRenderer(tokenizer, budget=8192)
    plain = r.render(PromptParts(user_text="Name a colour."), 64)
    prefilled = r.render(PromptParts(user_text="Name a colour.", prefill="The colour is"), 64)
    assert [m.role for m in prefilled.messages][-2:] == ["user", "assistant"]
    assert prefilled.prompt == plain.prompt + "The colour is"  # ChatML: the header, then the start, left open
    assert prefilled.tokens > plain.tokens
    block = "<tool_results>\nred\n</tool_results>"
    msgs = with_tool_results(prefilled.messages, block, prefill=True)
    assert [m.role for m in msgs][-3:] == ["system", "user", "assistant"]
    again = render_continuing(tokenizer.template, [m.model_dump() for m in msgs])
    assert again.endswith("Name a colour.<|im_end|>\n<|im_start|>assistant\nThe colour is")
    # add_generation_prompt false: the prompt ends after the user's turn, with no assistant header.
    bare = r.render(PromptParts(user_text="Name a colour.", add_generation_prompt=False), 64)
    assert plain.prompt == bare.prompt + "<|im_start|>assistant\n"
