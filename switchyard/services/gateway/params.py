"""No silent drops: a request parameter the gateway does not serve is refused by name.

The API request models keep unknown keys (`extra="allow"`) so that, after validation, every key is
either a declared field (served), listed in the model's `IGNORED` (accepted and documented as
ignored in docs/product.md), or a 400 naming it. A key whose value is null or empty asks for the
default, so it is taken: SDKs and echoed-back messages send `"audio": null` and the like."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from switchyard.schemas import ErrorCode
from switchyard.services.gateway.errors import ApiError


class Strict(BaseModel):
    """A request model whose unknown keys are checked by `refuse_unsupported`, not dropped."""

    model_config = ConfigDict(extra="allow")
    # Keys accepted and ignored on purpose (each one is in docs/product.md's table).
    IGNORED: ClassVar[frozenset[str]] = frozenset()


def _empty(value: Any) -> bool:
    # `0` and `false` are every OpenAI and Anthropic parameter's default ("logprobs": false, "frequency_penalty": 0).
    if value is None or value is False or value == [] or value == {}:
        return True
    return isinstance(value, int | float) and value == 0


def unsupported(model: BaseModel, path: str = "") -> list[str]:
    """Dotted paths of every key under `model` that is neither served nor knowingly ignored."""
    found: list[str] = []
    ignored = model.IGNORED if isinstance(model, Strict) else frozenset()
    for key, value in (model.model_extra or {}).items():
        if key not in ignored and not _empty(value):
            found.append(f"{path}{key}")
    for name in type(model).model_fields:
        found.extend(_walk(getattr(model, name), f"{path}{name}"))
    return found


def _walk(value: Any, path: str) -> list[str]:
    if isinstance(value, BaseModel):
        return unsupported(value, path + ".")
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _walk(v, f"{path}[{i}]")]
    return []


def refuse_unsupported(model: BaseModel) -> None:
    """400 in the API's own error shape, naming the parameters; the API's route adds the Anthropic envelope."""
    found = unsupported(model)
    if found:
        names = ", ".join(repr(p) for p in found[:5])
        noun = "parameter" if len(found) == 1 else "parameters"
        raise ApiError(
            ErrorCode.bad_request,
            f"unsupported {noun}: {names} (docs/product.md lists every parameter and what is served)",
        )
