"""The Redis store: ledgers shared by a fleet, one server-side script per charge.

Each ledger is a hash (``{prefix}l:{key}``: ``l.<dim>`` its limits, absent when
unlimited, ``u.<dim>`` its usage). A charge is one Lua script, which Redis runs without
interleaving any other command: it checks the rule of :func:`budgetmix.stores.refusal`
over the whole chain, applies the charge to every hash of it, and keeps the answer under
the idempotency key (a day), all in one step. The ``redis`` client is the ``redis``
extra, imported when a store is made. One Redis server (or a primary): with Redis
Cluster every key of a chain must hash to one slot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from budgetmix._deps import require
from budgetmix.budget import maximum_of
from budgetmix.exceptions import ConfigError
from budgetmix.stores.base import (
    IDEMPOTENCY_TTL,
    STORED_DIMENSIONS,
    LedgerRecord,
    StoreError,
    check_key,
)

__all__ = ["RedisStore"]

# KEYS: the chain's hashes, then the idempotency key. ARGV[1]: {mode, add, gate, idem, ttl};
# idem 1: remember an applied charge under it, 2: apply only if remembered, and forget it
_CHARGE = """
local spec = cjson.decode(ARGV[1])
local n = #KEYS - 1
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 0 then return {'!missing', KEYS[i]} end
end
if spec.idem == 1 and redis.call('EXISTS', KEYS[n + 1]) == 1 then
  return {'', redis.call('HGETALL', KEYS[1])}
end
if spec.idem == 2 and redis.call('DEL', KEYS[n + 1]) == 0 then
  return {'', redis.call('HGETALL', KEYS[1])}
end
local function num(key, field)
  return tonumber(redis.call('HGET', key, field) or '0')
end
local function refuses(key)
  for _, pair in ipairs(spec.add) do
    local cap = redis.call('HGET', key, 'l.' .. pair[1])
    if pair[2] > 0 and cap and num(key, 'u.' .. pair[1]) + pair[2] > tonumber(cap) then
      return pair[1]
    end
  end
  for _, dim in ipairs(spec.gate) do
    local cap = redis.call('HGET', key, 'l.' .. dim)
    if cap and num(key, 'u.' .. dim) >= tonumber(cap) then return dim end
  end
  return nil
end
local refused = ''
if spec.mode == 'charge' then
  for i = 1, n do
    local dim = refuses(KEYS[i])
    if dim then refused = dim; break end
  end
end
if refused == '' then
  for _, pair in ipairs(spec.add) do
    local amount = pair[2]
    if amount < 0 then
      local give = -amount
      for i = 1, n do give = math.min(give, num(KEYS[i], 'u.' .. pair[1])) end
      amount = -give
    end
    if amount ~= 0 then
      for i = 1, n do redis.call('HINCRBYFLOAT', KEYS[i], 'u.' .. pair[1], amount) end
    end
  end
end
if spec.idem == 1 and refused == '' then redis.call('SET', KEYS[n + 1], '1', 'EX', spec.ttl) end
return {refused, redis.call('HGETALL', KEYS[1])}
"""

# KEYS[1]: the hash. ARGV[1]: {limits: [[dim, limit]...], dims: [...]}
_OPEN = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  local spec = cjson.decode(ARGV[1])
  redis.call('HSET', KEYS[1], 'o', '1')
  for _, pair in ipairs(spec.limits) do redis.call('HSET', KEYS[1], 'l.' .. pair[1], pair[2]) end
  for _, dim in ipairs(spec.dims) do redis.call('HSET', KEYS[1], 'u.' .. dim, '0') end
end
return redis.call('HGETALL', KEYS[1])
"""

# KEYS[1]: the hash. ARGV[1]: [[dim, amount, maximum]...]
_GRANT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'!missing', KEYS[1]} end
local extra = cjson.decode(ARGV[1])
local new = {}
for i, item in ipairs(extra) do
  local cap = redis.call('HGET', KEYS[1], 'l.' .. item[1])
  if not cap then return {'!nolimit', item[1]} end
  new[i] = tonumber(cap) + item[2]
  if new[i] > item[3] then return {'!max', item[1]} end
