"""Each served model's tokenizer and chat template, by the model a request names.

Context runs before the router, on the model the gateway resolved (`work.model`), so the prompt is
rendered and counted with that model's own template and vocabulary, read from what its registry `path`
is: a GGUF's metadata, or a Hugging Face directory's tokenizer.json, chat template and generation config
(switchyard/libs/tokenizer). The default model's is loaded at start; another model's on its first request
(reading a GGUF's metadata or a large tokenizer.json takes seconds, and a deployment may never be asked
for it), once, however many requests wait for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from switchyard.libs.models import ModelRegistry, ensure_model_path
from switchyard.services.context.prompt import ChatTemplate, PromptRenderer


class ModelTemplates:
    def __init__(
        self,
        default: ChatTemplate,
        registry: ModelRegistry,
        load: Callable[[str], ChatTemplate],
        budget: int,
        file_chars: int,
        default_file: str | None = None,
    ):
        self.default = default
        self.registry = registry
        self._load = load
        self._budget, self._file_chars = budget, file_chars
        self._default_file = default_file
        self.default_renderer = PromptRenderer(default, budget, file_chars)
        # Model path (file or directory) -> its renderer, being loaded or loaded; a failed load is dropped so a later request retries.
        self._renderers: dict[str, asyncio.Task[PromptRenderer]] = {}

    def _file_of(self, model: str | None) -> str | None:
        card = self.registry.find(model) if model else None
        if card is None or card.path is None or card.path == self._default_file:
            return None
        return card.path

    async def renderer(self, model: str | None) -> PromptRenderer:
        """The renderer for `model` (its name or alias; None or an unknown name: the default model's)."""
        path = self._file_of(model)
        if path is None:
            return self.default_renderer
        task = self._renderers.get(path)
        if task is None:
            card = self.registry.get(model)
            task = asyncio.create_task(asyncio.to_thread(self._load_renderer, card.name))
            self._renderers[path] = task
        try:
            return await asyncio.shield(task)
        except Exception:
            self._renderers.pop(path, None)
            raise

    async def template(self, model: str | None) -> ChatTemplate:
        return (await self.renderer(model)).template

    def _load_renderer(self, model: str) -> PromptRenderer:
        path = ensure_model_path(self.registry.get(model))
        assert path is not None  # _file_of returned a path for this model
        return PromptRenderer(self._load(path), self._budget, self._file_chars)
