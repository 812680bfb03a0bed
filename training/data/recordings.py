"""Recorded episodes: a JSONL file of conversations with their tools, and SFT rows from it.

The controller keeps what an episode said (``run_agent`` returns it as
:attr:`~budgetmix.adapters.loop.AgentRun.messages`, without any notice) but the
traces hold no tool definitions, so a recording is written explicitly: one
JSON object per line,

.. code-block:: json

    {"format": "budgetmix.episode.v1",
     "tools": [{"name": "add", "description": "...", "parameters": {...}}],
     "messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"id": "call_0", "name": "add", "arguments": "{\\"n\\": 2}"}]},
                  {"role": "tool", "content": "value 2", "tool_call_id": "call_0",
                   "name": "add"}, ...],
     "budget_turns": 6, "notice_placement": "ephemeral", "status": "success",
     "tool_errors": []}

``notice_placement`` says whether the run's notices are in its messages: under
``"observation"`` (the placement trained models are deployed with) ``run_agent``
keeps each turn's notice in that turn's latest observation, and the messages
are trained on as recorded; under ``"ephemeral"`` (the default, e.g. an API
model's run) they hold none and each turn's notice is put back in.

:func:`episode_record` builds one from a run (``run_agent``'s result and the
tools it had), :func:`write_episodes` appends records, :func:`read_episodes`
reads and validates a file (a :class:`ConfigError` names the line).
``tool_errors`` lists the ids of the calls whose tool raised (a ``tool_error``
mistake: the tool's own bug, not the model's), from the run's mistakes.

:func:`recorded_rollouts` turns records into training rows in the one episode
layout (docs/layout.md): the messages rendered by the model's own chat template
with the tools, the budget notice of each turn placed in that turn's latest
observation (placement ``"observation"``, rendered from a ledger of the
recorded turn budget as the controller renders it), and a loss on the
assistant tokens only. A template that is not prefix-stable gets one row per
assistant turn instead of one per episode. An episode with a ``tool_error`` is
skipped (``tool_errors="skip"``, the default: a crash is not behaviour to imitate);
``tool_errors="keep"`` trains on it as recorded.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from budgetmix.adapters.base import ChatMessage, ToolCallRequest, ToolSpec
from budgetmix.adapters.tools import Tool
from budgetmix.exceptions import ConfigError
from budgetmix.telemetry.redaction import redact_data

if TYPE_CHECKING:
    from budgetmix.adapters.chat_template import ChatTemplate
    from budgetmix.adapters.loop import AgentRun
    from budgetmix.training.config import TrainConfig
    from budgetmix.training.rollouts.rollout import Rollout

__all__ = [
    "RECORD_FORMAT",
    "RecordedBatches",
    "RecordedEpisode",
    "episode_record",
    "read_episodes",
    "recorded_rollouts",
    "write_episodes",
]

#: The ``format`` of every line of a recording.
RECORD_FORMAT = "budgetmix.episode.v1"
_ROLES = ("system", "user", "assistant", "tool")
#: What SFT does with an episode whose tool raised: skip it, or train on it as recorded.
ToolErrors = Literal["skip", "keep"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedEpisode:
    """One recorded episode: its messages (no notices), its tools, its turn budget, and
    ``tool_errors``: the ids of the calls whose tool raised.

    Raises:
        ConfigError: no assistant message, or a message role outside
            system/user/assistant/tool.
    """

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    budget_turns: int | None = None
    notice_placement: str = "ephemeral"
    status: str = ""
    tool_errors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not any(m.role == "assistant" for m in self.messages):
            raise ConfigError("episode record: no assistant message to learn from")
        from budgetmix._validate import check_choice
        from budgetmix.notice import NOTICE_PLACEMENTS

        check_choice("notice_placement", self.notice_placement, NOTICE_PLACEMENTS)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of one line (see the module docstring)."""
        return {
            "format": RECORD_FORMAT,
            "tools": [
                {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
                for t in self.tools
            ],
            "messages": [_message_dict(m) for m in self.messages],
            "budget_turns": self.budget_turns,
            "notice_placement": self.notice_placement,
            "status": self.status,
            "tool_errors": list(self.tool_errors),
        }

    @classmethod
    def from_dict(cls, data: Any) -> RecordedEpisode:
        """Read one line's object.

        Raises:
            ConfigError: a wrong ``format``, a missing or mistyped field (named).
        """
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
            raise ConfigError(f"not a {RECORD_FORMAT} object (its 'format' key)")
        tools = data.get("tools", [])
        messages = data.get("messages")
        if not isinstance(tools, list) or not isinstance(messages, list):
            raise ConfigError("'tools' and 'messages' must be lists")
        turns = data.get("budget_turns")
        if turns is not None and (
            isinstance(turns, bool) or not isinstance(turns, int) or turns < 1
        ):
            raise ConfigError(f"'budget_turns' must be a positive integer or null, got {turns!r}")
        errors = data.get("tool_errors", [])
        if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
            raise ConfigError(f"'tool_errors' must be a list of call ids, got {errors!r}")
        return cls(
            messages=tuple(_message(m, i) for i, m in enumerate(messages)),
            tools=tuple(_tool_spec(t, i) for i, t in enumerate(tools)),
            budget_turns=turns,
            notice_placement=data.get("notice_placement", "ephemeral"),
            status=str(data.get("status", "")),
            tool_errors=tuple(errors),
        )


def _message_dict(m: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
        ]
    if m.role == "tool":
        out.update(tool_call_id=m.tool_call_id, name=m.name, is_error=m.is_error)
    return out


def _message(data: Any, index: int) -> ChatMessage:
    where = f"messages[{index}]"
    if not isinstance(data, dict) or data.get("role") not in _ROLES:
        raise ConfigError(f"{where}: expected an object with a role of {', '.join(_ROLES)}")
    if not isinstance(data.get("content", ""), str):
        raise ConfigError(f"{where}.content must be a string")
    calls = []
    for j, call in enumerate(data.get("tool_calls") or []):
        if not (
            isinstance(call, dict)
            and isinstance(call.get("name"), str)
            and isinstance(call.get("arguments"), str)
        ):
            raise ConfigError(f"{where}.tool_calls[{j}]: needs string 'name' and 'arguments'")
        calls.append(
            ToolCallRequest(
                id=str(call.get("id") or ""), name=call["name"], arguments=call["arguments"]
            )
        )
    return ChatMessage(
        role=data["role"],
        content=data.get("content", ""),
        tool_calls=tuple(calls),
        tool_call_id=data.get("tool_call_id"),
        name=data.get("name"),
        is_error=bool(data.get("is_error", False)),
    )


def _tool_spec(data: Any, index: int) -> ToolSpec:
    if not (
        isinstance(data, dict)
        and isinstance(data.get("name"), str)
        and isinstance(data.get("parameters", {}), dict)
    ):
        raise ConfigError(f"tools[{index}]: needs a string 'name' and an object 'parameters'")
    return ToolSpec(
        name=data["name"],
        description=str(data.get("description", "")),
        parameters=data.get("parameters", {}),
    )


def episode_record(
    run: AgentRun, tools: Iterable[Tool | ToolSpec], *, notice_placement: str = "ephemeral"
) -> RecordedEpisode:
    """The record of one ``run_agent`` episode with the ``tools`` it was given;
    ``notice_placement`` is the run's controller's (``"observation"``: its messages
    hold the notices); ``tool_errors`` are the calls of its ``tool_error`` mistakes.

    Raises:
        ConfigError: the run has no assistant message, or an unknown placement.
    """
    specs = tuple(t.spec if isinstance(t, Tool) else t for t in tools)
    limit = run.result.limits.get("turns")
    from budgetmix.events import MistakeKind

    crashed = tuple(
        m.call_id
        for m in run.result.mistakes
        if m.kind is MistakeKind.TOOL_ERROR and m.call_id is not None
    )
    return RecordedEpisode(
        messages=tuple(run.messages),
        tools=specs,
        budget_turns=int(limit) if limit is not None else None,
        notice_placement=notice_placement,
        status=str(run.result.status),
        tool_errors=crashed,
    )


def write_episodes(path: str | Path, records: Iterable[RecordedEpisode]) -> Path:
    """Append ``records`` to the JSONL file ``path`` (created if missing); returns it."""
    p = Path(path)
    with p.open("a", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(redact_data(record.to_dict()), ensure_ascii=False) + "\n")
    return p


def read_episodes(path: str | Path) -> list[RecordedEpisode]:
    """Every record of the JSONL file ``path`` (blank lines skipped).

    Raises:
        ConfigError: the file cannot be read, holds no record, or a line is not a
            valid record (the message names the file and line).
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"sft_data: cannot read {str(p)!r}: {exc}") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(RecordedEpisode.from_dict(json.loads(line)))
        except (ValueError, RecursionError) as exc:  # ConfigError is a ValueError
            raise ConfigError(f"sft_data: {p.name}:{number}: {exc}") from None
    if not records:
        raise ConfigError(f"sft_data: {str(p)!r} holds no episode")
    return records


# -- training rows ---------------------------------------------------------------------
def _with_notices(record: RecordedEpisode, fmt: str, default_turns: int) -> list[ChatMessage]:
    """The record's messages with each turn's notice in its latest observation (kept)."""
    from dataclasses import replace

    if record.notice_placement == "observation":
        return list(record.messages)  # placed by the controller that ran it

    from budgetmix.ledger import fixed_clock_ledger
    from budgetmix.notice import append_notice, observation_index
    from budgetmix.policy import NotifyEveryTurn
    from budgetmix.training.rollouts.chat import turn_notice

    turns = record.budget_turns or max(default_turns, _assistant_turns(record))
    ledger = fixed_clock_ledger(turns)  # as training rollouts do
    policy = NotifyEveryTurn(format=fmt, placement="observation")  # the rollouts' default
    out: list[ChatMessage] = []
    for message in record.messages:
        if message.role == "assistant" and ledger.try_charge_turn() is None:
            notice = turn_notice(ledger.state(in_turn=True), policy)
            if notice is None:
                out.append(message)
                continue
            at = observation_index([m.role for m in out])
            if at is None:
                out.append(ChatMessage(role="user", content=notice))
            else:
                out[at] = replace(out[at], content=append_notice(out[at].content, notice))
        out.append(message)
    return out


def _assistant_turns(record: RecordedEpisode) -> int:
    return sum(m.role == "assistant" for m in record.messages)


def _segments(
    template: ChatTemplate, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
) -> list[tuple[str, bool]] | None:
    """``(text, is_assistant)`` pieces whose concatenation is the whole rendering, or
    ``None`` when the template is not prefix-stable over this conversation."""
    pieces: list[tuple[str, bool]] = []
    done = ""
    for i, message in enumerate(messages):
        if message.role != "assistant":
            continue
        prompt = template.render(messages[:i], tools, add_generation_prompt=True)
        if not prompt.startswith(done):
            return None
        reply = template.assistant_text(messages[:i], message, tools)
        pieces += [(prompt[len(done) :], False), (reply, True)]
        done = prompt + reply
    return pieces


def _rows(
    template: ChatTemplate, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
) -> list[tuple[list[int], list[int], list[int]]]:
    """``(prompt_ids, response_ids, response_mask)`` rows of one conversation."""
    pieces = _segments(template, messages, tools)
    if pieces is not None:
        prompt = template.encode(pieces[0][0])
        ids: list[int] = []
        mask: list[int] = []
        for text, learn in pieces[1:]:
            tokens = template.encode(text)
            ids += tokens
            mask += [int(learn)] * len(tokens)
        return [(prompt, ids, mask)]
    rows = []  # not prefix-stable: one row per assistant turn, as deployment renders it
    for i, message in enumerate(messages):
        if message.role == "assistant":
            context = template.encode(
                template.render(messages[:i], tools, add_generation_prompt=True)
            )
            reply = template.encode(template.assistant_text(messages[:i], message, tools))
            rows.append((context, reply, [1] * len(reply)))
    return rows


def recorded_rollouts(
    records: Sequence[RecordedEpisode],
    template: ChatTemplate,
    *,
    notice_format: str,
    max_total_tokens: int,
    default_turns: int = 1,
    tool_errors: ToolErrors = "skip",
) -> list[Rollout]:
    """Training rows of ``records`` (see the module docstring), as :class:`Rollout` s
    whose ``response_mask`` is 1 on assistant tokens; ``default_turns`` is the budget
    of a record that names none (at least its own turn count). ``tool_errors="skip"``
    leaves out every record with a call whose tool raised; ``"keep"`` trains on it.

    Raises:
        ConfigError: a row longer than ``max_total_tokens``, an unknown notice format,
            a template that refuses a conversation, or every record skipped.
    """
    from budgetmix._validate import check_choice
    from budgetmix.policies.samplers import BudgetDraw
    from budgetmix.training.rollouts.rollout import Rollout

    check_choice("tool_errors", tool_errors, ("skip", "keep"))
    kept = [r for r in records if tool_errors == "keep" or not r.tool_errors]
    if records and not kept:
        raise ConfigError(
            f"sft_data: all {len(records)} episodes have a tool that raised (their "
            "'tool_errors'); fix the tools and record again, or pass tool_errors='keep'"
        )
    out: list[Rollout] = []
    for n, record in enumerate(kept):
        messages = _with_notices(record, notice_format, default_turns)
        turns = record.budget_turns or max(default_turns, _assistant_turns(record))
        for prompt, ids, mask in _rows(template, messages, record.tools):
            if len(prompt) + len(ids) > max_total_tokens:
                raise ConfigError(
                    f"sft_data: episode {n + 1} renders to {len(prompt) + len(ids)} tokens, "
                    f"over max_total_tokens={max_total_tokens}"
                )
            success = record.status == "success"
            out.append(
                Rollout(
                    task_id=f"recorded-{n}",
                    seed=n,
                    group=len(out),
                    budget=BudgetDraw(turns=turns, sampler="recorded"),
                    prompt_ids=tuple(prompt),
                    response_ids=tuple(ids),
                    response_mask=tuple(mask),
                    logprobs=(0.0,) * len(ids),
                    reward=1.0 if success else 0.0,
                    success=success,
                    num_turns=_assistant_turns(record),
                    termination="success" if success else "failure",
                    steps=(),
                    messages=tuple(template.rows(messages)),
                )
            )
    return out


class RecordedBatches:
    """The SFT rows of a recording, drawn in batches (the trainer's ``sft_data`` source)."""

    def __init__(self, rows: Sequence[Rollout]) -> None:
        if not rows:
            raise ConfigError("sft_data: no training rows")
        self.rows = list(rows)

    @classmethod
    def load(
        cls,
        path: str | Path,
        tokenizer: Any,
        model: Any,
        *,
        notice_format: str,
        max_total_tokens: int,
        default_turns: int = 1,
    ) -> RecordedBatches:
        """Read ``path`` and render it with the model's own chat template.

        Raises:
            ConfigError: as :func:`read_episodes` and :func:`recorded_rollouts`.
        """
        from budgetmix.adapters.chat_template import ChatTemplate

        template = ChatTemplate.for_model(model, tokenizer)
        rows = recorded_rollouts(
            read_episodes(path),
            template,
            notice_format=notice_format,
            max_total_tokens=max_total_tokens,
            default_turns=default_turns,
        )
        return cls(rows)

    @classmethod
    def from_config(cls, config: TrainConfig, model: Any, tokenizer: Any) -> RecordedBatches | None:
        """The rows of ``config.sft_data`` (``None`` without one); a record without a turn
        budget gets the sampler's largest.

        Raises:
            ConfigError: as :meth:`load`.
        """
        if config.sft_data is None:
            return None
        return cls.load(
            config.sft_data,
            tokenizer,
            model,
            notice_format=config.notice_format,
            max_total_tokens=config.max_total_tokens,
            default_turns=max(config.budget_sampler().support()),
        )

    def batch(self, rng: random.Random, size: int, world: int, rank: int) -> list[Rollout]:
        """``size`` rows drawn with ``rng`` (same draws on every process); this process's
        share is every ``world``-th of them, from ``rank``."""
        picks = [self.rows[rng.randrange(len(self.rows))] for _ in range(size)]
        return picks[rank::world]
