"""Turns and tool calls: the two things an episode charges.

A :class:`Turn` is one model call (charged before the request is sent); a
:class:`ToolCall` is one call of a tool inside a pre-checked batch. Both are
context managers that end their span and record their outcome.

Each talks to the episode that opened it through a small owner protocol
(:class:`TurnOwner`, :class:`ToolOwner`), never through its private parts; what
they write on their spans is :mod:`budgetmix.instrumentation`'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from budgetmix import semconv as sc
from budgetmix._validate import check_int
from budgetmix.events import MistakeKind, exception_text, mistake_kind
from budgetmix.exceptions import BudgetExhausted, BudgetmixError, ConfigError
from budgetmix.ledger import Ledger
from budgetmix.notice import (
    with_notice_anthropic,
    with_notice_openai_chat,
    with_notice_openai_responses,
)
from budgetmix.provider_errors import map_provider_error, nothing_sent
from budgetmix.retry import acall_with_retry, call_with_retry
from budgetmix.step_spans import (
    add_span_event,
    call_arguments,
    chat_attributes,
    enter_span,
    exit_span,
    record_duration,
    record_tokens,
    set_error,
    set_turn_content,
    set_usage,
    wire_tool_span,
)
from budgetmix.trace_content import set_content
from opentelemetry.trace import Span

if TYPE_CHECKING:
    from budgetmix.controller import BudgetController

__all__ = ["ToolCall", "ToolOwner", "Turn", "TurnOwner"]

T = TypeVar("T")


class TurnOwner(Protocol):
    """What a :class:`Turn` asks of the episode that opened it."""

    @property
    def controller(self) -> BudgetController:
        """The controller whose retry, content-capture and accounting settings the turn follows."""

    @property
    def ledger(self) -> Ledger:
        """The episode's ledger, charged for the turn's usage and read for wall time left."""

    def charge_resend(self) -> None:
        """Charge a turn again before a refunded request is resent.

        Raises:
            BudgetExhausted: a limit refuses it (extensions were asked).
        """

    def turn_failed(self, detail: str, *, sent: bool, charged: bool) -> bool:
        """A request failed for good (``sent``: it left; ``charged``: the turn holds a
        charge): record it; ``True`` when the charge was given back."""

    def turn_retrying(self, span: Span, attempt: int, exc: BaseException, delay: float) -> None:
        """Attempt ``attempt`` failed with ``exc``; the next comes after ``delay`` s.

        Raises:
            BudgetExhausted: retries count as turns and a limit refuses this one.
        """


class ToolOwner(Protocol):
    """What a :class:`ToolCall` asks of the episode that charged it."""

    @property
    def controller(self) -> BudgetController:
        """The controller whose content-capture setting decides what the call's span records."""

    def tool_finished(self, call: ToolCall, mistake: MistakeKind | None, detail: str) -> None:
        """``call`` ended: a success (``mistake`` is ``None``) or a mistake of that kind."""


