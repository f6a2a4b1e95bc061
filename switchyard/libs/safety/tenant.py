"""A tenant's stored choices (`schemas.TenantSafety`, carried on every request as `Work.safety`)
turned into the `SafetyPolicy` the guards apply."""

from __future__ import annotations

import json
from collections import OrderedDict

from switchyard.libs.safety.guard import InputGuard
from switchyard.libs.safety.policy import SafetyPolicy, Threshold
from switchyard.schemas import TenantSafety


def tenant_policy(safety: TenantSafety, base: SafetyPolicy | None = None) -> SafetyPolicy:
    """`base` (the shipped defaults when None) with the tenant's threshold overrides applied.

    An override replaces only the fields it names: `{"S6": {"block_at": null}}` keeps S6's flag
    threshold and never blocks on S6.
    """
    base = base or SafetyPolicy()
    if not safety.thresholds and not safety.answer_thresholds:
        return base
    thresholds = dict(base.thresholds)
    rules = dict(base.rule_thresholds)
    for category, override in safety.thresholds.items():
        given = override.model_dump()  # only the fields the tenant gave (see ThresholdOverride)
        thresholds[category] = Threshold.model_validate({**base.threshold(category).model_dump(), **given})
        # A tenant's request bar is its word on the category, for rule hits too (e.g. secrets never block).
        rules[category] = Threshold.model_validate({**base.threshold(category, learned=False).model_dump(), **given})
    answers = dict(base.answer_thresholds)
    for category, override in safety.answer_thresholds.items():
        was = base.threshold(category, "model").model_dump()
        answers[category] = Threshold.model_validate({**was, **override.model_dump()})
    # A tenant's own request bar for a category is final: work is no longer judged softer there.
    technical = base.technical_flag_only - set(safety.thresholds)
    return base.model_copy(
        update={
            "thresholds": thresholds,
            "answer_thresholds": answers,
            "rule_thresholds": rules,
            "technical_flag_only": technical,
        }
    )


class TenantGuards:
    """An `InputGuard` per distinct tenant policy, all sharing the base guard's classifier.

    Tenants without threshold overrides (most of them) get the base guard itself; the others get a
    guard built once per policy and kept while it is among the `size` most recently used.
    """

    def __init__(self, base: InputGuard, size: int = 256):
        self.base = base
        self.size = size
        self._guards: OrderedDict[str, InputGuard] = OrderedDict()

    def for_tenant(self, safety: TenantSafety) -> InputGuard:
        if not safety.thresholds and not safety.answer_thresholds:
            return self.base
        dumped = safety.model_dump(mode="json")
        key = json.dumps([dumped["thresholds"], dumped["answer_thresholds"]], sort_keys=True)
        guard = self._guards.get(key)
        if guard is None:
            base = self.base
            guard = InputGuard(
                tenant_policy(safety, base.policy),
                use_embeddings=base.use_embeddings,
                classifier=base.classifier if base.use_embeddings else None,
                screen=base.screen,
            )
            self._guards[key] = guard
            while len(self._guards) > self.size:
                self._guards.popitem(last=False)
        else:
            self._guards.move_to_end(key)
        return guard
