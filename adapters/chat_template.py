"""One episode layout: chat messages and tools rendered by the model's own chat template.

:class:`ChatTemplate` is the one renderer of a local model's conversation, used
by :class:`~budgetmix.adapters.local.LocalChatModel` at deployment and by the
training rollouts (:mod:`budgetmix.training.rollouts.chat`), so a model is trained on
the tokens it is deployed on (docs/layout.md). It

* renders OpenAI-style chat messages (``{"role", "content"}``; assistant
  ``tool_calls`` as ``[{"id", "type": "function", "function": {"name",
  "arguments": <dict>}}]``; ``tool`` messages with ``tool_call_id``) with
  ``tokenizer.apply_chat_template(messages, tools=<Chat Completions tools>)``;
* parses generated text back into content and tool calls: the Hermes/Qwen
  ``<tool_call>{json}</tool_call>`` blocks, or the Llama-3.x bare JSON object
  ``{"name": ..., "parameters": ...}`` (chosen from the template, overridable); a
  template that renders tools in another syntax (Mistral's ``[TOOL_CALLS]``) has no
  parser: rendering with tools refuses, naming the known ones (so no reply is read
  with another parser);
* knows the stop ids: every ``generation_config.eos_token_id``, the tokenizer's
  EOS and the template's end-of-turn token (``<|im_end|>``, ``<|eot_id|>``).

A template that renders no ``tool_calls`` gets the calls written into the
assistant content as ``<tool_call>`` markup; one that ignores ``tools`` gets
them described in the system message, and tool results as user messages
wrapped in ``<tool_response>`` (the Hermes convention).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from budgetmix.adapters._wire import chat
from budgetmix.adapters.base import ChatMessage, ToolCallRequest, ToolSpec
from budgetmix.exceptions import ConfigError

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_FORMATS",
    "TOOL_CALL_OPEN",
    "ChatTemplate",
    "ToolCallFormat",
    "ToolsIn",
    "chat_rows",
    "parse_llama_json_calls",
    "parse_tool_calls",
]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
#: Llama 3.x's "a tool call follows" tag, stripped before reading the JSON.
_PYTHON_TAG = "<|python_tag|>"
#: End-of-turn tokens of known template families, looked for after an assistant turn.
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|eom_id|>")

ToolCallFormat = Literal["hermes", "llama_json"]
#: The tool-call parsers (``ChatTemplate(tool_call_format=...)``).
TOOL_CALL_FORMATS: tuple[ToolCallFormat, ...] = ("hermes", "llama_json")
ToolsIn = Literal["auto", "template", "system"]
Row = dict[str, Any]


def _implied_format(template: str, *, native: bool) -> ToolCallFormat | None:
    """The parser a template's own tool syntax implies (``None``: none budgetmix has); a
    template that renders no ``tool_calls`` (``native`` false) shows budgetmix's Hermes
    markup instead."""
    if "<tool_call>" in template or not native:
        return "hermes"
    if '"parameters"' in template:
        return "llama_json"
    return None


def _arguments_of(decoded: Mapping[str, Any]) -> str:
    args = decoded.get("arguments", decoded.get("parameters", {}))
    return args if isinstance(args, str) else json.dumps(args)


def parse_tool_calls(
    text: str, *, id_prefix: str = "call"
) -> tuple[str, tuple[ToolCallRequest, ...]]:
    """Split generated text into its content and its ``<tool_call>`` blocks (Hermes/Qwen).

    An unterminated final block (generation cut off) still counts as a call; a block
    whose body is not JSON is reported with its raw body as arguments, so the loop
    records ``invalid_tool_arguments`` rather than losing it.
    """
    calls: list[ToolCallRequest] = []
    for i, match in enumerate(_BLOCK.finditer(text)):
        body = match.group(1).strip()
        name, arguments = "", body
        try:
            decoded = json.loads(body)
        except ValueError:
            found = _NAME.search(body)
            name = found.group(1) if found else ""
        else:
            if isinstance(decoded, dict):
                name, arguments = str(decoded.get("name", "")), _arguments_of(decoded)
        calls.append(ToolCallRequest(id=f"{id_prefix}_{i}", name=name, arguments=arguments))
    content = _BLOCK.sub("", text).strip()
    return content, tuple(calls)


def parse_llama_json_calls(
    text: str, *, id_prefix: str = "call"
) -> tuple[str, tuple[ToolCallRequest, ...]]:
    """Read the Llama-3.x tool-call form: the whole reply is ``{"name": ..., "parameters": ...}``.

    A reply that starts like a call (``{"name"``) but is not valid JSON is still a call
    (raw arguments: ``invalid_tool_arguments``); anything else is plain content.
    """
    body = text.strip()
    if body.startswith(_PYTHON_TAG):
        body = body[len(_PYTHON_TAG) :].strip()
    if not body.startswith("{") or not _NAME.match(body[1:].lstrip()):
        return text.strip(), ()
    try:
        decoded = json.loads(body)
    except ValueError:
        found = _NAME.search(body)
        return "", (
            ToolCallRequest(
                id=f"{id_prefix}_0", name=found.group(1) if found else "", arguments=body
            ),
        )
    if not isinstance(decoded, dict):
        return text.strip(), ()
    call = ToolCallRequest(
        id=f"{id_prefix}_0", name=str(decoded.get("name", "")), arguments=_arguments_of(decoded)
    )
    return "", (call,)


def _json_arguments(arguments: str) -> Any:
    """The call's arguments as a JSON value for the template (raw text when not JSON)."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _markup(call: ToolCallRequest) -> str:
    args = _json_arguments(call.arguments)
    if isinstance(args, str):
        return f"{TOOL_CALL_OPEN}{call.arguments}{TOOL_CALL_CLOSE}"
    return f"{TOOL_CALL_OPEN}{json.dumps({'name': call.name, 'arguments': args})}{TOOL_CALL_CLOSE}"


def _tool_system_text(tools: Sequence[ToolSpec]) -> str:
    specs = [
        {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
        for t in tools
    ]
    return (
        "You may call tools. To call one, write "
        f'{TOOL_CALL_OPEN}{{"name": <tool name>, "arguments": {{...}}}}{TOOL_CALL_CLOSE}.\n'
        f"Tools: {json.dumps(specs)}"
    )


def chat_rows(messages: Sequence[ChatMessage]) -> list[Row]:
    """Neutral messages as OpenAI-style chat rows (tool-call arguments as JSON values)."""
    rows: list[Row] = []
    for m in messages:
        row: Row = {"role": m.role, "content": m.content}
        if m.tool_calls:
            row["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _json_arguments(c.arguments)},
                }
                for c in m.tool_calls
            ]
        if m.role == "tool":
            row["tool_call_id"] = m.tool_call_id or ""
            if m.name:
                row["name"] = m.name
        rows.append(row)
    return rows


def _calls_of(row: Mapping[str, Any]) -> list[ToolCallRequest]:
    calls = []
    for c in row.get("tool_calls") or ():
        fn = c.get("function", c)
        args = fn.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args)
        calls.append(ToolCallRequest(id=str(c.get("id", "")), name=str(fn["name"]), arguments=text))
    return calls


