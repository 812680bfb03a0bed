"""Policies: everything the budget controller decides, one module per family.

- :mod:`~budgetmix.policies.notice`: on which turns the model sees its budget;
- :mod:`~budgetmix.policies.exhaustion`: what happens at the limit;
- :mod:`~budgetmix.policies.extension`: granting more turns (on demand, on progress);
- :mod:`~budgetmix.policies.early_stop`: ending episodes that cannot finish;
- :mod:`~budgetmix.policies.accounting`: named accounting presets;
- :mod:`~budgetmix.policies.samplers`: which budget an episode runs under;
- :mod:`~budgetmix.policies.config`: the one config bundle the CLI, the evaluator
  and training read, and ``build_controller_kwargs``.

Rules are frozen objects with one method over the episode's read-only state,
named by what they do and when: ``Notify*`` (notice), ``Extend*`` (extension),
``Stop*`` (early stop). Rules of a family compose with ``|`` into :class:`AnyOf`.
Their bases, :class:`AnyOf` and the default :class:`NotifyEveryTurn` live in the
core (:mod:`budgetmix.policy`), which the controller falls back on; they are
exported here too, so one import gives every rule. See ``docs/policies.md``.
"""

from budgetmix.policies.accounting import (
    ACCOUNTING_PRESETS,
    COUNT_RETRIES,
    PER_TOOL_CALL_TURNS,
    accounting_from_config,
    accounting_preset,
    accounting_to_config,
    refund_tools,
)
from budgetmix.policies.config import PolicyConfig, build_controller_kwargs, policy_from_config
from budgetmix.policies.early_stop import (
    StopOnRepeatedMistakes,
    StopWithoutProgress,
    early_stop_from_config,
)
from budgetmix.policies.exhaustion import (
    DEFAULT_EXHAUSTION,
    EXHAUSTION_MODES,
    exhaustion_from_config,
)
from budgetmix.policies.extension import (
    ON_DEMAND_GRANTS_KEY,
    REQUEST_MORE_TURNS,
    ExtendOnDemand,
    ExtendOnProgress,
    extension_from_config,
    find_on_demand,
    request_more_turns_result,
    request_more_turns_tool,
    with_free_request_tool,
)
from budgetmix.policies.notice import (
    NotifyFinalTurn,
    NotifyNever,
    NotifyWhenAtMost,
    notice_from_config,
)
from budgetmix.policies.samplers import (
    BudgetDraw,
    BudgetMix,
    BudgetSampler,
    FixedBudget,
    PercentileCeiling,
    sampler_from_config,
)
from budgetmix.policy import (
    AnyOf,
    EarlyStopRule,
    ExtensionRule,
    NoticeRule,
    NotifyEveryTurn,
    Rule,
)

__all__ = [
    "ACCOUNTING_PRESETS",
    "COUNT_RETRIES",
    "DEFAULT_EXHAUSTION",
    "EXHAUSTION_MODES",
    "ON_DEMAND_GRANTS_KEY",
    "PER_TOOL_CALL_TURNS",
    "REQUEST_MORE_TURNS",
    "AnyOf",
    "BudgetDraw",
    "BudgetMix",
    "BudgetSampler",
    "EarlyStopRule",
    "ExtendOnDemand",
    "ExtendOnProgress",
    "ExtensionRule",
    "FixedBudget",
    "NoticeRule",
    "NotifyEveryTurn",
    "NotifyFinalTurn",
    "NotifyNever",
    "NotifyWhenAtMost",
    "PercentileCeiling",
    "PolicyConfig",
    "Rule",
    "StopOnRepeatedMistakes",
    "StopWithoutProgress",
    "accounting_from_config",
    "accounting_preset",
    "accounting_to_config",
    "build_controller_kwargs",
    "early_stop_from_config",
    "exhaustion_from_config",
    "extension_from_config",
    "find_on_demand",
    "notice_from_config",
    "policy_from_config",
    "refund_tools",
    "request_more_turns_result",
    "request_more_turns_tool",
    "sampler_from_config",
    "with_free_request_tool",
]
