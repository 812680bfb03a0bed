"""Turns and tool calls: the two things an episode charges.

A :class:`Turn` is one model call (charged before the request is sent); a
:class:`ToolCall` is one call of a tool inside a pre-checked batch. Both are
context managers that end their span and record their outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from budgetmix import semconv as sc
from budgetmix._validate import check_int
from budgetmix.events import MistakeKind, exception_text, mistake_kind
from budgetmix.exceptions import BudgetExhausted, ConfigError, ProviderError
from budgetmix.notice import (
    with_notice_anthropic,
    with_notice_openai_chat,
    with_notice_openai_responses,
)
from budgetmix.retry import acall_with_retry, call_with_retry, classify_exception
from budgetmix.spans import set_error
from opentelemetry.trace import Span

if TYPE_CHECKING:
    from budgetmix.episode import Episode

__all__ = ["ToolCall", "Turn"]

T = TypeVar("T")


def _set_content(span: Span, key: str, value: Any) -> None:
    """Opt-in content goes on the span with credentials masked (never a secret in a trace).

    The text comes from :func:`~budgetmix.redaction.redact_content`, which masks before
    encoding and never raises: whatever a tool returns, capturing it cannot change
    the episode's outcome."""
    from budgetmix.redaction import redact_content

    span.set_attribute(key, redact_content(value))