class Turn:
    """One charged model turn. ``notice`` is the text to inject (``None`` when the
    notice policy is silent this turn); ``grace`` marks the tool-less wrap-up turn;
    ``episode`` is the episode that opened it."""

    __slots__ = (
        "_charged",
        "_ended",
        "_provider",
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
        episode: TurnOwner,
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
        self._provider: str | None = None  # what the wrapper or transport told

    # -- notice injection (new lists; the caller's history is never touched) -------
    def openai_chat(self, messages: Sequence[Any]) -> list[Any]:
        """``messages`` plus the notice as a trailing user message (if any)."""
        return with_notice_openai_chat(messages, self.notice) if self.notice else list(messages)

    def openai_responses(self, input_items: str | Sequence[Any]) -> list[Any] | str:
        """``input_items`` (a string or items) with the notice appended (if any)."""
        if not self.notice:
            return input_items if isinstance(input_items, str) else list(input_items)
        return with_notice_openai_responses(input_items, self.notice)

    def anthropic(self, messages: Sequence[Any]) -> list[Any]:
        """``messages`` with the notice in the last user turn (if any)."""
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
        response_id: str | None = None,
    ) -> None:
        """Record what the response consumed (tokens and cost are known only now), on the
        turn's span (``response_id``: the provider's id, ``gen_ai.response.id``) and as
        ``gen_ai.client.token.usage`` points.

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
        if self._recording and self._span.is_recording():
            set_usage(
                self._span,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_tokens=cache_read_tokens,
                cache_write_tokens=cache_write_tokens,
                response_model=response_model,
                finish_reasons=finish_reasons,
                response_id=response_id,
            )
        inst = self.episode.controller.instrumentation
        if inst.meters():
            record_tokens(inst, self._metric_attributes(), input_tokens, output_tokens)

    def describe(
        self,
        *,
        provider: str | None = None,
        server_address: str | None = None,
        server_port: int | None = None,
    ) -> None:
        """The request's provider (``gen_ai.provider.name``, unless the controller names
        one) and server (address, port), on the turn's span and its metric points."""
        c = self.episode.controller
        self._provider = c.provider_name or provider
        if not (self._recording and self._span.is_recording()):
            return
        if provider and not c.provider_name:
            self._span.set_attribute(sc.GEN_AI_PROVIDER_NAME, provider)
        if server_address:
            self._span.set_attribute(sc.SERVER_ADDRESS, server_address)
        if server_port is not None:
            self._span.set_attribute(sc.SERVER_PORT, server_port)

    def _metric_attributes(self) -> dict[str, str]:
        return chat_attributes(self._provider or self.episode.controller.provider_name, self.model)

    def record_content(
        self,
        *,
        input_messages: Any = None,
        output_messages: Any = None,
        system_instructions: Any = None,
        finish_reason: Any = None,
    ) -> None:
        """Attach message content to the span, only when content capture is enabled, in
        the GenAI conventions' parts format (``gen_ai.input.messages``,
        ``gen_ai.output.messages``, ``gen_ai.system_instructions``). Messages may be
        OpenAI chat or Responses items, Anthropic messages, ``ChatMessage`` s or parts
        already; ``finish_reason`` goes on output messages that have none."""
        span = self._span
        c = self.episode.controller
        if not (self._recording and c.capture_content and span.is_recording()):
            return
        set_turn_content(
            c.instrumentation,
            self.episode,
            span,
            inputs=input_messages,
            outputs=output_messages,
            system=system_instructions,
            finish_reason=finish_reason,
            notice=self.notice,
        )

    def add_event(
        self, name: str, attributes: Mapping[str, str | int | float | bool] | None = None
    ) -> None:
        """Attach an event to the turn's span (e.g. ``budgetmix.usage_missing``)."""
        if self._recording and not self._ended and self._span.is_recording():
            add_span_event(self._span, name, attributes)

    def trace_tool_call(
        self,
        name: str,
        call_id: str,
        *,
        start_ns: int,
        end_ns: int,
        error: str | None = None,
        content: tuple[Any, Any] | None = None,
        detail: str = "",
    ) -> None:
        """Write the ``execute_tool`` span (a child of this turn's) of a call this turn's
        response made and the agent ran itself, timed from the wire: from the response
        to the request carrying its result, an upper bound. ``content``: ``(arguments,
        result)``, attached only when the controller captures content; ``detail``: a
        failed call's error text. The outcome is
        :meth:`Episode.record_tool_result <budgetmix.Episode.record_tool_result>`'s."""
        if not self._recording:
            return  # a no-op span: its children are no-ops too
        c = self.episode.controller
        captured = content if c.capture_content else None
        tracer = c.instrumentation.tracer
        wire_tool_span(
            tracer,
            self._span,
            name,
            call_id,
            start_ns=start_ns,
            end_ns=end_ns,
            error=error,
            content=captured,
            detail=detail,
        )

    def failed(self, exc: BaseException) -> BudgetmixError:
        """Record a provider call's final failure (after retries); the error to raise.

        The error is :func:`~budgetmix.provider_errors.map_provider_error`'s, the one
        boundary: a :class:`~budgetmix.ProviderError` (a
        :class:`~budgetmix.ResponseFormatError` for a body that could not be read),
        recorded as a ``provider_error`` mistake; or a :class:`~budgetmix.ConfigError`
        when the request could not be encoded, so nothing was sent: no mistake. Either
        way the turn gives its charge back unless the accounting counts failed requests
        (nothing sent is never charged)."""
        error = map_provider_error(exc)
        sent = not nothing_sent(error)
        if self.episode.turn_failed(type(exc).__name__, sent=sent, charged=self._charged):
            self._charged = False
        return error

    def end(self) -> None:
        """End the turn's span (idempotent)."""
        if not self._ended:
            self._ended = True
            if self._recording:  # a span that did not record at start never will
                self._span.end()

    # -- calling with retries --------------------------------------------------------
    def call(self, fn: Callable[[], T], *, sleep: Callable[[float], None] | None = None) -> T:
        """Call ``fn`` with the controller's retry policy; a final failure is recorded
        (see :meth:`failed`) and raised as the budgetmix error it maps to, ``from`` the
        provider's exception.

        Calling again after such a failure charges the turn again first (the failed
        request gave its turn back), so it may raise :class:`BudgetExhausted`."""
        self._charge_for_send()
        c = self.episode.controller
        token = enter_span(self._span) if self._recording else None
        start = time.perf_counter()
        try:
            result = call_with_retry(
                fn,
                c.retry,
                wall_left=self.episode.ledger.wall_left,
                on_retry=self._retrying,
                classifier=c.classifier,
                sleep=sleep or time.sleep,
            )
        except BudgetExhausted:
            raise
        except Exception as exc:
            self._called(start, type(exc).__name__)
            raise self.failed(exc) from exc
        finally:
            exit_span(token)
        self._called(start, None)
        return result

    async def acall(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> T:
        """Async twin of :meth:`call`."""
        self._charge_for_send()
        c = self.episode.controller
        token = enter_span(self._span) if self._recording else None
        start = time.perf_counter()
        try:
            result = await acall_with_retry(
                fn,
                c.retry,
                wall_left=self.episode.ledger.wall_left,
                on_retry=self._retrying,
                classifier=c.classifier,
                sleep=sleep or asyncio.sleep,
            )
        except BudgetExhausted:
            raise
        except Exception as exc:
            self._called(start, type(exc).__name__)
            raise self.failed(exc) from exc
        finally:
            exit_span(token)
        self._called(start, None)
        return result

    def _called(self, start: float, error: str | None) -> None:
        # the call's gen_ai.client.operation.duration (retries and their waits included)
        inst = self.episode.controller.instrumentation
        if inst.meters():
            record_duration(inst, self._metric_attributes(), time.perf_counter() - start, error)

    def _charge_for_send(self) -> None:
        # a request refunded after its failure is charged again before it is resent
        if not self._charged and not self.grace:
            self.episode.charge_resend()
            self._charged = True

    def _retrying(self, attempt: int, exc: BaseException, delay: float) -> None:
        self.episode.turn_retrying(self._span, attempt, exc, delay)

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and self._span.is_recording():
            set_error(self._span, type(exc).__name__, exc=exc)
        self.end()


class ToolCall:
    """One tool call of a pre-checked batch; records success or failure and its span.
    ``episode`` is the episode that charged it."""

    __slots__ = ("_argued", "_span", "call_id", "episode", "error", "name", "ok", "result", "turn")

    def __init__(
        self, episode: ToolOwner, name: str, call_id: str | None, turn: int, span: Span
    ) -> None:
        self.episode = episode
        self.name = name
        self.call_id = call_id
        self.turn = turn
        self._span = span
        self.ok: bool | None = None
        self.error: str | None = None
        self.result: Any = None
        self._argued = False  # arguments recorded already

    def record_arguments(self, arguments: Any) -> None:
        """Attach the call's arguments to its span, only when content capture is enabled."""
        if self.episode.controller.capture_content and self._span.is_recording():
            self._argued = True
            set_content(self._span, sc.GEN_AI_TOOL_CALL_ARGUMENTS, arguments)

    def _run_arguments(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> None:
        # what run()/arun() pass, unless recorded already; only when content is captured
        if not self._argued and self.episode.controller.capture_content:
            self.record_arguments(call_arguments(fn, args, kwargs))

    def succeed(self, result: Any = None) -> None:
        """Mark the call successful (a recovery if mistakes were pending)."""
        if self.ok is not None:
            return
        self.ok, self.result = True, result
        span = self._span
        if result is not None and self.episode.controller.capture_content and span.is_recording():
            set_content(span, sc.GEN_AI_TOOL_CALL_RESULT, result)
        self.episode.tool_finished(self, None, "")
        span.end()

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
        self._failed(detail, mistake, None)

    def _failed(self, detail: str, mistake: MistakeKind, exc: BaseException | None) -> None:
        self.ok, self.error = False, detail
        if self._span.is_recording():  # its error text explains it (an exception event)
            set_error(self._span, str(mistake), description=detail or str(mistake), exc=exc)
        self.episode.tool_finished(self, mistake, detail)
        self._span.end()

    def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Call ``fn(*args, **kwargs)`` as this call, its span current (spans ``fn`` makes
        are its children); with content capture its arguments go on the span; an
        exception is recorded, re-raised."""
        self._run_arguments(fn, args, kwargs)
        with self:
            token = enter_span(self._span)
            try:
                result = fn(*args, **kwargs)
            finally:
                exit_span(token)
            self.succeed(result)
            return result

    async def arun(self, fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        """Async twin of :meth:`run`."""
        self._run_arguments(fn, args, kwargs)
        with self:
            token = enter_span(self._span)
            try:
                result = await fn(*args, **kwargs)
            finally:
                exit_span(token)
            self.succeed(result)
            return result

    def __enter__(self) -> ToolCall:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and self.ok is None:
            # a broken __str__ must not replace the tool's exception nor lose its mistake
            self._failed(exception_text(exc), MistakeKind.TOOL_ERROR, exc)
        elif self.ok is None:
            self.succeed()
