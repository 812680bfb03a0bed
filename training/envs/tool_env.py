"""Tool-calling environments: tools declared as typed methods, every step labelled.

A :class:`ToolCallEnvironment` is played through tool calls: ``reset(seed)``
gives the task (the first user message), ``tool_specs()`` the tools the model
is shown, ``call_tool(name, arguments)`` runs one call of the model (its raw
JSON arguments) and ``respond(text)`` takes a reply with no tool call. Each
returns a :class:`~budgetmix.environment.StepResult` whose observation is the
tool message (or, for a reply, the next user message) and whose label says
whether the step was valid, made progress or was a mistake.

:class:`ToolEnv` is the base to write one with. Tools are methods marked with
:func:`env_tool`; their schema and the validation of the model's arguments are
:class:`budgetmix.adapters.tools.Tool`'s, the code ``controller.tool`` and
``run_agent`` use at run time, so the model sees the same schema in training
and in deployment. Per call:

* an unknown tool name: ``mistake="unknown_tool"``, ``valid=False``;
* arguments that are not JSON or do not match the schema:
  ``mistake="invalid_tool_arguments"``, ``valid=False``;
* a tool that raises :class:`ToolMistake`: the mistake kind it names
  (``valid=True``: the call was well formed, the environment refused it;
  ``valid=False`` for ``model_format_error``);
* a tool that raises anything else: ``mistake="tool_error"``;
* the model reads for each what ``run_agent`` would show it: the same
  validation messages, ``Error: <Type>: <message>`` for a tool that raised;
* otherwise the tool's return value is the observation; a :class:`ToolResult`
  also says whether it made progress and whether it ended the episode.

A recovery is the first successful step after mistakes, counted by whoever
plays the episode (the controller, the evaluator) from these labels.

The same environment runs in three places: training rollouts (``call_tool`` /
``respond``), the evaluator's text protocol (:meth:`ToolEnv.step` reads Hermes
``<tool_call>`` blocks from the action text) and deployment under the
controller (:meth:`ToolEnv.controller_tools` gives the bound tools for
``run_agent(model, env.controller_tools(), task, budget, judge=env.judge)``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, overload, runtime_checkable

from budgetmix.adapters.base import ToolCallRequest, ToolSpec
from budgetmix.adapters.loop import EndEpisode
from budgetmix.adapters.tools import (
    Tool,
    ToolArgumentError,
    Toolbox,
    render_tool_error,
    render_tool_result,
)
from budgetmix.environment import EnvStateError, StepLabel, StepResult
from budgetmix.events import MistakeKind, mistake_kind
from budgetmix.exceptions import BudgetmixError, ConfigError

__all__ = [
    "ToolCallEnvironment",
    "ToolEnv",
    "ToolMistake",
    "ToolResult",
    "env_tool",
    "is_tool_env",
]

F = TypeVar("F", bound=Callable[..., Any])

_MARK = "__budgetmix_env_tool__"

#: What the model reads when it calls a tool after a tool ended the episode (deployment).
EPISODE_OVER = "The task is over; reply with your final answer, without a tool call."


@runtime_checkable
class ToolCallEnvironment(Protocol):
    """An environment played through tool calls (see the module docstring)."""

    name: str

    def instructions(self) -> str:
        """The task statement (the system message)."""
        ...

    def reset(self, seed: int) -> str:
        """Start an episode for ``seed``; returns the first user message (the task)."""
        ...

    def tool_specs(self) -> Sequence[ToolSpec]:
        """The tools the model is shown, in a fixed order."""
        ...

    def call_tool(self, name: str, arguments: str) -> StepResult:
        """Run one tool call; ``arguments`` is the JSON text the model wrote. The
        observation is the tool message's content."""
        ...

    def respond(self, text: str) -> StepResult:
        """Take a reply with no tool call; the observation (if not done) goes back as a
        user message."""
        ...