def _wire_row(row: Row) -> Row:
    """An assistant row as a server with this template sees it: Chat Completions'
    JSON-text ``arguments`` decoded (as vLLM and llama.cpp do) and ``None`` content ``""``."""
    calls = []
    for c in row["tool_calls"]:
        fn = c.get("function")
        if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
            c = {**c, "function": {**fn, "arguments": _json_arguments(fn["arguments"])}}
        calls.append(c)
    return {**row, "content": row.get("content") or "", "tool_calls": calls}


class ChatTemplate:
    """A tokenizer's chat template as the one renderer and parser of an episode.

    Args:
        tokenizer: a transformers tokenizer.
        chat_template: a template text to use instead of the tokenizer's (for
            example a prefix-stable training variant, see docs/layout.md).
        tool_call_format: how generated tool calls are read; default: ``"hermes"`` for
            a template that writes ``<tool_call>`` (or that renders no ``tool_calls``:
            budgetmix then writes them as ``<tool_call>`` markup), ``"llama_json"`` for one
            that asks for ``"parameters"`` JSON, else none (``tool_call_format`` is
            ``None``, and rendering with tools raises ``ConfigError``).
        tools_in: where tool specs go: the template's ``tools`` variable, a system
            message, or ``"auto"`` (the template if it mentions ``tools``).
        eos_token_ids: more stop ids (a model's ``generation_config.eos_token_id``).

    Raises:
        ConfigError: no chat template, a bad option, or a template whose end of an
            assistant turn cannot be found.
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str | None = None,
        *,
        tool_call_format: ToolCallFormat | None = None,
        tools_in: ToolsIn = "auto",
        eos_token_ids: int | Sequence[int] | None = (),
    ) -> None:
        template = chat_template or getattr(tokenizer, "chat_template", None)
        if not template or not isinstance(template, str):
            raise ConfigError("tokenizer: has no chat_template")
        if tools_in not in ("auto", "template", "system"):
            raise ConfigError(f"tools_in must be 'auto', 'template' or 'system', got {tools_in!r}")
        if tool_call_format is not None and tool_call_format not in TOOL_CALL_FORMATS:
            raise ConfigError(
                f"tool_call_format must be 'hermes' or 'llama_json', got {tool_call_format!r}"
            )
        self.tokenizer = tokenizer
        self.template = template
        self.native_tools = tools_in == "template" or (tools_in == "auto" and "tools" in template)
        self.native_tool_calls = self.native_tools and "tool_calls" in template
        self.tool_call_format: ToolCallFormat | None = tool_call_format or _implied_format(
            template, native=self.native_tool_calls
        )
        self.end_of_turn = self._find_end_of_turn()
        self.stop_token_ids = self._stop_ids(eos_token_ids)

    # -- rendering ---------------------------------------------------------------------
    def rows(self, messages: Sequence[ChatMessage | Mapping[str, Any]]) -> list[Row]:
        """``messages`` (neutral, or chat rows as Chat Completions sends them) as the rows
        this template is given."""
        rows = [
            row
            for m in messages
            for row in (chat_rows([m]) if isinstance(m, ChatMessage) else [dict(m)])
        ]
        return [self._adapted(row) for row in rows]

    def _adapted(self, row: Row) -> Row:
        if row.get("role") == "assistant" and row.get("tool_calls"):
            row = _wire_row(row)
        if row.get("role") == "assistant" and row.get("tool_calls") and not self.native_tool_calls:
            markup = "".join(_markup(c) for c in _calls_of(row))
            return {"role": "assistant", "content": f"{row.get('content') or ''}{markup}"}
        if row.get("role") == "tool" and not self.native_tools:
            return {
                "role": "user",
                "content": f"<tool_response>{row.get('content')}</tool_response>",
            }
        return row

    def render(
        self,
        messages: Sequence[ChatMessage | Mapping[str, Any]],
        tools: Sequence[ToolSpec] = (),
        *,
        add_generation_prompt: bool,
    ) -> str:
        """The conversation as text through the template, ``tools`` passed as ``tools=``
        (Chat Completions tool schemas) or, for a template without tool support, in the
        system message.

        Raises:
            ConfigError: the template refuses the conversation (its message is kept).
        """
        if tools:
            self._parser()  # a conversation with tools needs a parser for the replies
        rows = self.rows(messages)
        kwargs: dict[str, Any] = {}
        if tools and self.native_tools:
            kwargs["tools"] = chat.write_tools(tools)
        elif tools:
            text = _tool_system_text(tools)
            if rows and rows[0]["role"] == "system":
                rows[0] = {**rows[0], "content": f"{rows[0]['content']}\n\n{text}"}
            else:
                rows.insert(0, {"role": "system", "content": text})
        from jinja2 import TemplateError  # transformers' dependency, loaded with it

        try:
            out = self.tokenizer.apply_chat_template(
                rows,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                chat_template=self.template,
                **kwargs,
            )
        except TemplateError as exc:  # raise_exception() in the template, or a bad template
            raise ConfigError(f"chat template refused the conversation: {exc}") from exc
        return str(out)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added (the template text holds them)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens (EOS, template markers) kept."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def assistant_text(
        self,
        messages: Sequence[ChatMessage | Mapping[str, Any]],
        reply: ChatMessage | Mapping[str, Any],
        tools: Sequence[ToolSpec] = (),
    ) -> str:
        """What a model writes for ``reply`` after ``messages``: the template's rendering of
        the reply after the generation prompt, through its end-of-turn token (the
        canonical text of a demonstration).

        Raises:
            ConfigError: the template's assistant turn does not start with its generation
                prompt, or the rendering has no end-of-turn token after it.
        """
        prompt = self.render(messages, tools, add_generation_prompt=True)
        full = self.render([*messages, reply], tools, add_generation_prompt=False)
        if not full.startswith(prompt):
            raise ConfigError(
                "chat template: an assistant turn does not start with the generation prompt"
            )
        text = full[len(prompt) :]
        end = text.rfind(self.end_of_turn)
        if end < 0:
            raise ConfigError(f"chat template: no {self.end_of_turn!r} after the assistant turn")
        return text[: end + len(self.end_of_turn)]

    # -- parsing -----------------------------------------------------------------------
    def parse(
        self, text: str, *, id_prefix: str = "call"
    ) -> tuple[str, tuple[ToolCallRequest, ...]]:
        """Generated ``text`` (special tokens removed) as content and tool calls (for a
        template with no parser, content only: it was never rendered with tools)."""
        if self.tool_call_format is None:
            return text.strip(), ()
        if self.tool_call_format == "llama_json":
            return parse_llama_json_calls(text, id_prefix=id_prefix)
        return parse_tool_calls(text, id_prefix=id_prefix)

    def reply_row(self, text: str, *, id_prefix: str = "call") -> Row:
        """Generated ``text`` as the assistant chat row the history stores."""
        content, calls = self.parse(text, id_prefix=id_prefix)
        (row,) = chat_rows([ChatMessage(role="assistant", content=content, tool_calls=calls)])
        return row

    def _parser(self) -> ToolCallFormat:
        if self.tool_call_format is None:
            raise ConfigError(
                "chat template: its tool calls are in a syntax budgetmix has no parser for "
                "(it writes neither <tool_call> blocks nor Llama-3 \"parameters\" JSON); "
                f"the known parsers are {', '.join(map(repr, TOOL_CALL_FORMATS))}: choose "
                "the one the model writes with ChatTemplate(tool_call_format=...) / "
                "LocalChatModel(..., tool_call_format=...), or use a template of a known "
                "family (docs/layout.md)"
            )
        return self.tool_call_format

    # -- stop ids ------------------------------------------------------------------------
    def _find_end_of_turn(self) -> str:
        marker = "\x00A\x00"
        probe = [{"role": "user", "content": "U"}, {"role": "assistant", "content": marker}]
        text = self.render(probe, add_generation_prompt=False)
        after = text[text.rfind(marker) + len(marker) :] if marker in text else ""
        eos = getattr(self.tokenizer, "eos_token", None)
        for token in (*_END_OF_TURN, *([eos] if isinstance(eos, str) else [])):
            if after.lstrip(" ").startswith(token):
                return token
        if isinstance(eos, str) and eos and eos in after:
            return eos  # some glue before it (a newline): the EOS still ends the turn
        raise ConfigError(
            "chat template: cannot find the token that ends an assistant turn "
            f"(looked for {', '.join(_END_OF_TURN)} and the tokenizer's eos_token)"
        )

    def _stop_ids(self, extra: int | Sequence[int] | None) -> tuple[int, ...]:
        found: list[int] = []
        more = [extra] if isinstance(extra, int) else list(extra or ())
        end = self.tokenizer.convert_tokens_to_ids(self.end_of_turn)
        if end == getattr(self.tokenizer, "unk_token_id", None):
            end = None  # not one token of this vocabulary: its text still ends turns
        for value in (*more, getattr(self.tokenizer, "eos_token_id", None), end):
            if value is not None and int(value) not in found and int(value) >= 0:
                found.append(int(value))
        return tuple(found)

    @classmethod
    def for_model(cls, model: Any, tokenizer: Any, **options: Any) -> ChatTemplate:
        """``tokenizer``'s template, ``model.generation_config``'s EOS id(s) as more stop ids."""
        config = getattr(model, "generation_config", None)
        options.setdefault("eos_token_ids", getattr(config, "eos_token_id", None))
        return cls(tokenizer, **options)
