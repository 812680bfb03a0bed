"""The built-in agent loop: any chat model, plain Python tools, one budgeted episode.

:func:`run_agent` (sync) and :func:`arun_agent` (async) are thin drivers over
one I/O-free core, :class:`_AgentLoop`, which builds each request, digests
each response and records each tool outcome. Per turn the loop:

1. charges the turn (``episode.try_begin_turn``); a refused turn ends the run;
2. calls the model through ``turn.call`` / ``turn.acall`` (transient errors are
   retried without consuming turns) with the turn's notice, placed as the
   controller's notice policy says (:func:`budgetmix.policy.notice_placement`):
   ``"ephemeral"`` (default) passes it to the model adapter, which injects it for
   that request only, never stored in the history; ``"observation"`` appends it to
   the turn's latest observation in the history (the last tool message, else the
   latest user message), where it stays: every later request repeats those bytes,
   as in training (docs/layout.md);
3. records usage and cost, and appends the assistant message;
4. no tool calls: that text is the final answer (``judge`` decides success);
5. otherwise pre-checks the whole parallel batch (``episode.tool_batch``),
   refusing it whole when it does not fit, validates every call, runs the
   valid ones concurrently, and appends one tool message per call in call
   order. A tool that raises, invalid arguments and unknown tools become
   error results the model sees plus mistake events. A tool that returns
   :class:`EndEpisode` ends the episode after this batch (its ``success``, no
   further model call): the rule a tool environment's training rollout follows too.

With ``exhaustion="grace"`` a run whose turns are spent gets one more call
with ``tool_choice="none"`` (tool definitions stay in the request, so the
provider's prompt cache stays warm) and the final-turn notice; its text is the
best-effort :attr:`AgentRun.output`, the episode still ends ``budget_exhausted``
and ``result.grace_turn`` is set. Tool calls the model makes anyway are not
executed (a ``model_format_error`` mistake; :attr:`AgentRun.ignored_tool_calls`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from budgetmix.adapters._agent_setup import ToolLike, prepare
from budgetmix.adapters._loop_support import (
    check_trained_grace,
    check_trained_notice,
    record_content,
    sendable,
    tool_pool,
)
from budgetmix.adapters.agent_run import AgentRun, EndEpisode
from budgetmix.adapters.base import (
    AsyncChatModel,
    ChatMessage,
    ChatModel,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    Usage,
)
from budgetmix.adapters.tools import (
    PreparedCall,
    ToolArgumentError,
    Toolbox,
    ToolOutcome,
    arun_prepared,
    render_tool_error,
    render_tool_result,
    run_prepared,
)
from budgetmix.budget import Budget
from budgetmix.controller import BudgetController
from budgetmix.episode import Episode
from budgetmix.events import MistakeKind
from budgetmix.exceptions import BudgetExhausted, ConfigError
from budgetmix.notice import append_notice, observation_index
from budgetmix.policy import ExhaustionMode, ExtensionPolicy, notice_placement
from budgetmix.steps import ToolCall, Turn

if TYPE_CHECKING:
    from budgetmix.adapters.pricing import Pricing

__all__ = ["AgentRun", "EndEpisode", "arun_agent", "run_agent"]

Judge = Callable[[str], bool]

#: What the model reads for calls that were never run.
REFUSED_BY_BUDGET = "Not executed: the tool-call budget does not cover this batch."
IGNORED_ON_GRACE = "Not executed: tools are disabled on the final wrap-up turn."


@dataclass(frozen=True, slots=True)
class _Planned:
    """One call of a pre-checked batch: its charge, and what will run (or why not)."""

    call: ToolCall
    request: ToolCallRequest
    prepared: PreparedCall | ToolArgumentError


def _load_pricing(pricing: Pricing | None) -> Pricing:
    if pricing is not None:
        return pricing
    from budgetmix.adapters.pricing import DEFAULT_PRICING  # loaded on first use

    return DEFAULT_PRICING


class _AgentLoop:
    """The I/O-free core shared by the sync and async drivers."""

    def __init__(
        self,
        episode: Episode,
        toolbox: Toolbox,
        history: list[ChatMessage],
        *,
        model_name: str,
        judge: Judge | None,
        pricing: Pricing | None,
    ) -> None:
        """A run's loop over what :func:`~budgetmix.adapters._agent_setup.prepare` opened;
        it checks what must hold before the first request and records the opening messages.

        Raises:
            ConfigError: a cost limit is set and the model has no known price.
        """
        self.episode = episode
        self.model_name = model_name
        self.toolbox = toolbox
        self.history = history
        self.judge = judge
        self.pricing = _load_pricing(pricing)
        self.placement = notice_placement(episode.controller.notice)
        self.output: str | None = None
        self.grace_answer = False
        self.ignored: tuple[ToolCallRequest, ...] = ()
        if self.episode.ledger.limit("cost_usd") is not None:
            self.pricing.require(self.model_name)
        for message in self.history:
            self.episode.record_message(message)
        self._sent: ModelRequest | None = None  # the turn's request, for content capture
        if episode.controller.capture_content:  # the task, before a notice joins it
            episode.controller.instrumentation.episode_input(episode, self.history)

    def next_turn(self) -> Turn | None:
        if self.episode.finished:  # a tool ended it (EndEpisode)
            return None
        return self.episode.try_begin_turn(model=self.model_name)

    def request(self, turn: Turn) -> ModelRequest:
        """The turn's request; under placement ``"observation"`` its notice goes into the
        history first (once per turn: retries resend the same request)."""
        notice = turn.notice
        if notice and self.placement == "observation":
            self._place_notice(notice)
            notice = None
        self._sent = ModelRequest(
            messages=tuple(self.history),
            tools=self.toolbox.specs,
            notice=notice,
            tool_choice="none" if turn.grace else "auto",
        )
        return self._sent

    def on_response(self, turn: Turn, response: ModelResponse) -> list[_Planned] | None:
        """Digest a response: ``None`` ends the run, otherwise the tool batch to run."""
        self._record_usage(turn, response)
        if self.episode.controller.capture_content and self._sent is not None:
            record_content(turn, self._sent, response)
        response = sendable(response)  # it goes back to the model with the history
        self._append(
            ChatMessage(role="assistant", content=response.text, tool_calls=response.tool_calls)
        )
        if turn.grace:
            self.output, self.grace_answer = response.text, True
            self.episode.set_output(response.text)
            if response.tool_calls:
                self.ignored = response.tool_calls
                names = ", ".join(c.name for c in response.tool_calls)
                self.episode.record_mistake(
                    MistakeKind.MODEL_FORMAT_ERROR,
                    detail=f"tool calls on the tool-less grace turn were not executed: {names}",
                )
                self._not_executed(response.tool_calls, IGNORED_ON_GRACE)
            return None
        if not response.tool_calls:
            self.output = response.text
            success = True if self.judge is None else bool(self.judge(response.text))
            self.episode.finish(success=success, output=response.text)
            return None
        requests = response.tool_calls
        try:
            calls = self.episode.tool_batch([r.name for r in requests], [r.id for r in requests])
        except BudgetExhausted:
            # Keep the conversation well-formed: every tool call gets its result.
            self._not_executed(requests, REFUSED_BY_BUDGET)
            raise
        return [
            _Planned(call, req, self.toolbox.prepare(req))
            for call, req in zip(calls, requests, strict=True)
        ]

    def on_outcomes(
        self, batch: Sequence[_Planned], outcomes: Sequence[ToolOutcome | None]
    ) -> None:
        """Record each call's outcome (in call order, so events are deterministic); the
        first :class:`EndEpisode` finishes the episode once all are recorded."""
        ended: EndEpisode | None = None
        for planned, outcome in zip(batch, outcomes, strict=True):
            call, req = planned.call, planned.request
            call.record_arguments(req.arguments)
            if isinstance(planned.prepared, ToolArgumentError):
                call.fail(planned.prepared.message, kind=planned.prepared.kind)
                self._tool_message(req, planned.prepared.message, is_error=True)
                continue
            assert outcome is not None
            ok, value = outcome
            if ok and isinstance(value, EndEpisode):
                ended = ended or value
                value = value.output
            if ok:
                call.succeed(value)
                self._tool_message(req, render_tool_result(value), is_error=False)
            else:
                text = render_tool_error(value)
                call.fail(text, kind=_raised_kind(value))
                self._tool_message(req, text, is_error=True)
        if ended is not None:
            self.output = render_tool_result(ended.output)
            self.episode.finish(success=ended.success, output=self.output)

    def run_result(self) -> AgentRun:
        result = self.episode.result
        assert result is not None, "the episode closes before the run result is built"
        return AgentRun(
            result=result,
            messages=tuple(self.history),
            output=self.output,
            grace_answer=self.grace_answer,
            ignored_tool_calls=self.ignored,
        )

    # -- internals ---------------------------------------------------------------------
    def _record_usage(self, turn: Turn, response: ModelResponse) -> None:
        usage = response.usage or Usage()
        cost = 0.0
        if response.usage is not None:
            for model in (response.model, self.model_name):
                found = self.pricing.cost(
                    model,
                    usage.input_tokens,
                    usage.output_tokens,
                    cache_read=usage.cache_read_tokens,
                    cache_write=usage.cache_write_tokens,
                )
                if found is not None:
                    cost = found
                    break
        turn.usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost_usd=cost,
            response_model=response.model,
            finish_reasons=[response.finish_reason],
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )

    def _append(self, message: ChatMessage) -> None:
        self.history.append(message)
        self.episode.record_message(message)

    def _tool_message(self, request: ToolCallRequest, content: str, *, is_error: bool) -> None:
        self._append(
            ChatMessage(
                role="tool",
                content=content,
                tool_call_id=request.id,
                name=request.name,
                is_error=is_error,
            )
        )

    def _place_notice(self, notice: str) -> None:
        """Append ``notice`` to the turn's latest observation in the history (kept there),
        or add it as a user message when the turn has none."""
        index = observation_index([m.role for m in self.history])
        if index is None:
            self._append(ChatMessage(role="user", content=notice))
            return
        message = self.history[index]
        self.history[index] = replace(message, content=append_notice(message.content, notice))

    def _not_executed(self, requests: Iterable[ToolCallRequest], reason: str) -> None:
        for req in requests:
            self._tool_message(req, reason, is_error=True)


def _open_loop(
    model: Any,
    tools: Toolbox | Iterable[ToolLike],
    task: str | Sequence[ChatMessage],
    budget: Budget | BudgetController,
    *,
    judge: Judge | None,
    pricing: Pricing | None,
    **options: Any,
) -> _AgentLoop:
    """The run's loop over what :func:`~budgetmix.adapters._agent_setup.prepare` opens,
    once the model's trained notice agrees with the controller's
    (:func:`~budgetmix.adapters._loop_support.check_trained_notice`).

    Raises:
        ConfigError: as :func:`run_agent`.
    """
    episode, toolbox, history = prepare(model, tools, task, budget, **options)
    check_trained_notice(model, episode.controller.notice)
    check_trained_grace(model, episode.controller.exhaustion)
    return _AgentLoop(
        episode, toolbox, history, model_name=str(model.model_name), judge=judge, pricing=pricing
    )


def _drive(
    loop: _AgentLoop, model: ChatModel, max_parallel: int, sleep: Callable[[float], None] | None
) -> AgentRun:
    """:func:`run_agent`'s turns: one ``model.complete`` call each, sync tools in a pool."""
    with tool_pool(max_parallel) as pool, loop.episode:
        while (turn := loop.next_turn()) is not None:
            with turn:
                r = loop.request(turn)
                send = functools.partial(
                    model.complete, r.messages, r.tools, notice=r.notice, tool_choice=r.tool_choice
                )
                batch = loop.on_response(turn, turn.call(send, sleep=sleep))
                if batch is None:
                    break
                loop.on_outcomes(batch, run_prepared([p.prepared for p in batch], pool))
    return loop.run_result()