class Turn:
    """One charged model turn. ``notice`` is the text to inject (``None`` when the
    notice policy is silent this turn); ``grace`` marks the tool-less wrap-up turn."""

    __slots__ = (
        "_charged",
        "_ended",
        "_recording",
        "_span",
        "episode",
        "grace",
        "model",
        "notice",
        "number",
    )

    def __init__(
        self,
        episode: Episode,
        number: int,
        model: str | None,
        notice: str | None,
        span: Span,
        *,
        grace: bool = False,
    ) -> None:
        self.episode = episode
        self.number = number
        self.model = model
        self.notice = notice
        self.grace = grace
        self._span = span
        self._recording = span.is_recording()  # asked once: False for every no-op span
        self._ended = False
        # whether this turn holds a charge in the ledger (grace turns never do; a
        # request that failed after retries gives its charge back)
        self._charged = not grace

    # -- notice injection (new lists; the caller's history is never touched) -------
    def openai_chat(self, messages: Sequence[Any]) -> list[Any]:
        """``messages`` plus the notice as a trailing user message (if any)."""
        return with_notice_openai_chat(messages, self.notice) if self.notice else list(messages)

    def openai_responses(self, input_items: str | Sequence[Any]) -> list[Any] | str:
        if not self.notice:
            return input_items if isinstance(input_items, str) else list(input_items)
        return with_notice_openai_responses(input_items, self.notice)

    def anthropic(self, messages: Sequence[Any]) -> list[Any]:
        return with_notice_anthropic(messages, self.notice) if self.notice else list(messages)

    # -- recording ---------------------------------------------------------------
    def usage(
        self,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
        response_model: str | None = None,
        finish_reasons: Sequence[str] | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        """Record what the response consumed (tokens and cost are known only now).

        ``input_tokens`` counts every input token the model processed, including the
        ``cache_read_tokens`` served from and ``cache_write_tokens`` written to the
        provider's prompt cache (reported on the span, priced apart by the adapters).

        A bad figure is the caller's bug, not a model's mistake, so it fails here:
        nothing is charged in any ledger of the chain and the turn stays usable.

        Raises:
            ConfigError: a token count is not an int in ``[0, 2**53]`` (a float, a
                string or a bool is not a count), or ``cost_usd`` is not a finite number
                in ``[0, 1e12]``; the message names the argument (``usage.input_tokens``).
        """
        check_int("usage.cache_read_tokens", cache_read_tokens)
        check_int("usage.cache_write_tokens", cache_write_tokens)
        self.episode.ledger.add_usage(
            input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost_usd
        )
        span = self._span
        if self._recording and span.is_recording():
            span.set_attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, input_tokens)
            span.set_attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens)
            if cache_read_tokens:
                span.set_attribute(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, cache_read_tokens)
            if cache_write_tokens:
                span.set_attribute(sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, cache_write_tokens)
            if response_model:
                span.set_attribute(sc.GEN_AI_RESPONSE_MODEL, response_model)
            if finish_reasons:
                span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, list(finish_reasons))

    def record_content(self, *, input_messages: Any = None, output_messages: Any = None) -> None:
        """Attach message content to the span, only when content capture is enabled."""
        span = self._span
        capture = self.episode.controller.capture_content
        if not (self._recording and capture and span.is_recording()):
            return
        if input_messages is not None:
            _set_content(span, sc.GEN_AI_INPUT_MESSAGES, input_messages)
        if output_messages is not None:
            _set_content(span, sc.GEN_AI_OUTPUT_MESSAGES, output_messages)

    def add_event(
        self, name: str, attributes: Mapping[str, str | int | float | bool] | None = None
    ) -> None:
        """Attach an event to the turn's span (e.g. ``budgetmix.usage_missing``)."""
        if self._recording and not self._ended and self._span.is_recording():
            self._span.add_event(name, dict(attributes or {}))

    def failed(self, exc: BaseException) -> ProviderError:
        """Record a provider failure (after retries) and return the error to raise."""
        info = classify_exception(exc)
        self.episode._provider_failure(self, exc)
        if isinstance(exc, ProviderError):
            return exc
        return ProviderError(
            f"{type(exc).__name__}: provider call failed",
            status_code=info.status_code,
            retryable=info.transient,
        )

    def end(self) -> None:
        """End the turn's span (idempotent)."""
        if not self._ended:
            self._ended = True
            if self._recording:  # a span that did not record at start never will
                self._span.end()

    # -- calling with retries --------------------------------------------------------
    def call(self, fn: Callable[[], T], *, sleep: Callable[[float], None] | None = None) -> T:
        """Call ``fn`` with the controller's retry policy; a final failure is recorded
        as a ``provider_error`` mistake and raised as :class:`ProviderError`.

        Calling again after such a failure charges the turn again first (the failed
        request gave its turn back), so it may raise :class:`BudgetExhausted`."""
        ep = self.episode
        ep._charge_again(self)
        try:
            return fn()  # the common case: the retry machinery is never built
        except Exception as exc:
            first = exc
        kwargs: dict[str, Any] = {"sleep": sleep} if sleep is not None else {}
        try:
            return call_with_retry(
                fn,
                ep.controller.retry,
                wall_left=ep._wall_left,
                on_retry=self._on_retry,
                classifier=ep.controller.classifier,
                first_failure=first,
                **kwargs,
            )
        except BudgetExhausted:
            raise
        except Exception as exc:
            raise self.failed(exc) from exc

    async def acall(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> T:
        """Async twin of :meth:`call`."""
        ep = self.episode
        ep._charge_again(self)
        try:
            return await fn()
        except Exception as exc:
            first = exc
        kwargs: dict[str, Any] = {"sleep": sleep} if sleep is not None else {}
        try:
            return await acall_with_retry(
                fn,
                ep.controller.retry,
                wall_left=ep._wall_left,
                on_retry=self._on_retry,
                classifier=ep.controller.classifier,
                first_failure=first,
                **kwargs,
            )
        except BudgetExhausted:
            raise
        except Exception as exc:
            raise self.failed(exc) from exc

    def _on_retry(self, attempt: int, exc: BaseException, delay: float) -> None:
        self.episode._on_retry(self, attempt, exc, delay)

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and self._span.is_recording():
            set_error(self._span, type(exc).__name__)
        self.end()


class ToolCall:
    """One tool call of a pre-checked batch; records success or failure and its span."""

    __slots__ = ("_span", "call_id", "episode", "error", "name", "ok", "result", "turn")

    def __init__(
        self, episode: Episode, name: str, call_id: str | None, turn: int, span: Span
    ) -> None:
        self.episode = episode
        self.name = name
        self.call_id = call_id
        self.turn = turn
        self._span = span
        self.ok: bool | None = None
        self.error: str | None = None
        self.result: Any = None

    def record_arguments(self, arguments: Any) -> None:
        """Attach the call's arguments to its span, only when content capture is enabled."""
        if self.episode.controller.capture_content and self._span.is_recording():
            _set_content(self._span, sc.GEN_AI_TOOL_CALL_ARGUMENTS, arguments)

    def succeed(self, result: Any = None) -> None:
        """Mark the call successful (a recovery if mistakes were pending)."""
        if self.ok is not None:
            return
        self.ok, self.result = True, result
        ep = self.episode
        if ep.controller.capture_content and self._span.is_recording() and result is not None:
            _set_content(self._span, sc.GEN_AI_TOOL_CALL_RESULT, result)
        ep._tool_finished(self, mistake=None, detail="")
        self._span.end()

    def fail(self, detail: str = "", kind: MistakeKind | str = MistakeKind.TOOL_ERROR) -> None:
        """Mark the call failed with a mistake of ``kind`` (default ``tool_error``).

        Raises:
            ConfigError: ``kind`` is not a mistake kind or ``detail`` not a str (the
                call stays open).
        """
        if self.ok is not None:
            return
        mistake = mistake_kind(kind)
        if not isinstance(detail, str):
            raise ConfigError(f"detail must be a str, got {type(detail).__name__}")
        self.ok, self.error = False, detail
        if self._span.is_recording():
            set_error(self._span, str(mistake))
        self.episode._tool_finished(self, mistake=mistake, detail=detail)
        self._span.end()

    def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Call ``fn(*args, **kwargs)`` as this call; an exception is recorded, re-raised."""
        with self:
            result = fn(*args, **kwargs)
            self.succeed(result)
            return result

    async def arun(self, fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        with self:
            result = await fn(*args, **kwargs)
            self.succeed(result)
            return result

    def __enter__(self) -> ToolCall:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            # a broken __str__ must not replace the tool's exception nor lose its mistake
            self.fail(exception_text(exc))
        elif self.ok is None:
            self.succeed()