def is_tool_env(env: object) -> bool:
    """Whether ``env`` is a :class:`ToolCallEnvironment` (has every method of the protocol)."""
    return isinstance(env, ToolCallEnvironment)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """What a tool method may return instead of a plain value.

    ``output`` is shown to the model (a string as is, anything else as JSON);
    ``done`` ends the episode, ``success`` says how; ``reward`` defaults to 1.0 on
    success and 0.0 otherwise; ``progress`` and ``detail`` go to the step's label.
    """

    output: Any = ""
    progress: bool = False
    done: bool = False
    success: bool = False
    reward: float | None = None
    detail: str = ""


class ToolMistake(BudgetmixError):
    """Raised by a tool method: the call was well formed but is a mistake of ``kind``.

    The model reads ``Error: ToolMistake: <message>`` (what ``run_agent`` shows for
    any tool that raises, so training and deployment show the same text). ``kind`` is
    a :class:`budgetmix.MistakeKind` (or its value); the default, ``env_action_failed``,
    is an action the environment refused (a move into a wall, a key that does not exist).

    Raises:
        ConfigError: ``kind`` is not a mistake kind.
    """

    def __init__(self, message: str, kind: MistakeKind | str = MistakeKind.ENV_ACTION_FAILED):
        super().__init__(message)
        self.kind = mistake_kind(kind)


@overload
def env_tool(fn: F, /) -> F: ...


@overload
def env_tool(
    *, name: str | None = None, description: str | None = None, strict: bool = True
) -> Callable[[F], F]: ...


def env_tool(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = True,
) -> Any:
    """Mark a method of a :class:`ToolEnv` subclass as a tool (bare or with options).

    The method stays an ordinary method. Its schema comes from its type hints and
    its docstring exactly as :func:`budgetmix.adapters.tools.tool` derives one
    (``strict`` validates without coercion); it is built when the class is.
    """
    options = {"name": name, "description": description, "strict": strict}

    def mark(f: F) -> F:
        setattr(f, _MARK, options)
        return f

    return mark(fn) if fn is not None else mark


def _class_tool(fn: Callable[..., Any], options: dict[str, Any], owner: str) -> Tool:
    """The :class:`Tool` of an unbound method: its signature without ``self``."""
    if inspect.iscoroutinefunction(fn):
        raise ConfigError(f"{owner}.{fn.__name__}: environment tools must be synchronous")
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not params or params[0].kind not in positional:
        raise ConfigError(
            f"{owner}.{fn.__name__}: an environment tool is a method (the instance first)"
        )

    @functools.wraps(fn)
    def proxy(**kwargs: Any) -> Any:  # pragma: no cover - replaced per instance
        raise AssertionError("unbound environment tool")

    proxy.__signature__ = signature.replace(parameters=params[1:])  # type: ignore[attr-defined]
    return Tool.from_function(proxy, **options)