# -- drivers ---------------------------------------------------------------------------
def run_agent(
    model: ChatModel,
    tools: Toolbox | Iterable[ToolLike],
    task: str | Sequence[ChatMessage],
    budget: Budget | BudgetController,
    *,
    system: str | None = None,
    max_parallel: int = 8,
    exhaustion: ExhaustionMode | None = None,
    extension: ExtensionPolicy | None = None,
    judge: Judge | None = None,
    pricing: Pricing | None = None,
    name: str | None = None,
    metadata: dict[str, Any] | None = None,
    conversation_id: str | None = None,
    sleep: Callable[[float], None] | None = None,
) -> AgentRun:
    """Run ``model`` with ``tools`` on ``task`` until it answers or the budget ends the run.

    Args:
        model: any :class:`~budgetmix.adapters.base.ChatModel`.
        tools: functions (schemas derived from type hints), :class:`Tool` s or a :class:`Toolbox`.
        task: the user's request, or an opening conversation (copied, never mutated).
        budget: limits (a controller is built) or a configured :class:`BudgetController`.
        system, max_parallel: a system message put first; most tool calls run at once.
        exhaustion, extension: ``"end"`` (default), ``"raise"`` or ``"grace"``; what is
            asked for more budget at a limit; only with a ``Budget``.
        judge: decides whether the final answer is a success (default: any answer is).
        pricing: prices for the cost limit (default: the built-in table).
        name, metadata, conversation_id: the episode's name, metadata, chat session.
        sleep: replaces ``time.sleep`` between retries (tests).

    Returns:
        the :class:`AgentRun`; a spent budget is an outcome, not an error.

    Raises:
        ConfigError: invalid arguments, an async-only model, a cost limit on a model
            without a known price, or a model whose ``trained_notice`` (a checkpoint
            trained with budgetmix) has another placement or format than the
            controller's notice policy (docs/layout.md), or whose ``trained_grace_turn``
            is ``False`` under ``exhaustion="grace"``.
        ProviderError: the model failed after retries (episode status ``error``).
        BudgetExhausted: the budget ran out and the controller's exhaustion is ``"raise"``.
    """
    if not callable(getattr(model, "complete", None)):
        raise ConfigError(f"model {model!r} has no complete(); use arun_agent for async models")
    loop = _open_loop(
        model, tools, task, budget, judge=judge, pricing=pricing, system=system,
        max_parallel=max_parallel, exhaustion=exhaustion, extension=extension, name=name,
        metadata=metadata, conversation_id=conversation_id,
    )  # fmt: skip
    return _drive(loop, model, max_parallel, sleep)


