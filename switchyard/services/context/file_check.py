"""Indirect injection in attached files, judged like tool output in the tools stage.

A file is data the user brought, not the user's intent: a hit flags (source `file` never blocks, see
`SafetyPolicy.untrusted_sources`), and the prompt fences every file as data either way
(`prompt.files_block`). Only the part of a file that goes into the prompt is checked.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Sequence

from switchyard.libs.safety import InputGuard
from switchyard.libs.safety.tenant import TenantGuards
from switchyard.schemas import FileInfo, SafetyVerdict, TenantSafety
from switchyard.services.context.prompt import file_excerpt


def check_files(
    guard: InputGuard, files: Sequence[tuple[FileInfo, str]], file_chars: int
) -> dict[str, list[SafetyVerdict]]:
    """Each file's verdicts that call for action, by file id (an empty list for a clean file)."""
    out: dict[str, list[SafetyVerdict]] = {}
    for info, text in files:
        out[info.id] = [
            SafetyVerdict(
                category=v.category,
                score=v.score,
                action=v.action,  # type: ignore[arg-type]
                classifier=v.classifier,
                version=v.version,
                detail=f"{info.name}: {v.detail}" if v.detail else info.name,
                source="file",
            )
            for v in guard.check(file_excerpt(text, file_chars), source="file")
        ]
    return out


class FileChecks:
    """`check_files` with the tenant's request thresholds, remembered per file.

    An attached file joins every prompt of its conversation, and its text never changes under its id,
    so each file is checked once per policy rather than on every turn. Rules only: no model to load,
    as for tool output.
    """

    def __init__(self, file_chars: int, size: int = 2048):
        self.file_chars = file_chars
        self.size = size
        self.guards = TenantGuards(InputGuard(use_embeddings=False))
        self._seen: OrderedDict[tuple[str, str], list[SafetyVerdict]] = OrderedDict()

    async def check(
        self, files: Sequence[tuple[FileInfo, str]], safety: TenantSafety
    ) -> dict[str, list[SafetyVerdict]]:
        """The verdicts of each file that got any, by file id, in the files' order."""
        # Only request thresholds judge files (answer thresholds are for the model's output).
        policy = json.dumps(safety.model_dump(mode="json")["thresholds"], sort_keys=True)
        known: dict[str, list[SafetyVerdict]] = {}
        todo = []
        for info, text in files:
            got = self._seen.get((info.id, policy))
            if got is None:
                todo.append((info, text))
            else:
                known[info.id] = got
                self._seen.move_to_end((info.id, policy))
        if todo:
            guard = self.guards.for_tenant(safety)
            checked = await asyncio.to_thread(check_files, guard, todo, self.file_chars)
            for file_id, verdicts in checked.items():
                self._seen[(file_id, policy)] = known[file_id] = verdicts
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        return {info.id: known[info.id] for info, _ in files if known[info.id]}
