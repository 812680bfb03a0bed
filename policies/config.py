"""The policy bundle: one config mapping that the CLI, the evaluator and training read.

Schema (every key optional; ``None`` means the default or "off")::

    {
      "notice":     {"kind": "every_turn" | "at_most" | "final_turn" | "off" | "any", ...},
      "exhaustion": "end" | "raise" | "grace",
      "extension":  {"kind": "on_demand" | "progress" | "any", ...} | None,
      "early_stop": {"kind": "repeated_mistakes" | "no_progress" | "any", ...} | None,
      "sampler":    {"kind": "fixed" | "budgetmix" | "percentile", ...} | None,
      "accounting": "default" | "per_tool_call_turns" | "count_retries"
                    | {"preset": ..., <AccountingPolicy fields>} | None,
    }

:func:`build_controller_kwargs` turns it into the keyword arguments of
:class:`budgetmix.BudgetController`; the sampler is not one of them (it draws
the ``Budget`` each episode runs under).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from budgetmix._validate import check_instance, check_keys, check_mapping
from budgetmix.accounting import DEFAULT_ACCOUNTING, AccountingPolicy
from budgetmix.exceptions import ConfigError
from budgetmix.policies.accounting import (
    ACCOUNTING_PRESETS,
    accounting_from_config,
    accounting_to_config,
)
from budgetmix.policies.early_stop import early_stop_from_config
from budgetmix.policies.exhaustion import DEFAULT_EXHAUSTION, exhaustion_from_config
from budgetmix.policies.extension import (
    extension_from_config,
    find_on_demand,
    with_free_request_tool,
)
from budgetmix.policies.notice import notice_from_config
from budgetmix.policies.samplers import BudgetSampler, sampler_from_config
from budgetmix.policy import (
    EarlyStopRule,
    ExhaustionMode,
    ExtensionRule,
    NoticeRule,
    NotifyEveryTurn,
    Rule,
)

__all__ = ["PolicyConfig", "build_controller_kwargs", "policy_from_config"]

_KEYS = ("notice", "exhaustion", "extension", "early_stop", "sampler", "accounting")


def _check_rule(field: str, value: Any, family: type[Rule[Any]], optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, Rule) or value.family() is not family:
        wanted = f"a {family.family_name}{' or None' if optional else ''}"
        raise ConfigError(f"PolicyConfig.{field} must be {wanted}, got {type(value).__name__}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyConfig:
    """Every policy of a run, validated; build it with :func:`policy_from_config`.

    Raises:
        ConfigError: a field of the wrong type or an invalid exhaustion mode.
    """

    notice: Rule[NoticeRule] = field(default_factory=NotifyEveryTurn)
    exhaustion: ExhaustionMode = DEFAULT_EXHAUSTION
    extension: Rule[ExtensionRule] | None = None
    early_stop: Rule[EarlyStopRule] | None = None
    sampler: BudgetSampler | None = None
    accounting: AccountingPolicy = DEFAULT_ACCOUNTING

    def __post_init__(self) -> None:
        _check_rule("notice", self.notice, NoticeRule, optional=False)
        exhaustion_from_config(self.exhaustion, path="PolicyConfig.exhaustion")
        _check_rule("extension", self.extension, ExtensionRule, optional=True)
        _check_rule("early_stop", self.early_stop, EarlyStopRule, optional=True)
        wanted = "a budget sampler or None"
        check_instance("PolicyConfig.sampler", self.sampler, BudgetSampler | None, wanted)
        wanted = "an AccountingPolicy"
        check_instance("PolicyConfig.accounting", self.accounting, AccountingPolicy, wanted)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> PolicyConfig:
        """Inverse of :meth:`to_config` (see the module docstring for the schema).

        Raises:
            ConfigError: unknown key, policy name or field, or a bad value; names the field.
        """
        cfg = {} if config is None else check_mapping("policies", config)
        check_keys("policies", cfg, _KEYS)
        sampler_cfg = cfg.get("sampler")
        sampler = None if sampler_cfg is None else sampler_from_config(sampler_cfg)
        return cls(
            notice=notice_from_config(cfg.get("notice")),
            exhaustion=exhaustion_from_config(cfg.get("exhaustion")),
            extension=extension_from_config(cfg.get("extension")),
            early_stop=early_stop_from_config(cfg.get("early_stop")),
            sampler=sampler,
            accounting=accounting_from_config(cfg.get("accounting")),
        )

    def to_config(self) -> dict[str, Any]:
        """Plain, JSON-ready mapping with all six keys; accounting presets by name."""
        preset = next(
            (name for name, p in ACCOUNTING_PRESETS.items() if p == self.accounting), None
        )
        return {
            "notice": self.notice.to_config(),
            "exhaustion": self.exhaustion,
            "extension": self.extension.to_config() if self.extension else None,
            "early_stop": self.early_stop.to_config() if self.early_stop else None,
            "sampler": self.sampler.to_config() if self.sampler else None,
            "accounting": preset or accounting_to_config(self.accounting),
        }

    def controller_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`budgetmix.BudgetController` (all but ``budget``).

        With an on-demand extension, ``request_more_turns`` is added to the
        accounting's refunded tools so asking for turns costs no tool call.
        """
        accounting = self.accounting
        if find_on_demand(self.extension) is not None:
            accounting = with_free_request_tool(accounting)
        return {
            "notice": self.notice,
            "exhaustion": self.exhaustion,
            "extension": self.extension,
            "early_stop": self.early_stop,
            "accounting": accounting,
        }


def policy_from_config(config: Mapping[str, Any] | None) -> PolicyConfig:
    """Same as :meth:`PolicyConfig.from_config`."""
    return PolicyConfig.from_config(config)


def build_controller_kwargs(config: Mapping[str, Any] | PolicyConfig | None) -> dict[str, Any]:
    """``BudgetController(budget, **build_controller_kwargs(config))``.

    Raises:
        ConfigError: as :func:`policy_from_config`.
    """
    bundle = config if isinstance(config, PolicyConfig) else policy_from_config(config)
    return bundle.controller_kwargs()
