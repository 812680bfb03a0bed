"""Model prices, so a ``cost_usd`` limit works for well-known models.

Prices are USD per million tokens, as the providers listed them when this
table was written; they change, so pass your own (``Pricing({...})`` merges
over the defaults) when the figure matters. Input served from a provider's
prompt cache, and input written to it (Anthropic), are priced apart when the
response reports them. A model is matched exactly, then
without a date or ``-latest`` suffix (``gpt-4o-2024-08-06`` -> ``gpt-4o``),
then by the longest known prefix that ends at a ``-`` boundary
(``claude-opus-4-1`` -> ``claude-opus-4``). An unknown model is never priced
at zero silently: :meth:`Pricing.require` raises :class:`ConfigError`, and the
adapters call it before sending when the episode has a cost limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from budgetmix._validate import check_number
from budgetmix.exceptions import ConfigError

__all__ = ["DEFAULT_PRICING", "ModelPrice", "Pricing"]

_DATE_SUFFIX = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per million tokens: input, output, and input served from (``cache_read``) or
    written to (``cache_write``) the provider's prompt cache. A cache price left ``None``
    is charged at the input price.

    Raises:
        ConfigError: a price is negative, NaN or infinite.
    """

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if value is None and name.startswith("cache_"):
                continue
            check_number(f"ModelPrice.{name}", value)

    def cost(
        self, input_tokens: int, output_tokens: int, *, cache_read: int = 0, cache_write: int = 0
    ) -> float:
        """USD for this many tokens; ``cache_read`` and ``cache_write`` are the parts of
        ``input_tokens`` the cache served or stored."""
        fresh = input_tokens - cache_read - cache_write
        usd = fresh * self.input_per_mtok if fresh > 0 else 0.0
        # cache terms only when there are cache tokens (most calls have none)
        if cache_read:
            price = self.cache_read_per_mtok
            usd += cache_read * (self.input_per_mtok if price is None else price)
        if cache_write:
            price = self.cache_write_per_mtok
            usd += cache_write * (self.input_per_mtok if price is None else price)
        return (usd + output_tokens * self.output_per_mtok) / 1e6


PriceLike = ModelPrice | tuple[float, ...]

# OpenAI: (input, output, cached input); caching is automatic and writes cost nothing extra
_OPENAI: dict[str, tuple[float, float, float]] = {
    "gpt-4o": (2.50, 10.00, 1.25),
    "gpt-4o-mini": (0.15, 0.60, 0.075),
    "gpt-4.1": (2.00, 8.00, 0.50),
    "gpt-4.1-mini": (0.40, 1.60, 0.10),
    "gpt-4.1-nano": (0.10, 0.40, 0.025),
    "gpt-5": (1.25, 10.00, 0.125),
    "gpt-5-mini": (0.25, 2.00, 0.025),
    "gpt-5-nano": (0.05, 0.40, 0.005),
    "gpt-5.1": (1.25, 10.00, 0.125),
    "gpt-5.2": (1.75, 14.00, 0.175),
    "o3": (2.00, 8.00, 0.50),
    "o4-mini": (1.10, 4.40, 0.275),
}
# Anthropic: (input, output); cache reads cost 0.1x input, 5-minute cache writes 1.25x
_ANTHROPIC: dict[str, tuple[float, float]] = {
    "claude-opus-4": (15.00, 75.00),
    "claude-opus-4-5": (5.00, 25.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-opus-4-6": (5.00, 25.00),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-sonnet-4-6": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-5-haiku": (0.80, 4.00),
}
_DEFAULTS: dict[str, ModelPrice] = {
    **{m: ModelPrice(i, o, cache_read_per_mtok=c) for m, (i, o, c) in _OPENAI.items()},
    **{
        m: ModelPrice(i, o, cache_read_per_mtok=i * 0.1, cache_write_per_mtok=i * 1.25)
        for m, (i, o) in _ANTHROPIC.items()
    },
}


def _as_price(model: str, value: PriceLike) -> ModelPrice:
    if isinstance(value, ModelPrice):
        return value
    if isinstance(value, tuple) and 2 <= len(value) <= 4:
        return ModelPrice(*(float(v) for v in value))
    raise ConfigError(
        f"Pricing[{model!r}] must be a ModelPrice or an (input, output[, cache_read"
        f"[, cache_write]]) tuple of USD per million tokens, got {value!r}"
    )


class Pricing:
    """A lookup table of :class:`ModelPrice` by model name.

    Args:
        prices: ``{model: ModelPrice | (input_per_mtok, output_per_mtok)}``.
        defaults: start from the built-in table (``prices`` override it).

    Raises:
        ConfigError: a price is invalid or a model name is empty.
    """

    __slots__ = ("_found", "_prices")

    def __init__(
        self, prices: Mapping[str, PriceLike] | None = None, *, defaults: bool = True
    ) -> None:
        table: dict[str, ModelPrice] = {}
        if defaults:
            table.update(_DEFAULTS)
        for model, value in (prices or {}).items():
            if not isinstance(model, str) or not model:
                raise ConfigError(f"Pricing: model names must be non-empty strings, got {model!r}")
            table[model] = _as_price(model, value)
        self._prices = table
        self._found: dict[str, ModelPrice | None] = {}  # lookups, read every turn

    def merge(self, prices: Mapping[str, PriceLike] | Pricing) -> Pricing:
        """A new table with ``prices`` added over this one."""
        extra = prices._prices if isinstance(prices, Pricing) else prices
        merged = Pricing(defaults=False)
        merged._prices = {**self._prices, **{k: _as_price(k, v) for k, v in extra.items()}}
        return merged

    def models(self) -> list[str]:
        """Known model names, sorted."""
        return sorted(self._prices)

    def lookup(self, model: str | None) -> ModelPrice | None:
        """The price of ``model`` (exact, then without date suffix, then longest prefix)."""
        if not model:
            return None
        try:
            return self._found[model]
        except KeyError:
            pass
        found = self._resolve(model)
        if len(self._found) >= 1024:  # bounded: model names come from responses
            self._found.clear()
        self._found[model] = found
        return found

    def _resolve(self, model: str) -> ModelPrice | None:
        found = self._prices.get(model)
        if found is not None:
            return found
        base = _DATE_SUFFIX.sub("", model)
        found = self._prices.get(base)
        if found is not None:
            return found
        best: str | None = None
        for key in self._prices:
            if base.startswith(key + "-") and (best is None or len(key) > len(best)):
                best = key
        return self._prices[best] if best is not None else None

    def require(self, model: str | None) -> ModelPrice:
        """Like :meth:`lookup`, but an unknown model is an error.

        Raises:
            ConfigError: no price is known for ``model``.
        """
        found = self.lookup(model)
        if found is None:
            raise ConfigError(
                f"model: no price known for {model!r}, so a cost_usd limit cannot be enforced; "
                f"pass pricing=Pricing({{{model!r}: (input_usd_per_mtok, output_usd_per_mtok)}})"
            )
        return found

    def cost(
        self,
        model: str | None,
        input_tokens: int,
        output_tokens: int,
        *,
        cache_read: int = 0,
        cache_write: int = 0,
    ) -> float | None:
        """USD for a call, or ``None`` when the model is unknown (see :meth:`ModelPrice.cost`)."""
        found = self.lookup(model)
        if found is None:
            return None
        return found.cost(
            input_tokens, output_tokens, cache_read=cache_read, cache_write=cache_write
        )

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.lookup(model) is not None

    def __repr__(self) -> str:
        return f"Pricing({len(self._prices)} models)"


#: The built-in table.
DEFAULT_PRICING = Pricing()
