"""Budgets for tools called over the Model Context Protocol (the official ``mcp`` SDK).

::

    from budgetmix.adapters.mcp import budgeted_session

    async with ClientSession(read, write) as raw:
        session = budgeted_session(raw, controller)      # the one line
        await session.initialize()
        async with controller.episode():
            await session.call_tool("search", {"q": "budget"})

Every ``call_tool`` of the returned session is one tool call of the episode, on the
same path as :meth:`BudgetController.tool <budgetmix.BudgetController.tool>`: a batch
of one, pre-checked before the request leaves (a tool-call limit, or the tool-less
grace turn, raises :class:`~budgetmix.BudgetExhausted` and the server never sees the
call), with its ``execute_tool {name}`` span and its outcome. A result with
``is_error`` set is a mistake: ``unknown_tool`` when the session listed the server's
tools (``list_tools`` through this session) and the name is not among them,
``invalid_tool_arguments`` when the arguments break the tool's listed input schema,
``tool_error`` otherwise; an exception from the call (a protocol error, a timeout, a
closed connection) is a ``tool_error`` and propagates unchanged. The caller always gets
the server's own result. When the call answers a tool call of a model response that the
budget read (a framework over ``budgeted(client)`` or the HTTP transport), it is recorded
under that call's id, and the wire gives it no second span nor a second outcome; one the
budget refused is a budget stop, so the error a framework sends back for it is no
``tool_error`` mistake.

Which episode is charged: ``target`` itself (an :class:`~budgetmix.Episode`), the
current episode of ``target`` (a :class:`~budgetmix.BudgetController`), or whatever
episode is current (``None``). A ``call_tool`` with no such episode is refused with
:class:`~budgetmix.ConfigError` rather than run without a budget. Every other method
(``initialize``, ``list_tools``, resources, prompts, ...) is the session's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from budgetmix._deps import require
from budgetmix.adapters._endpoints import Target, resolve_episode
from budgetmix.adapters._tool_spans import claim_call
from budgetmix.controller import BudgetController
from budgetmix.episode import Episode
from budgetmix.events import MistakeKind
from budgetmix.exceptions import ConfigError

__all__ = ["BudgetedSession", "budgeted_session"]

S = TypeVar("S")

#: The most characters of a failed result's text kept as the mistake's detail.
_DETAIL_CHARS = 500


class BudgetedSession:
    """A stand-in for an MCP client session whose ``call_tool`` is budgeted.

    Build it with :func:`budgeted_session`. ``async with`` enters the wrapped session
    and yields this wrapper.
    """

    def __init__(self, session: Any, target: Target) -> None:
        if not callable(getattr(session, "call_tool", None)):
            raise ConfigError(
                f"session must be an MCP client session with call_tool(), "
                f"got {type(session).__name__}"
            )
        if target is not None and not isinstance(target, (Episode, BudgetController)):
            raise ConfigError(
                "target must be an Episode, a BudgetController or None, "
                f"got {type(target).__name__}"
            )
        self._session = session
        self._target = target
        self._schemas: dict[str, Any] | None = None  # None: tools never listed here

    @property
    def session(self) -> Any:
        """The wrapped MCP session."""
        return self._session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def __aenter__(self) -> BudgetedSession:
        await self._session.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._session.__aexit__(*exc)

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        """The server's tools (the session's own call); their names and input schemas
        are kept to tell an unknown tool or invalid arguments from a failed tool."""
        result = await self._session.list_tools(*args, **kwargs)
        schemas = self._schemas if self._schemas is not None else {}
        for tool in getattr(result, "tools", None) or ():
            name = getattr(tool, "name", None)
            if isinstance(name, str):
                schemas[name] = getattr(tool, "input_schema", None)
        self._schemas = schemas
        return result

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """Call the tool as one tool call of the episode, pre-checked before it is sent.

        Raises:
            BudgetExhausted: no tool call is left (or this is the grace turn); nothing
                was sent.
            ConfigError: no episode to charge; nothing was sent.
        """
        episode = self._episode(name)
        # a call the model made in a response the budget read: recorded here, under its id
        (call,) = episode.tool_batch([name], [claim_call(episode, name)])
        call.record_arguments(arguments)
        with call:  # an exception is a tool_error mistake, and propagates
            result = await self._session.call_tool(name, arguments, *args, **kwargs)
            if getattr(result, "is_error", False):
                text = result_text(result)
                call.fail(text[:_DETAIL_CHARS], kind=self._mistake(name, arguments))
            else:
                call.succeed(result_text(result))
        return result

    def _episode(self, name: str) -> Episode:
        episode = resolve_episode(self._target)
        if episode is None:
            raise ConfigError(
                f"MCP tool call {name!r} outside an episode: call it inside "
                "`with controller.episode():` (or pass the Episode to budgeted_session); "
                "it was not sent"
            )
        return episode

    def _mistake(self, name: str, arguments: Mapping[str, Any] | None) -> MistakeKind:
        if self._schemas is None:
            return MistakeKind.TOOL_ERROR  # nothing listed: the server's word is all we have
        if name not in self._schemas:
            return MistakeKind.UNKNOWN_TOOL
        schema = self._schemas[name]
        if isinstance(schema, dict) and not _valid(schema, dict(arguments or {})):
            return MistakeKind.INVALID_TOOL_ARGUMENTS
        return MistakeKind.TOOL_ERROR


def _valid(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """Whether ``arguments`` satisfy a listed input schema (an unreadable schema passes)."""
    jsonschema: Any = require("jsonschema", "mcp")
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        return not any(True for _ in validator.iter_errors(arguments))
    except Exception:  # a schema we cannot apply: the server's word stands
        return True


def result_text(result: Any) -> str:
    """The text of a tool result's content blocks (what the model reads), else its
    structured content as ``str``."""
    parts = [
        block.text
        for block in getattr(result, "content", None) or ()
        if isinstance(getattr(block, "text", None), str)
    ]
    if parts:
        return "\n".join(parts)
    structured = getattr(result, "structured_content", None)
    return "" if structured is None else str(structured)


def budgeted_session(session: S, target: Target = None) -> S:
    """Budget the tool calls of an MCP client session (``mcp.ClientSession``, or
    anything with an async ``call_tool(name, arguments, ...)`` like ``mcp.Client``).

    Returns a :class:`BudgetedSession` that stands in for ``session`` (typed as it, for
    code that expects the session): see the module's documentation for what is
    charged and recorded.

    Raises:
        ConfigError: ``session`` has no ``call_tool``, or ``target`` is neither an
            Episode, a BudgetController nor ``None``.
    """
    return cast(S, BudgetedSession(session, target))
