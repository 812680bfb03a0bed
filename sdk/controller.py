"""The controller: wraps any agent loop in budgeted, traced episodes.

Usage::

    controller = BudgetController(Budget(turns=8))
    with controller.episode(name="solve") as ep:
        for turn in ep.turns(model="gpt-4o"):         # stops when the budget is spent
            reply = llm(turn.openai_chat(messages))    # notice injected, history untouched
            turn.usage(input_tokens=..., output_tokens=...)
            if not reply.tool_calls:
                ep.finish(success=True, output=reply.content)
                break
            calls = ep.tool_batch([c.name for c in reply.tool_calls])  # pre-checked
            for call, tc in zip(calls, reply.tool_calls):
                messages.append(call.run(tools[tc.name], **tc.args))
    print(ep.result.status, ep.result.used["turns"])

Exhaustion is an outcome (status ``budget_exhausted``) unless the controller was
built with ``exhaustion="raise"``, in which case :class:`BudgetExhausted`
(carrying counts and the partial transcript) leaves the ``with`` block. A framework
that wraps the stop in its own exception (``raise ... from exc``, or raising while
handling it) still ends the episode as ``budget_exhausted`` (or ``early_stopped``) with
its stop reason; the framework's exception then leaves the ``with`` block in every mode.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from budgetmix._validate import check_between, check_choice, check_instance
from budgetmix.accounting import DEFAULT_ACCOUNTING, AccountingPolicy
from budgetmix.budget import Budget
from budgetmix.episode import Episode, current_episode
from budgetmix.exceptions import ConfigError
from budgetmix.hooks import Hooks
from budgetmix.instrumentation import Instrumentation, tracer_is_no_op
from budgetmix.ledger import Clock
from budgetmix.policy import (
    EXHAUSTION_MODES,
    EarlyStopPolicy,
    ExhaustionMode,
    ExtensionPolicy,
    NoticePolicy,
    NotifyEveryTurn,
)
from budgetmix.provider_errors import classify_exception
from budgetmix.retry import Classifier, RetryPolicy
from budgetmix.semconv import CAPTURE_CONTENT_ENV
from budgetmix.stores import LedgerStore, StoredLedger, is_store
from opentelemetry import metrics, trace

__all__ = ["BudgetController"]

F = TypeVar("F", bound=Callable[..., Any])


def _check_arguments(
    *,
    budget: Any,
    name: Any,
    accounting: Any,
    exhaustion: Any,
    retry: Any,
    capture_content: Any,
    warn_fraction: Any,
    provider_name: Any,
    callables: dict[str, Any],
) -> None:
    """The controller's argument checks; each error names its argument."""
    for field, value, kind, wanted in (
        ("budget", budget, Budget, "a Budget"),
        ("accounting", accounting, AccountingPolicy, "an AccountingPolicy"),
        ("retry", retry, RetryPolicy | None, "a RetryPolicy or None"),
        ("name", name, str, "a str"),
        ("provider_name", provider_name, str | None, "a str or None"),
        ("capture_content", capture_content, bool, "true or false"),
    ):
        check_instance(field, value, kind, wanted)
    check_choice("exhaustion", exhaustion, EXHAUSTION_MODES)
    check_between("warn_fraction", warn_fraction, 0, 1, open_high=True)
    for field, fn in callables.items():
        if not callable(fn):
            raise ConfigError(f"{field} must be callable, got {type(fn).__name__}")


