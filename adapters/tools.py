"""Tools as plain typed Python functions: JSON schema from type hints, argument validation.

A :class:`Tool` wraps a sync or async function. Its :class:`ToolSpec` (what
the model is shown) is derived from the signature by pydantic: ``int``,
``float``, ``str``, ``bool``, ``list[...]``, ``dict[str, ...]``, ``Optional``,
``Literal``, ``Enum`` and pydantic models all work; a parameter with a
default is not required; the docstring's first paragraph is the description
and a Google-style ``Args:`` section describes the parameters.

:meth:`Toolbox.prepare` checks one tool call of the model before anything
runs: arguments that are not a JSON object give ``invalid_tool_arguments``, so
do arguments that do not match the schema (strict: ``"5"`` is not an
integer), and a name the toolbox lacks gives ``unknown_tool``. The error text
is written for the model to read and correct itself.

:func:`run_prepared` / :func:`arun_prepared` run the valid calls of a batch
concurrently and return their outcomes in call order.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, get_type_hints, overload

import pydantic
from budgetmix.adapters._wire.common import repr_bounded
from budgetmix.adapters.base import ToolCallRequest, ToolSpec
from budgetmix.events import MistakeKind
from budgetmix.exceptions import BudgetExhausted, ConfigError, EarlyStopped
from pydantic_core import PydanticSerializationError

__all__ = [
    "PreparedCall",
    "Tool",
    "ToolArgumentError",
    "ToolOutcome",
    "Toolbox",
    "arun_prepared",
    "render_tool_error",
    "render_tool_result",
    "run_prepared",
    "sendable_text",
    "tool",
]

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _split_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (first paragraph) and per-parameter text of a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line):
            break
        description.append(line.strip())
    params: dict[str, str] = {}
    in_args, current = False, ""
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if not in_args:
            continue
        if line and not line[0].isspace():
            break  # next section (Returns:, Raises:, ...)
        m = _ARG_LINE.match(line)
        if m:
            current = m.group(1).lstrip("*")
            params[current] = m.group(2).strip()
        elif current and line.strip():
            params[current] += " " + line.strip()
    return " ".join(description), params


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's generated ``title`` keys: noise the model pays tokens for.

    A property *named* ``title`` is kept: only string-valued ``title`` keys of
    schema objects are dropped, never keys of a ``properties`` mapping.
    """
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs") and isinstance(value, dict):
                out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
            else:
                out[key] = _strip_titles(value)
        return out
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    return schema