async def arun_agent(
    model: AsyncChatModel | ChatModel,
    tools: Toolbox | Iterable[ToolLike],
    task: str | Sequence[ChatMessage],
    budget: Budget | BudgetController,
    *,
    system: str | None = None,
    max_parallel: int = 8,
    exhaustion: ExhaustionMode | None = None,
    extension: ExtensionPolicy | None = None,
    judge: Judge | None = None,
    pricing: Pricing | None = None,
    name: str | None = None,
    metadata: dict[str, Any] | None = None,
    conversation_id: str | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> AgentRun:
    """Async twin of :func:`run_agent`.

    Uses ``model.acomplete`` when the model has it, else runs ``complete`` in a
    thread. Async tools run concurrently on the loop, sync tools in threads.

    Raises:
        The same as :func:`run_agent`.
    """
    acomplete = getattr(model, "acomplete", None)
    complete = getattr(model, "complete", None)
    if not callable(acomplete) and not callable(complete):
        raise ConfigError(f"model {model!r} has neither acomplete() nor complete()")
    loop = _open_loop(
        model, tools, task, budget, judge=judge, pricing=pricing, system=system,
        max_parallel=max_parallel, exhaustion=exhaustion, extension=extension, name=name,
        metadata=metadata, conversation_id=conversation_id,
    )  # fmt: skip

    async def call_model(req: ModelRequest) -> ModelResponse:
        kwargs: dict[str, Any] = {"notice": req.notice, "tool_choice": req.tool_choice}
        if callable(acomplete):
            response: ModelResponse = await acomplete(req.messages, req.tools, **kwargs)
            return response
        assert callable(complete)
        response = await asyncio.to_thread(complete, req.messages, req.tools, **kwargs)
        return response

    async with loop.episode:
        while (turn := loop.next_turn()) is not None:
            with turn:
                req = loop.request(turn)
                response = await turn.acall(functools.partial(call_model, req), sleep=sleep)
                batch = loop.on_response(turn, response)
                if batch is None:
                    break
                loop.on_outcomes(
                    batch, await arun_prepared([p.prepared for p in batch], max_parallel)
                )
    return loop.run_result()


def _raised_kind(exc: BaseException) -> MistakeKind:
    """The mistake kind a tool's exception names (``kind``, a :class:`MistakeKind`, as
    :class:`budgetmix.training.envs.tool_env.ToolMistake` carries), else ``tool_error``."""
    kind = getattr(exc, "kind", None)
    return kind if isinstance(kind, MistakeKind) else MistakeKind.TOOL_ERROR
