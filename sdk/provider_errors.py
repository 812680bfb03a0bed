"""What a provider call's exception means: the one error-mapping boundary.

Any provider SDK or HTTP client may raise; budgetmix never imports them to find
out what happened. Two questions are answered here, and only here:

* :func:`classify_exception` - is it worth retrying (and after how long)?
* :func:`map_provider_error` - which budgetmix error does a final failure become?
  :class:`~budgetmix.ProviderError` (a :class:`~budgetmix.ResponseFormatError`
  when the provider answered with a body that could not be read), or
  :class:`~budgetmix.ConfigError` when the request could not be encoded, so
  nothing was sent.

The retry drivers (:mod:`budgetmix.retry`) ask the first;
:meth:`Turn.failed <budgetmix.Turn.failed>` asks the second, for every wrapper and
transport, and raises the result ``from`` the provider's exception.
"""

from __future__ import annotations

import email.utils
import math
import time
from dataclasses import dataclass
from typing import Any

from budgetmix.exceptions import BudgetmixError, ConfigError, ProviderError, ResponseFormatError

__all__ = ["TransientInfo", "classify_exception", "map_provider_error", "nothing_sent"]

_TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_TRANSIENT_NAMES = (
    "Timeout",
    "ConnectError",
    "ConnectionError",
    "APIConnectionError",
    "APITimeoutError",
    "RemoteProtocolError",
    "ReadError",
    "WriteError",
)


@dataclass(frozen=True, slots=True)
class TransientInfo:
    """Whether an exception is worth retrying, and the server's Retry-After if given."""

    transient: bool
    status_code: int | None = None
    retry_after: float | None = None


def _header(headers: Any, name: str) -> Any:
    # httpx.Headers is case-insensitive; a plain dict (test doubles, other clients) is not
    value = headers.get(name)
    if value is None and isinstance(headers, dict):
        value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    return value


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    try:
        ms = _header(headers, "retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000.0)
        raw = _header(headers, "retry-after")
    except (AttributeError, TypeError, ValueError):
        return None
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        # an HTTP date; a malformed one must not turn a retryable error into a crash
        try:
            parsed = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        return max(0.0, parsed.timestamp() - time.time())
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _status_code(exc: BaseException) -> tuple[int | None, Any]:
    """The HTTP status an exception carries (on itself or its ``response``), and the
    response's headers."""
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None)
    if status is None and response is not None:
        status = getattr(response, "status_code", None)
    headers = getattr(response, "headers", None) if response is not None else None
    return (status if isinstance(status, int) else None), headers


def classify_exception(exc: BaseException) -> TransientInfo:
    """Classify an exception from any provider SDK or httpx without importing them.

    Transient: HTTP 408/409/425/429/5xx/529, timeouts, connection errors/resets.
    """
    status, headers = _status_code(exc)
    if status is not None:
        transient = status in _TRANSIENT_STATUS or status >= 500
        return TransientInfo(transient, status, _retry_after(headers) if transient else None)
    if isinstance(exc, TimeoutError | ConnectionError):
        return TransientInfo(True)
    name = type(exc).__name__
    return TransientInfo(any(n in name for n in _TRANSIENT_NAMES))


def nothing_sent(error: BudgetmixError) -> bool:
    """Whether a mapped failure happened before the request left (a :class:`ConfigError`:
    no provider was asked, so no provider mistake and no charge)."""
    return isinstance(error, ConfigError)


def map_provider_error(exc: BaseException, info: TransientInfo | None = None) -> BudgetmixError:
    """The budgetmix error a provider call's final failure ``exc`` becomes.

    * a :class:`BudgetmixError` already (a :class:`ProviderError`, or a
      :class:`ConfigError` raised before sending): unchanged;
    * a request that cannot be encoded (:class:`UnicodeEncodeError`, a lone surrogate):
      :class:`ConfigError` saying nothing was sent;
    * a body that cannot be read (nested too deep, not JSON, failed SDK validation):
      :class:`ResponseFormatError`;
    * anything else: :class:`ProviderError` with the HTTP status and whether the failure
      was transient (``info``: its :func:`classify_exception`, computed when omitted).

    Messages name the exception type only: a provider's message may quote the request.
    """
    if isinstance(exc, BudgetmixError):
        return exc
    name = type(exc).__name__
    if isinstance(exc, UnicodeEncodeError):
        return ConfigError(
            f"{name}: the request content could not be encoded as UTF-8 JSON ({exc.reason} "
            f"at position {exc.start}); nothing was sent"
        )
    info = info if info is not None else classify_exception(exc)
    if isinstance(exc, RecursionError):
        return ResponseFormatError(
            f"{name}: the provider's response could not be read (it nests too deep)",
            status_code=info.status_code,
        )
    if isinstance(exc, ValueError) or name.endswith("ResponseValidationError"):
        return ResponseFormatError(
            f"{name}: the provider's response could not be read", status_code=info.status_code
        )
    return ProviderError(
        f"{name}: provider call failed", status_code=info.status_code, retryable=info.transient
    )
