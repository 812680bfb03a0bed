"""One budgeted request, shared by the SDK wrappers and the HTTP transport.

:class:`TurnRequest` checks the price, records the outcomes of the tool calls the
request answers, charges the turn, and builds the body to send (notice injected,
tools off on a grace turn); :meth:`TurnRequest.finish` records the response's
usage, cost and mistakes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from budgetmix import semconv as sc
from budgetmix.adapters._placement import place_observation_notice
from budgetmix.adapters._request_checks import (
    MAX_REQUEST_DEPTH,
    check_request,
    plain_json,
    request_problem,
    send_as_is,
)
from budgetmix.adapters._server import describe_turn
from budgetmix.adapters._tool_checks import tool_call_problem, tool_schemas
from budgetmix.adapters._tool_spans import calls_received, results_sent
from budgetmix.adapters._wire import (
    Accumulator,
    ParsedResponse,
    WireKind,
    accumulator,
    history_key,
)
from budgetmix.adapters._wire.common import invalid_usage_estimate
from budgetmix.events import MistakeKind
from budgetmix.genai_content import finish_reason
from budgetmix.policy import notice_placement

if TYPE_CHECKING:
    from budgetmix.adapters.pricing import Pricing
    from budgetmix.episode import Episode
    from budgetmix.steps import Turn

#: The request checks live in :mod:`budgetmix.adapters._request_checks`; re-exported here
#: for the wrappers and the transport.
__all__ = ["MAX_REQUEST_DEPTH", "TurnRequest", "plain_json", "request_problem", "send_as_is"]

_log = logging.getLogger(__name__)


def _with_notice(episode: Episode, turn: Turn, kind: WireKind, history: Any) -> Any:
    """A new history (the caller's is never touched) with the notice where the notice
    policy places it: a message of its own for this request (``"ephemeral"``), or in
    the latest observation with the episode's earlier notices back in theirs
    (``"observation"``, :mod:`budgetmix.adapters._placement`)."""
    raw = history if isinstance(history, str) and kind == "responses" else history or ()
    if notice_placement(episode.controller.notice) == "observation":
        return place_observation_notice(episode, kind, raw, turn.notice)
    if kind == "chat":
        return turn.openai_chat(raw)
    if kind == "responses":
        return turn.openai_responses(raw)
    return turn.anthropic(raw)


class TurnRequest:
    """One budgeted request: checks the price, records request-side mistakes, charges
    the turn, and builds the body to send (notice injected, tools off on a grace turn).

    ``sdk_call``: ``body`` is the keyword arguments of an SDK's ``create`` (not encoded
    yet): their content is checked to encode as JSON too (the HTTP transport checks the
    depth of the body it reads itself, before choosing the episode). ``url``: where the
    request goes (the client's base URL, or the request's), for the turn's provider and
    server attributes.

    Raises (from the constructor):
        ConfigError: the request has a shape budgetmix cannot add the notice to, content
            that cannot be encoded (``sdk_call``), or the episode has a cost limit and
            the model has no known price; nothing was charged or sent.
        BudgetExhausted / EarlyStopped: the turn was refused; nothing may be sent.
    """

    __slots__ = (
        "_original",
        "_plain",
        "_sdk_transform",
        "body",
        "episode",
        "kind",
        "model",
        "pricing",
        "stream",
        "turn",
    )

    def __init__(
        self,
        episode: Episode,
        kind: WireKind,
        body: Mapping[str, Any],
        pricing: Pricing,
        *,
        sdk_transform: bool = False,
        sdk_call: bool = False,
        url: Any = None,
    ) -> None:
        self._plain = check_request(kind, body, sdk_call=sdk_call)
        model = body.get("model")
        self.model = model if isinstance(model, str) else None
        if episode.ledger.limit("cost_usd") is not None:
            pricing.require(self.model)
        results_sent(episode, kind, body)  # before the turn: they answer the last one
        self.episode = episode
        self.kind: WireKind = kind
        self.pricing = pricing
        self._sdk_transform = sdk_transform
        turn = episode.begin_turn(model=self.model)
        describe_turn(turn, kind, url)
        self.turn: Turn = turn
        self._original = body
        self.body = out = dict(body)
        key = history_key(kind)
        out[key] = _with_notice(episode, turn, kind, out.get(key))
        if turn.grace and out.get("tools"):
            # tools stay declared (prompt cache) but the wrap-up turn may not call them
            out["tool_choice"] = {"type": "none"} if kind == "anthropic" else "none"
        self.stream = out.get("stream") is True
        if self.stream and kind == "chat":
            # a streamed completion reports usage (in a final chunk) only when asked to
            opts = out.get("stream_options")
            out["stream_options"] = {
                **(opts if isinstance(opts, dict) else {}),
                "include_usage": True,
            }

    def sdk_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for the provider SDK's ``create``: :attr:`body` plus ``overrides``.

        The SDKs (Stainless-generated) transform every message against a union of
        TypedDicts before encoding it, 0.1–0.2 ms per message, and for plain JSON
        data (dicts with string keys, lists, strings, numbers, booleans, ``None``) that
        transform is the identity. So when the caller's history is plain JSON, the
        history with the notice rides in ``extra_body`` (documented to replace top-level
        keys of the JSON body) and the SDK's own argument is left empty: the bytes sent
        are those the SDK would send, without the transform. With ``sdk_transform`` the
        SDK gets the caller's list as an unwrapped call does (and transforms it, for
        code that patches the SDK's ``create`` and reads it); only the notice skips it.
        Anything else (pydantic objects, generators, file handles) takes the SDK's own
        path, notice included.
        """
        key = history_key(self.kind)
        kwargs = {**self.body, **overrides}
        original = self._original.get(key)
        plain = self._plain  # found before the charge when the SDK's arguments were checked
        if plain is None:
            plain = isinstance(original, list) and plain_json(original)
        if plain and isinstance(original, list):
            send_as_is(kwargs, key, sdk_sees=original if self._sdk_transform else [])
        return kwargs

    def accumulator(self) -> Accumulator:
        """A stream accumulator for this request's wire kind."""
        return accumulator(self.kind)

    def _charged_usage(self, parsed: ParsedResponse) -> tuple[int, int]:
        """The input and output tokens to charge: the provider's counts; a usage value
        that is no count is charged by estimate and said (event and warning)."""
        turn = self.turn
        inp, out = parsed.input_tokens, parsed.output_tokens
        if parsed.usage_invalid:  # never silently 0: charged by an estimate, and said
            inp, out = invalid_usage_estimate(parsed, self.body)
            what = "; ".join(parsed.usage_invalid)[:300]
            attrs = {sc.BM_WIRE: self.kind, sc.BM_USAGE_INVALID: what}
            turn.add_event(sc.BM_EVENT_USAGE_INVALID, attrs)
            _log.warning(
                "budgetmix: the provider's usage is no count (%s); charged %d input and "
                "%d output tokens by estimate",
                what,
                inp,
                out,
            )
        elif inp is None and out is None:
            turn.add_event(sc.BM_EVENT_USAGE_MISSING, {sc.BM_WIRE: self.kind})
        return inp or 0, out or 0

    def finish(self, parsed: ParsedResponse) -> None:
        """Record usage, cost, finish reasons and the response's mistakes on the turn."""
        turn, ep = self.turn, self.episode
        model = parsed.model or self.model
        inp, out = self._charged_usage(parsed)
        read, write = parsed.cache_read_tokens, parsed.cache_write_tokens
        cost = self.pricing.cost(model, inp, out, cache_read=read, cache_write=write) or 0.0
        turn.usage(
            input_tokens=inp,
            output_tokens=out,
            cost_usd=cost,
            response_model=parsed.model,
            finish_reasons=parsed.finish_reasons or None,
            cache_read_tokens=read,
            cache_write_tokens=write,
            response_id=parsed.response_id,
        )
        if parsed.truncated:
            turn.add_event(sc.BM_EVENT_RESPONSE_TRUNCATED, {sc.BM_WIRE: self.kind})
        if parsed.empty:
            ep.record_mistake(MistakeKind.MODEL_FORMAT_ERROR, detail="response has no output")
        calls = list(zip(parsed.tool_calls, parsed.call_arguments, strict=True))
        schemas = tool_schemas(self.kind, self._original.get("tools")) if calls else None
        problems: dict[str, str] = {}
        for call, arguments in calls:
            problem = tool_call_problem(call.name, arguments, schemas, truncated=parsed.truncated)
            if problem is not None:  # a call without an id ("") has none to record
                ep.record_mistake(
                    problem[0], tool=call.name, call_id=call.id or None, detail=problem[1]
                )
                problems[call.id] = str(problem[0])
        calls_received(ep, turn, parsed, problems)
        message: dict[str, Any] = {"role": "assistant", "content": parsed.text}
        if calls:
            message["tool_calls"] = [
                {"id": c.id or None, "name": c.name, "arguments": arguments}
                for c, arguments in calls
            ]
        ep.record_message(message)
        if ep.controller.capture_content:
            reason = parsed.finish_reasons[0] if parsed.finish_reasons else None
            if calls and finish_reason(reason) == "stop":  # Responses: "completed"
                reason = "tool_call"
            turn.record_content(
                input_messages=self.body.get("messages", self.body.get("input")),
                output_messages=[message],
                system_instructions=self.body.get("system", self.body.get("instructions")),
                finish_reason=reason,
            )
