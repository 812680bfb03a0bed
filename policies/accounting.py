"""Accounting presets: named :class:`budgetmix.AccountingPolicy` values users ask for.

The policy object itself (what counts as a turn or a tool call) lives in the
core; this module names the common alternatives and reads them from configs:

- ``default``: one turn per model response, retries free, failed tool calls count;
- ``per_tool_call_turns``: each tool call of a parallel batch beyond the first
  costs one more turn (frameworks that count steps, not responses);
- ``count_retries``: every retry of a transient provider error costs a turn;
- ``refund_tools(*names)``: calls of the named tools cost no tool call
  (framework plumbing such as ``request_more_turns``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from budgetmix._validate import check_keys, check_mapping, check_names
from budgetmix.accounting import DEFAULT_ACCOUNTING, AccountingPolicy
from budgetmix.exceptions import ConfigError
from budgetmix.policies._from_config import build

__all__ = [
    "ACCOUNTING_PRESETS",
    "COUNT_RETRIES",
    "PER_TOOL_CALL_TURNS",
    "accounting_from_config",
    "accounting_preset",
    "accounting_to_config",
    "refund_tools",
]

PER_TOOL_CALL_TURNS = AccountingPolicy(name="per_tool_call_turns", turn_unit="tool_call")
COUNT_RETRIES = AccountingPolicy(name="count_retries", count_retries=True)

#: Preset name -> policy (read-only).
ACCOUNTING_PRESETS: Mapping[str, AccountingPolicy] = MappingProxyType(
    {
        "default": DEFAULT_ACCOUNTING,
        "per_tool_call_turns": PER_TOOL_CALL_TURNS,
        "count_retries": COUNT_RETRIES,
    }
)

_FIELDS = tuple(f.name for f in dataclasses.fields(AccountingPolicy))


def accounting_preset(name: str, *, path: str = "accounting") -> AccountingPolicy:
    """The preset called ``name``.

    Raises:
        ConfigError: no such preset.
    """
    try:
        return ACCOUNTING_PRESETS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown {path} preset {name!r}; known: {', '.join(ACCOUNTING_PRESETS)}"
        ) from None


def refund_tools(*names: str, base: AccountingPolicy = DEFAULT_ACCOUNTING) -> AccountingPolicy:
    """``base`` with calls of ``names`` free of tool-call charges.

    The result is named ``refund_tools`` when ``base`` is the default, otherwise
    ``"<base name>+refund_tools"``, so traces show the rules changed.

    Raises:
        ConfigError: no names, or a name that is not a non-empty string.
    """
    if not names:
        raise ConfigError("refund_tools needs at least one tool name")
    tools = check_names("refund_tools.names", names)
    if tools <= base.refunded_tools:
        return base
    name = "refund_tools" if base.name == "default" else f"{base.name}+refund_tools"
    return dataclasses.replace(base, name=name, refunded_tools=base.refunded_tools | tools)


def accounting_to_config(policy: AccountingPolicy) -> dict[str, Any]:
    """Every field of ``policy``; :func:`accounting_from_config` inverts it."""
    return policy.to_dict()


def accounting_from_config(
    config: Mapping[str, Any] | str | None, *, path: str = "accounting"
) -> AccountingPolicy:
    """Build an accounting policy from a config.

    Accepts ``None`` (the default), a preset name, ``{"preset": name, **overrides}``,
    or the full field mapping of :func:`accounting_to_config`. Overrides are
    :class:`budgetmix.AccountingPolicy` fields (``refunded_tools`` is a list); with
    overrides and no ``name`` the policy is named ``custom``.

    Raises:
        ConfigError: unknown preset or field, or a value of the wrong type; names the field.
    """
    if config is None:
        return DEFAULT_ACCOUNTING
    if isinstance(config, str):
        return accounting_preset(config, path=path)
    cfg = check_mapping(path, config)
    check_keys(path, cfg, ("preset", *_FIELDS))
    base = accounting_preset(cfg.pop("preset", "default"), path=path)
    if not cfg:
        return base
    # a changed rule set must not keep a preset's label on traces
    cfg.setdefault("name", "custom")
    return build(AccountingPolicy, "accounting", {**base.to_dict(), **cfg}, path=path)