class BudgetController:
    """Runs episodes under a budget, a notice policy and an accounting policy.

    Args:
        budget: default limits of each episode.
        name: the agent's name (``gen_ai.agent.name``).
        accounting: what counts as a turn / tool call.
        notice: when and in which format the model is told its budget.
        exhaustion: ``"end"`` (status budget_exhausted), ``"raise"``, or ``"grace"``
            (one tool-less wrap-up turn, then end).
        extension: consulted when a limit refuses a turn.
        early_stop: consulted after each step.
        hooks: ``on_*`` callbacks.
        retry: backoff for transient provider errors.
        capture_content: put message content and tool arguments on spans; by default
            off unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``
            (the GenAI instrumentations' switch).
        warn_fraction: emit ``budgetmix.budget.warning`` when remaining turns fall to this share.
        provider_name: ``gen_ai.provider.name`` for model spans.

    Raises:
        ConfigError: invalid arguments.
    """

    def __init__(
        self,
        budget: Budget,
        *,
        name: str = "agent",
        accounting: AccountingPolicy = DEFAULT_ACCOUNTING,
        notice: NoticePolicy | None = None,
        exhaustion: ExhaustionMode = "end",
        extension: ExtensionPolicy | None = None,
        early_stop: EarlyStopPolicy | None = None,
        hooks: Sequence[Hooks] = (),
        retry: RetryPolicy | None = None,
        classifier: Classifier = classify_exception,
        capture_content: bool | None = None,
        warn_fraction: float = 0.2,
        provider_name: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        if capture_content is None:
            capture_content = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
        _check_arguments(
            budget=budget,
            name=name,
            accounting=accounting,
            exhaustion=exhaustion,
            retry=retry,
            capture_content=capture_content,
            warn_fraction=warn_fraction,
            provider_name=provider_name,
            callables={"classifier": classifier, "clock": clock},
        )
        try:
            self.hooks: tuple[Hooks, ...] = tuple(hooks)
        except TypeError:
            raise ConfigError(
                f"hooks must be a list of Hooks, got {type(hooks).__name__}"
            ) from None
        self.budget = budget
        self.name = name
        self.accounting = accounting
        self.notice: NoticePolicy = notice if notice is not None else NotifyEveryTurn()
        self.exhaustion: ExhaustionMode = exhaustion
        self.extension = extension
        self.early_stop = early_stop
        self.retry = retry if retry is not None else RetryPolicy()
        self.classifier = classifier
        self.capture_content = capture_content
        self.warn_fraction = warn_fraction
        self.provider_name = provider_name
        self.clock = clock
        self.instrumentation = Instrumentation(
            self.hooks, tracer_provider=tracer_provider, meter_provider=meter_provider
        )

    def episode(
        self,
        *,
        name: str | None = None,
        budget: Budget | None = None,
        episode_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        parent: Episode | None = None,
        conversation_id: str | None = None,
        store: LedgerStore | None = None,
    ) -> Episode:
        """A new episode; enter it with ``with`` or ``async with``.

        ``parent`` makes it a sub-agent episode that also draws from the parent's ledger.
        ``conversation_id`` (your chat session's id) goes on its spans as
        ``gen_ai.conversation.id``, so traces join the conversation they served.
        ``store`` (:mod:`budgetmix.stores`) keeps the ledger there under ``episode_id``:
        a new process that opens the same id resumes the budget (a child of a stored
        episode is stored in its parent's store).

        Raises:
            ConfigError: an argument of the wrong type; the message names it.
        """
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigError(f"budget must be a Budget, got {type(budget).__name__}")
        if metadata is not None and not isinstance(metadata, dict):
            raise ConfigError(f"metadata must be a dict, got {type(metadata).__name__}")
        if parent is not None and not isinstance(parent, Episode):
            raise ConfigError(f"parent must be an Episode, got {type(parent).__name__}")
        if store is None and parent is not None and isinstance(parent.ledger, StoredLedger):
            store = parent.ledger.store
        if store is not None and not is_store(store):
            raise ConfigError(f"store must be a LedgerStore, got {type(store).__name__}")
        for field, value in (
            ("name", name),
            ("episode_id", episode_id),
            ("conversation_id", conversation_id),
        ):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{field} must be a str, got {type(value).__name__}")
        return Episode(
            self,
            name=name or self.name,
            budget=budget or self.budget,
            episode_id=episode_id or uuid.uuid4().hex[:16],
            metadata=metadata or {},
            parent=parent,
            conversation_id=conversation_id,
            store=store,
        )

    def tool(self, fn: F) -> F:
        """Decorate a tool function so calls inside an episode are charged and recorded.

        Outside an episode the function runs unchanged. Inside, each call is a
        batch of one (pre-checked), its exceptions become ``tool_error`` mistakes
        and are re-raised.
        """
        tool_name = fn.__name__
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                ep = current_episode()
                if ep is None:
                    return await fn(*args, **kwargs)
                (call,) = ep.tool_batch([tool_name])
                return await call.arun(fn, *args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ep = current_episode()
            if ep is None:
                return fn(*args, **kwargs)
            (call,) = ep.tool_batch([tool_name])
            return call.run(fn, *args, **kwargs)

        return cast(F, wrapper)

    def tracer_is_no_op(self) -> bool:
        """True when no span can be recorded: the API's no-op tracer, or the global proxy
        while no SDK tracer provider is installed (asked each time: one may come later)."""
        return tracer_is_no_op(self.instrumentation.tracer)