class ToolEnv:
    """Base class of tool-calling environments (implements :class:`ToolCallEnvironment`
    and the text :class:`~budgetmix.environment.Environment` protocol).

    A subclass sets ``name``, writes :meth:`instructions` and :meth:`start` (the
    episode's task for a seed), marks its tools with :func:`env_tool` and may
    override :meth:`reply` (what a reply without a tool call does; by default it
    ends the episode, a success only if a tool already succeeded).

    Public attributes: ``steps`` (tool calls and replies taken this episode),
    ``done``, ``success``.

    Raises:
        ConfigError: (when the class is defined) an async tool, a tool that is not
            a method, two tools with one name, or a parameter type with no schema.
    """

    name: str = "tool_env"
    _tool_templates: ClassVar[dict[str, tuple[str, Tool]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name == ToolEnv.name:  # not named by the class or a base: its class name
            cls.name = cls.__name__
        found: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if getattr(value, _MARK, None) is not None:
                    found[attr] = value  # an override keeps its base's place
                elif attr in found:
                    del found[attr]  # overridden by a plain method: no longer a tool
        templates: dict[str, tuple[str, Tool]] = {}
        for attr, fn in found.items():
            built = _class_tool(fn, getattr(fn, _MARK), cls.__name__)
            if built.name in templates:
                raise ConfigError(f"{cls.__name__}: two tools are named {built.name!r}")
            templates[built.name] = (attr, built)
        cls._tool_templates = templates

    # -- what a subclass writes --------------------------------------------------------
    def instructions(self) -> str:
        """The task statement (the system message); override it."""
        return ""

    def start(self, seed: int) -> str:
        """Set up the episode for ``seed`` and return its task; override it."""
        raise NotImplementedError(f"{type(self).__name__} must define start(seed)")

    def reply(self, text: str) -> ToolResult:
        """What a reply with no tool call does: by default it ends the episode (a success
        only when a tool already marked one). Override for a final-answer task; raise
        :class:`ToolMistake` for a reply that is a mistake (the episode goes on, the
        message is the next user message)."""
        return ToolResult(
            output="The episode ended: you replied without calling a tool.",
            done=True,
            success=self.success,
            detail="replied without a tool call",
        )

    # -- the protocol -----------------------------------------------------------------
    @property
    def toolbox(self) -> Toolbox:
        """This environment's tools, bound to it (built once per instance)."""
        box: Toolbox | None = self.__dict__.get("_toolbox")
        if box is None:
            box = Toolbox(
                dataclasses.replace(t, fn=getattr(self, attr))
                for attr, t in self._tool_templates.values()
            )
            self.__dict__["_toolbox"] = box
        return box

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The tools the model is shown, in declaration order (base class first)."""
        return self.toolbox.specs

    def reset(self, seed: int) -> str:
        """Start an episode; returns :meth:`start`'s task text."""
        self.steps = 0
        self.done = False
        self.success = False
        self._started = True
        return self.start(seed)

    def call_tool(self, name: str, arguments: str) -> StepResult:
        """Validate and run one tool call; every outcome is a labelled :class:`StepResult`.

        Raises:
            EnvStateError: before ``reset`` or after the episode ended.
        """
        self._begin_step()
        prepared = self.toolbox.prepare(ToolCallRequest(name=name, arguments=arguments))
        if isinstance(prepared, ToolArgumentError):
            label = StepLabel(valid=False, mistake=str(prepared.kind), detail=name[:80])
            return self._result(prepared.message, label, tool=name)
        try:
            value = prepared.invoke()
        except ToolMistake as exc:
            return self._result(render_tool_error(exc), _mistake_label(exc), tool=name)
        except Exception as exc:
            label = StepLabel(mistake=str(MistakeKind.TOOL_ERROR), detail=type(exc).__name__)
            return self._result(render_tool_error(exc), label, tool=name)
        return self._outcome(value, tool=name)

    def respond(self, text: str) -> StepResult:
        """Take a reply with no tool call (:meth:`reply` decides what it does).

        Raises:
            EnvStateError: before ``reset`` or after the episode ended.
        """
        self._begin_step()
        try:
            value = self.reply(text)
        except ToolMistake as exc:  # the reply was a mistake; the episode goes on
            return self._result(str(exc), _mistake_label(exc), tool=None)
        return self._outcome(value, tool=None)

    def step(self, action: str) -> StepResult:
        """The text protocol: run the Hermes ``<tool_call>`` blocks of ``action`` in order
        (one result for all: observations joined, the first mistake labelled), or take
        the text as a reply when it has none.

        Raises:
            EnvStateError: before ``reset`` or after the episode ended.
        """
        from budgetmix.adapters.local import parse_tool_calls

        content, calls = parse_tool_calls(action)
        if not calls:
            return self.respond(content)
        results: list[StepResult] = []
        for call in calls:
            results.append(self.call_tool(call.name, call.arguments))
            if self.done:
                break
        return _merged(results)

    # -- deployment -------------------------------------------------------------------
    def controller_tools(self) -> list[Tool]:
        """The tools bound to this environment for ``run_agent`` / ``controller.tool``.

        Each call is a step of this environment (same validation, same state, the
        same text for the model): a :class:`ToolMistake` propagates (``run_agent``
        records it with its own ``kind``, as training labels it), so does any other
        exception (a ``tool_error``), anything else returns the observation. A call
        whose result ends the episode returns it as
        :class:`~budgetmix.adapters.loop.EndEpisode`: ``run_agent`` ends the episode
        there with the environment's verdict, without another model call (the
        episode-end rule of training rollouts, docs/layout.md). Later calls of the
        same reply answer :data:`EPISODE_OVER`. Pass ``judge=env.judge`` so an episode
        that ends with a reply is judged by the environment.
        """
        return [
            dataclasses.replace(t, fn=functools.partial(self._deployed_call, t.name))
            for t in self.toolbox.values()
        ]

    def judge(self, answer: str) -> bool:
        """Whether the episode succeeded, given the model's final reply (``run_agent``'s
        ``judge``): the environment's verdict when a tool ended it, else :meth:`respond`'s."""
        if self.done:
            return self.success
        return self.respond(answer).success

    def _deployed_call(self, tool_name: str, /, **arguments: Any) -> Any:
        # positional-only: a tool may have a parameter called ``tool_name`` (or ``name``)
        with self.__dict__.setdefault("_deployed_lock", threading.Lock()):
            if self.done:
                return EPISODE_OVER
            self._begin_step()
            value = self.toolbox[tool_name].fn(**arguments)  # the loop shows what it raises
            result = self._outcome(value, tool=tool_name)
        if result.done:  # the episode ends with this result, as a training rollout does
            return EndEpisode(result.observation, success=result.success)
        return result.observation

    # -- internals --------------------------------------------------------------------
    def _begin_step(self) -> None:
        if not getattr(self, "_started", False):
            raise EnvStateError("call reset() first")
        if self.done:
            raise EnvStateError("the episode has ended; call reset()")
        self.steps += 1

    def _outcome(self, value: Any, *, tool: str | None) -> StepResult:
        result = value if isinstance(value, ToolResult) else ToolResult(output=value)
        if result.done:
            self.done = True
            self.success = result.success
        label = StepLabel(progress=result.progress, detail=result.detail)
        reward = result.reward
        if reward is None:
            reward = 1.0 if self.success else 0.0
        return self._result(render_tool_result(result.output), label, tool=tool, reward=reward)

    def _result(
        self, observation: str, label: StepLabel, *, tool: str | None, reward: float = 0.0
    ) -> StepResult:
        return StepResult(
            observation=observation,
            reward=reward,
            done=self.done,
            success=self.success,
            label=label,
            info={"step": self.steps, "tool": tool},
        )


def _mistake_label(exc: ToolMistake) -> StepLabel:
    """A refused step's label: valid unless the mistake is the reply's format."""
    valid = exc.kind is not MistakeKind.MODEL_FORMAT_ERROR
    return StepLabel(valid=valid, mistake=str(exc.kind), detail=str(exc)[:200])


def _merged(results: Sequence[StepResult]) -> StepResult:
    """One result for the calls of one text step: the first mistake, any progress."""
    last = results[-1]
    mistakes = [r.label for r in results if r.label.mistake is not None]
    first = mistakes[0] if mistakes else None
    label = StepLabel(
        valid=all(r.label.valid for r in results),
        progress=any(r.label.progress for r in results),
        mistake=first.mistake if first else None,
        detail=first.detail if first else last.label.detail,
    )
    return StepResult(
        observation="\n".join(r.observation for r in results),
        reward=last.reward,
        done=last.done,
        success=last.success,
        label=label,
        info={**last.info, "calls": len(results)},
    )