def _arguments_model(
    fn: Callable[..., Any], name: str, param_docs: Mapping[str, str]
) -> type[pydantic.BaseModel]:
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:  # unresolvable forward references
        raise ConfigError(f"tool {name!r}: cannot resolve type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(f"tool {name!r}: *args/**kwargs cannot be described to a model")
        if param.kind is param.POSITIONAL_ONLY:
            raise ConfigError(f"tool {name!r}: positional-only parameter {param.name!r}")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (
            annotation,
            pydantic.Field(default, description=param_docs.get(param.name)),
        )
    try:
        model: type[pydantic.BaseModel] = pydantic.create_model(
            f"{name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
    except pydantic.PydanticSchemaGenerationError as exc:
        raise ConfigError(f"tool {name!r}: unsupported parameter type: {exc}") from exc
    return model


@dataclass(frozen=True, slots=True)
class ToolArgumentError:
    """Why a tool call cannot run: ``kind`` is the mistake, ``message`` is shown to the model."""

    kind: MistakeKind
    message: str


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A tool call whose arguments validated: ready to run."""

    request: ToolCallRequest
    tool: Tool
    arguments: Mapping[str, Any]

    def invoke(self) -> Any:
        """Call the function (an async tool returns its coroutine)."""
        return self.tool.fn(**self.arguments)


@dataclass(frozen=True, slots=True)
class Tool:
    """A Python function the model may call, with the spec the model is shown.

    Build with :func:`tool` (decorator) or :meth:`from_function`.
    """

    fn: Callable[..., Any]
    spec: ToolSpec
    is_async: bool
    strict: bool = True
    _arguments: type[pydantic.BaseModel] | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        """The tool's name, as the model calls it."""
        return self.spec.name

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        strict: bool = True,
    ) -> Tool:
        """Describe ``fn`` as a tool.

        ``strict`` validates arguments without coercion (``"5"`` is not an int).

        Raises:
            ConfigError: the function takes ``*args``/``**kwargs`` or positional-only
                parameters, or a parameter type has no JSON schema.
        """
        tool_name = name or getattr(fn, "__name__", "")
        if not tool_name or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
            raise ConfigError(f"tool name must match [A-Za-z0-9_-]{{1,64}}, got {tool_name!r}")
        summary, param_docs = _split_docstring(inspect.getdoc(fn))
        model = _arguments_model(fn, tool_name, param_docs)
        schema = _strip_titles(model.model_json_schema())
        schema.setdefault("properties", {})
        spec = ToolSpec(name=tool_name, description=description or summary, parameters=schema)
        return cls(
            fn=fn,
            spec=spec,
            is_async=inspect.iscoroutinefunction(fn),
            strict=strict,
            _arguments=model,
        )

    def validate(self, request: ToolCallRequest) -> PreparedCall | ToolArgumentError:
        """Parse and validate the model's raw JSON arguments for this tool."""
        raw = request.arguments.strip() or "{}"  # some providers send "" for no arguments
        try:
            decoded = json.loads(raw)
        except ValueError as exc:
            return ToolArgumentError(
                MistakeKind.INVALID_TOOL_ARGUMENTS,
                f"Arguments for tool {self.name!r} are not valid JSON ({exc}). "
                "Send a JSON object matching the tool's schema.",
            )
        except RecursionError:
            return ToolArgumentError(
                MistakeKind.INVALID_TOOL_ARGUMENTS,
                f"Arguments for tool {self.name!r} nest too deep to read as JSON. "
                "Send a JSON object matching the tool's schema.",
            )
        if not isinstance(decoded, dict):
            return ToolArgumentError(
                MistakeKind.INVALID_TOOL_ARGUMENTS,
                f"Arguments for tool {self.name!r} must be a JSON object, "
                f"got {type(decoded).__name__}.",
            )
        assert self._arguments is not None
        try:
            # JSON mode: strict still accepts enum values and arrays for tuples.
            parsed = self._arguments.model_validate_json(raw, strict=self.strict)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
                for err in exc.errors(include_url=False)
            )
            return ToolArgumentError(
                MistakeKind.INVALID_TOOL_ARGUMENTS,
                f"Invalid arguments for tool {self.name!r}: {problems}.",
            )
        arguments = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        return PreparedCall(request, self, arguments)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, strict: bool = True
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = True,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator (bare or with options) turning a function into a :class:`Tool`.

    Raises:
        ConfigError: see :meth:`Tool.from_function`.
    """
    if fn is not None:
        return Tool.from_function(fn, name=name, description=description, strict=strict)

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description, strict=strict)

    return wrap


class Toolbox(Mapping[str, Tool]):
    """The tools of one agent, by name: specs for the model, validation of its calls.

    Raises:
        ConfigError: two tools share a name, or an entry is neither a Tool nor a function.
    """

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for entry in tools:
            t = entry if isinstance(entry, Tool) else None
            if t is None:
                if not callable(entry):
                    raise ConfigError(f"tools must be functions or Tool, got {entry!r}")
                t = Tool.from_function(entry)
            if t.name in self._tools:
                raise ConfigError(f"two tools are named {t.name!r}")
            self._tools[t.name] = t

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """What the model is shown, in registration order."""
        return tuple(t.spec for t in self._tools.values())

    def prepare(self, request: ToolCallRequest) -> PreparedCall | ToolArgumentError:
        """Resolve and validate one call of the model; nothing runs."""
        found = self._tools.get(request.name)
        if found is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return ToolArgumentError(
                MistakeKind.UNKNOWN_TOOL,
                f"Unknown tool {request.name!r}. Available tools: {known}.",
            )
        return found.validate(request)


# -- running validated calls -----------------------------------------------------------
#: A tool's outcome: ``(True, result)`` or ``(False, exception)``.
ToolOutcome = tuple[bool, Any]
Prepared = PreparedCall | ToolArgumentError


def _invoke_sync(prepared: PreparedCall) -> ToolOutcome:
    try:
        value = prepared.invoke()
        if inspect.isawaitable(value):
            # A worker thread has no running loop, so a private one is safe here.
            value = asyncio.run(_await(value))
        return True, value
    except (BudgetExhausted, EarlyStopped):
        raise
    except Exception as exc:
        return False, exc


async def _await(value: Awaitable[Any]) -> Any:
    return await value


def run_prepared(
    calls: Sequence[Prepared], pool: Callable[[], ThreadPoolExecutor]
) -> list[ToolOutcome | None]:
    """Run the valid calls of a batch concurrently on ``pool()``; outcomes in call order.

    ``None`` stands for a call that did not validate (nothing ran). Each call runs
    in a copy of the caller's context, so tools see ``current_episode()``. A
    single valid call runs inline (no thread hop). Budget stops raised by a tool
    propagate; any other exception becomes its outcome.
    """
    runnable = [(i, c) for i, c in enumerate(calls) if isinstance(c, PreparedCall)]
    outcomes: list[ToolOutcome | None] = [None] * len(calls)
    if not runnable:
        return outcomes
    if len(runnable) == 1:
        i, prepared = runnable[0]
        outcomes[i] = _invoke_sync(prepared)
        return outcomes
    executor = pool()
    futures = [
        (i, executor.submit(contextvars.copy_context().run, _invoke_sync, prepared))
        for i, prepared in runnable
    ]
    for i, future in futures:
        outcomes[i] = future.result()
    return outcomes


async def _invoke_async(prepared: PreparedCall, limit: asyncio.Semaphore) -> ToolOutcome:
    async with limit:
        try:
            if prepared.tool.is_async:
                value = await prepared.invoke()
            else:
                value = await asyncio.to_thread(prepared.invoke)
                if inspect.isawaitable(value):
                    value = await value
            return True, value
        except (BudgetExhausted, EarlyStopped):
            raise
        except Exception as exc:
            return False, exc


async def arun_prepared(calls: Sequence[Prepared], max_parallel: int) -> list[ToolOutcome | None]:
    """Async twin of :func:`run_prepared`: async tools on the loop, sync tools in threads,
    at most ``max_parallel`` at once."""
    limit = asyncio.Semaphore(max_parallel)
    runnable = [(i, c) for i, c in enumerate(calls) if isinstance(c, PreparedCall)]
    results = await asyncio.gather(*(_invoke_async(c, limit) for _, c in runnable))
    outcomes: list[ToolOutcome | None] = [None] * len(calls)
    for (i, _), outcome in zip(runnable, results, strict=True):
        outcomes[i] = outcome
    return outcomes


_ANY: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)


def render_tool_result(result: Any) -> str:
    """The text the model sees for a tool's return value (JSON unless it is a string).

    Always text that can be sent: a value JSON cannot hold is shown by ``str()``, one
    that cannot even be printed (nested too deep, a ``__str__`` that raises) by a
    bounded ``repr``, and a lone surrogate becomes U+FFFD (no SDK can encode it).
    """
    if isinstance(result, str):
        return sendable_text(result)
    try:
        return _ANY.dump_json(result).decode()
    except PydanticSerializationError:
        pass
    try:
        return sendable_text(str(result))
    except Exception:  # any __str__ may raise; the model still gets an answer
        return sendable_text(repr_bounded(result, 2000))


def render_tool_error(exc: BaseException) -> str:
    """The text the model sees when a tool raised."""
    try:
        text = f"Error: {type(exc).__name__}: {exc}"
    except Exception:  # an exception whose __str__ raises too
        text = f"Error: {type(exc).__name__}"
    return sendable_text(text[:2000])


def sendable_text(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD (what a UTF-8 decoder shows for it):
    JSON can escape one, but no SDK can encode it to send it back."""
    if text.isascii():
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