end
for i, item in ipairs(extra) do redis.call('HSET', KEYS[1], 'l.' .. item[1], new[i]) end
return {'', redis.call('HGETALL', KEYS[1])}
"""


def _record(flat: Sequence[Any]) -> LedgerRecord:
    fields = {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
    limits: dict[str, float | None] = {}
    used: dict[str, float] = {}
    for dim in STORED_DIMENSIONS:
        cap = fields.get(f"l.{dim}")
        limits[dim] = float(cap) if cap is not None else None
        used[dim] = float(fields.get(f"u.{dim}", "0"))
    return LedgerRecord(limits, used)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisStore:
    """A :class:`~budgetmix.stores.LedgerStore` on one Redis server.

    Args:
        url: ``redis://host:port/db`` (``rediss://`` for TLS).
        prefix: put before every key, so several budgets can share one server.
        timeout: seconds a command may take before it counts as a failure.

    Raises:
        MissingExtraError: the ``redis`` client is not installed (``budgetmix[redis]``).
    """

    def __init__(self, url: str, *, prefix: str = "bm:", timeout: float = 5.0) -> None:
        redis = require("redis", "redis")
        self.url = url
        self.prefix = prefix
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self._charge = self._client.register_script(_CHARGE)
        self._open = self._client.register_script(_OPEN)
        self._grant = self._client.register_script(_GRANT)

    def _hash(self, key: str) -> str:
        return f"{self.prefix}l:{check_key(key, 'chain')}"

    def _call(self, script: Any, keys: list[str], arg: Any) -> Any:
        try:
            out = script(keys=keys, args=[json.dumps(arg)])
        except self._errors as exc:
            raise StoreError(f"redis store {self.url}: {exc}") from exc
        if isinstance(out, list) and out and _text(out[0]).startswith("!"):
            what, where = _text(out[0]), _text(out[1])
            if what == "!missing":
                raise StoreError(f"no ledger {where!r} in the store (open it first)")
            if what == "!nolimit":
                raise ConfigError(f"grant.{where}: {where} has no limit to extend")
            raise ConfigError(f"grant.{where} would raise the limit above {maximum_of(where)}")
        return out

    def _run(
        self, mode: str, chain: Sequence[str], add: Mapping[str, float], gate: Sequence[str],
        idem: str | None,
    ) -> tuple[str | None, LedgerRecord]:  # fmt: skip
        keys = [self._hash(k) for k in chain]
        keys.append(f"{self.prefix}i:{idem}" if idem is not None else f"{self.prefix}i:-")
        spec = {
            "mode": mode,
            "add": [[d, float(a)] for d, a in add.items()],
            "gate": list(gate),
            "idem": 0 if idem is None else (1 if mode == "charge" else 2),
            "ttl": IDEMPOTENCY_TTL,
        }
        refused, flat = self._call(self._charge, keys, spec)
        return (_text(refused) or None), _record(flat)

    def open(self, key: str, limits: Mapping[str, float | None]) -> LedgerRecord:
        """See :meth:`LedgerStore.open`."""
        spec = {
            "limits": [[d, limits[d]] for d in STORED_DIMENSIONS if limits.get(d) is not None],
            "dims": list(STORED_DIMENSIONS),
        }
        return _record(self._call(self._open, [self._hash(key)], spec))

    def read(self, key: str) -> LedgerRecord | None:
        """See :meth:`LedgerStore.read`."""
        try:
            flat = self._client.execute_command("HGETALL", self._hash(key))
        except self._errors as exc:
            raise StoreError(f"redis store {self.url}: {exc}") from exc
        if isinstance(flat, dict):  # a client that decodes replies into a dict
            flat = [x for kv in flat.items() for x in kv]
        return _record(flat) if flat else None

    def charge(
        self,
        chain: Sequence[str],
        add: Mapping[str, float],
        gate: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> tuple[str | None, LedgerRecord]:
        """See :meth:`LedgerStore.charge`."""
        return self._run("charge", chain, add, gate, idempotency_key)

    def add(
        self, chain: Sequence[str], amounts: Mapping[str, float], release: str | None = None
    ) -> LedgerRecord:
        """See :meth:`LedgerStore.add`."""
        return self._run("add", chain, amounts, (), release)[1]

    def grant(self, key: str, extra: Mapping[str, float]) -> LedgerRecord:
        """See :meth:`LedgerStore.grant`."""
        items = [[d, float(a), float(maximum_of(d))] for d, a in extra.items()]
        _, flat = self._call(self._grant, [self._hash(key)], items)
        return _record(flat)

    def link(self, name: str, value: str, ttl_seconds: float) -> None:
        """See :meth:`LedgerStore.link`."""
        try:
            self._client.set(f"{self.prefix}k:{check_key(name, 'name')}", value,
                             px=max(1, int(ttl_seconds * 1000)))  # fmt: skip
        except self._errors as exc:
            raise StoreError(f"redis store {self.url}: {exc}") from exc

    def lookup(self, name: str) -> str | None:
        """See :meth:`LedgerStore.lookup`."""
        try:
            value = self._client.get(f"{self.prefix}k:{name}")
        except self._errors as exc:
            raise StoreError(f"redis store {self.url}: {exc}") from exc
        return None if value is None else _text(value)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()
