"""Reading ``{"kind": ..., <fields>}`` configs, the one grammar of rules and samplers.

A config is a mapping with a ``"kind"`` and the fields of the dataclass that kind
names (or the kind's name alone, when every field has a default); rules add
``{"kind": "any", "of": [...]}``. The dataclass validates its own fields, naming
them ``Class.field``; read from a config, the same errors name the config path
instead (``early_stop.of[0].turns must be at least 1``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, fields
from typing import Any, TypeVar, cast

from budgetmix._validate import check_keys, check_list, check_mapping, pop_kind
from budgetmix.exceptions import ConfigError
from budgetmix.policy import AnyOf, Rule

__all__: list[str] = []

T = TypeVar("T")
F = TypeVar("F", bound=Rule[Any])


def _renamed(exc: ConfigError, owner: str, path: str) -> ConfigError:
    return ConfigError(str(exc).replace(owner, path))


def read_kind(config: Any, *, path: str, known: Iterable[str]) -> tuple[str, dict[str, Any]]:
    """The kind of ``config`` and a copy of its other fields.

    Raises:
        ConfigError: not a mapping or a kind name, or an unknown kind; names ``path``.
    """
    cfg = {"kind": config} if isinstance(config, str) else check_mapping(path, config)
    return pop_kind(path, cfg, known), cfg


def build(cls: type[T], kind: str, values: Mapping[str, Any], *, path: str) -> T:
    """``cls(**values)``, the keys checked against its fields and its errors named by path.

    Raises:
        ConfigError: an unknown or a missing field, or a value ``cls`` refuses.
    """
    init = [f for f in fields(cast(Any, cls)) if f.init]
    check_keys(path, values, (f.name for f in init))
    for f in init:
        if f.name not in values and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(f"{path}.{f.name} is required for kind {kind}")
    try:
        return cls(**values)
    except ConfigError as exc:
        raise _renamed(exc, f"{cls.__name__}.", f"{path}.") from None


def rule_from_config(
    config: Any,
    *,
    path: str,
    kinds: Sequence[type[F]],
    member: Callable[..., Rule[F] | None],
) -> Rule[F]:
    """The rule ``config`` describes: one of ``kinds`` (by their ``config_kind``), or
    ``{"kind": "any", "of": [...]}`` whose items ``member(item, path=...)`` builds.

    Raises:
        ConfigError: a bad config, an ``of`` that is not a non-empty list, or an ``off``
            member; the message names the path (``extension.of[1].turns``).
    """
    by_kind = {cls.config_kind: cls for cls in kinds}
    kind, cfg = read_kind(config, path=path, known=(*by_kind, "any"))
    if kind != "any":
        return build(by_kind[kind], kind, cfg, path=path)
    check_keys(path, cfg, ("of",))
    rules: list[Rule[F]] = []
    for i, item in enumerate(check_list(f"{path}.of", cfg.get("of"))):
        rule = member(item, path=f"{path}.of[{i}]")
        if rule is None:
            raise ConfigError(f"{path}.of[{i}] must not be off")
        rules.append(rule)
    try:
        return AnyOf(cast("tuple[F, ...]", tuple(rules)))
    except ConfigError as exc:
        raise _renamed(exc, "AnyOf.rules", f"{path}.of") from None
