"""An episode's messages and token ids in the model's own chat template; drift checks.

The layout is the deployment one (docs/layout.md), rendered by
:class:`~budgetmix.adapters.chat_template.ChatTemplate`: ``[system:
instructions, user: task + notice]``, then per turn the assistant message and
the environment's messages (one ``tool`` message per call, the last carrying the
notice, or a ``user`` message), tools passed as ``tools=`` on every render. The
notice is placed as ``"observation"`` (:func:`budgetmix.notice.append_notice`)
and kept in the history, so training and deployment see the same tokens.

Token ids are built token-in/token-out: the sampled ids are kept as sampled; the
ids of a turn's environment messages are the template's own rendering of them
(:meth:`ChatCodec.continuation`), checked to leave the text so far unchanged (a
template that rewrites earlier turns, such as Qwen3's official one dropping
``<think>`` blocks after a user message, raises :class:`TemplateStabilityError`).
:meth:`ChatCodec.drifts` compares a finished episode with a full re-render and
classifies what differs (:data:`DriftKind`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from budgetmix.adapters.base import ToolSpec
from budgetmix.adapters.chat_template import ChatTemplate, ToolCallFormat
from budgetmix.exceptions import BudgetmixError, ConfigError
from budgetmix.ledger import LedgerState
from budgetmix.notice import NOTICE_SEPARATOR, append_notice, render_notice
from budgetmix.policy import NoticePolicy, NotifyEveryTurn

__all__ = [
    "NOTICE_SEPARATOR",
    "ChatCodec",
    "DriftKind",
    "TemplateStabilityError",
    "TokenDrift",
    "TokenDriftError",
    "environment_message",
    "turn_notice",
]

Row = dict[str, Any]
Rows = Sequence[Mapping[str, Any]]

#: ``tokenization``: sampled ids that are not the canonical tokenization of their own text
#: (fine: the ids are what was sampled); ``sampled_text``: the template re-renders a sampled
#: reply as other text (a different stop token, JSON spacing): deployment feeds the
#: canonical form; ``template``: an environment or template span differs; ``boundary``:
#: the spans encoded one by one differ from the whole text encoded at once. The last two
#: are fatal in strict mode.
DriftKind = Literal["tokenization", "sampled_text", "template", "boundary"]
FATAL_DRIFTS: frozenset[DriftKind] = frozenset({"template", "boundary"})


def environment_message(
    observation: str, state: LedgerState, fmt: str, policy: NoticePolicy | None = None
) -> str:
    """An observation carrying the notice: ``observation``, newline, budget notice (none
    when ``policy`` decides this turn gets none; every turn without a policy).

    ``state`` must be the ledger state of the turn about to be taken
    (``ledger.state(in_turn=True)`` right after ``try_charge_turn()``).

    Raises:
        ConfigError: ``fmt`` is not a registered notice format.
    """
    notice = turn_notice(state, policy or NotifyEveryTurn(format=fmt, placement="observation"))
    return append_notice(observation, notice) if notice else observation


def turn_notice(state: LedgerState, policy: NoticePolicy) -> str | None:
    """The notice of the turn about to be taken, decided as deployment decides it: the
    policy's ``should_notify`` (the controller's :meth:`Episode` path), rendered in its
    ``format`` by the SDK's renderer; ``None`` when the policy gives this turn none.

    Raises:
        ConfigError: the policy's format is not a registered notice format.
    """
    return render_notice(state, policy.format) if policy.should_notify(state) else None


@dataclass(frozen=True, slots=True)
class TokenDrift:
    """Where token-in/token-out ids and a full re-render of the chat disagree."""

    position: int
    expected: tuple[int, ...]
    actual: tuple[int, ...]
    kind: DriftKind = "template"

    @property
    def fatal(self) -> bool:
        """Whether strict mode refuses it (a template or boundary error)."""
        return self.kind in FATAL_DRIFTS

    def describe(self) -> str:
        """One line naming the kind, the first differing position and both id runs."""
        return (
            f"token drift ({self.kind}) at position {self.position}: re-render has "
            f"{list(self.expected)}, rollout has {list(self.actual)}"
        )


class TokenDriftError(BudgetmixError):
    """Strict mode: a rollout's ids differ from a full re-render of its chat (a fatal kind)."""

    def __init__(self, drift: TokenDrift) -> None:
        super().__init__(drift.describe())
        self.drift = drift


class TemplateStabilityError(ConfigError):
    """The chat template rewrites earlier turns when messages are added (not prefix-stable
    on this episode's layout), so token-in/token-out cannot follow it."""


_VARIANT = (
    "train with a prefix-stable training variant of the template, TrainConfig(chat_template="
    "FILE) or budgetmix train --chat-template FILE (e.g. TRL's qwen3_training.jinja for "
    "Qwen3; the checkpoint keeps it, so serving uses it too)"
)


def _remedy(rows: Rows) -> str:
    """The way out for this episode: what its layout does not use yet."""
    if any(r.get("role") == "tool" for r in rows):
        return (
            f"tool-role observations are already in use, so what is left: {_VARIANT}, or "
            "replies that each open with a non-empty <think> block (Qwen3's template drops "
            "an empty one of an earlier reply); see docs/layout.md"
        )
    return (
        f"{_VARIANT}, or tool-role observations (a ToolEnv) with replies that reason; "
        "see docs/layout.md"
    )


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


class ChatCodec:
    """An episode's chat messages and ids for one tokenizer with a chat template.

    Args:
        tokenizer: the model's tokenizer (with a chat template).
        use_system_role: instructions as a system message, or prepended to the task.
        chat_template, tool_call_format: as :class:`ChatTemplate` (a training variant).
        eos_token_ids: more stop ids (the model's ``generation_config.eos_token_id``).

    Raises:
        ConfigError: no chat template, or no end-of-turn token the template uses.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        use_system_role: bool = True,
        chat_template: str | None = None,
        tool_call_format: ToolCallFormat | None = None,
        eos_token_ids: int | Sequence[int] | None = (),
    ) -> None:
        self.template = ChatTemplate(
            tokenizer, chat_template, tool_call_format=tool_call_format, eos_token_ids=eos_token_ids
        )
        self.tokenizer = tokenizer
        self.use_system_role = use_system_role
        self.stop_token_ids: tuple[int, ...] = self.template.stop_token_ids
        end = tokenizer.convert_tokens_to_ids(self.template.end_of_turn)
        #: The id that closes a reply the cap cut (the template's end-of-turn token).
        self.eos_token_id: int = int(end if end in self.stop_token_ids else self.stop_token_ids[0])

    @classmethod
    def for_model(cls, model: Any, tokenizer: Any, **options: Any) -> ChatCodec:
        """A codec whose stop ids include ``model.generation_config``'s EOS id(s)."""
        config = getattr(model, "generation_config", None)
        options.setdefault("eos_token_ids", getattr(config, "eos_token_id", None))
        return cls(tokenizer, **options)

    # -- text and ids ------------------------------------------------------------------
    def render(
        self, messages: Rows, *, generation_prompt: bool, tools: Sequence[ToolSpec] = ()
    ) -> str:
        """``messages`` as text through the chat template, ``tools`` passed as ``tools=``."""
        return self.template.render(messages, tools, add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added (the template text holds them)."""
        return self.template.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens (EOS, template markers) kept."""
        return self.template.decode(ids)

    def opening_messages(self, instructions: str, first_message: str) -> list[Row]:
        """The opening chat: ``instructions`` as the system message and ``first_message`` as
        the user message, or both in one user message when ``use_system_role`` is off."""
        if self.use_system_role:
            return [
                {"role": "system", "content": instructions},
                {"role": "user", "content": first_message},
            ]
        return [{"role": "user", "content": f"{instructions}\n\n{first_message}"}]

    def prompt_ids(
        self, instructions: str, first_message: str, tools: Sequence[ToolSpec] = ()
    ) -> list[int]:
        """Ids of the opening prompt, ending with the assistant generation prompt."""
        msgs = self.opening_messages(instructions, first_message)
        return self.encode(self.render(msgs, generation_prompt=True, tools=tools))

    def reply_ids(
        self, messages: Rows, reply: Mapping[str, Any], tools: Sequence[ToolSpec] = ()
    ) -> list[int]:
        """The canonical ids of ``reply`` after ``messages`` (a demonstration): the
        template's own rendering of it, through its end-of-turn token."""
        return self.encode(self.template.assistant_text(messages, reply, tools))

    def reply_text(self, sampled: Sequence[int], *, stopped: bool) -> str:
        """The text of sampled ids, the stop id (when ``stopped``) and special tokens removed."""
        ids = list(sampled[:-1] if stopped else sampled)
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    # -- the next turn's ids -------------------------------------------------------------
    def continuation(
        self, messages: Rows, new_messages: Rows, tools: Sequence[ToolSpec], prompt_text: str
    ) -> tuple[str, list[int]]:
        """The next prompt's text, and the ids of ``new_messages`` after the assistant turn
        that ends ``messages``, through the next generation prompt.

        ``prompt_text`` is the rendering the last reply was sampled after. The next prompt
        is ``render(messages + new_messages, gen. prompt)``; the new ids are its text from
        the end of the last assistant turn (after its end-of-turn token) on, and both
        renderings must agree on everything before that.

        Raises:
            TemplateStabilityError: the template renders the earlier turns differently
                once the new messages are added (the message names where).
        """
        before = self.render(messages, generation_prompt=False, tools=tools)
        eot = self.template.end_of_turn
        cut = before.rfind(eot) + len(eot)
        if not before.startswith(prompt_text) or cut < len(prompt_text) + len(eot):
            raise TemplateStabilityError(
                f"chat template: the assistant turn does not follow its generation prompt "
                f"(text differs at character {_first_difference(before, prompt_text)}); "
                f"{_remedy(messages)}"
            )
        after = self.render([*messages, *new_messages], generation_prompt=True, tools=tools)
        if after[:cut] != before[:cut]:
            at = _first_difference(after, before)
            raise TemplateStabilityError(
                "chat template is not prefix-stable on this episode: adding the environment's "
                f"messages re-renders earlier turns (first difference at character {at}: "
                f"{before[at : at + 40]!r} became {after[at : at + 40]!r}); "
                f"{_remedy([*messages, *new_messages])}"
            )
        return after, self.encode(after[cut:])

    # -- drift -----------------------------------------------------------------------------
    def check_continuity(
        self,
        messages: Rows,
        ids: Sequence[int],
        *,
        sampled_mask: Sequence[int] | None = None,
        tools: Sequence[ToolSpec] = (),
    ) -> TokenDrift | None:
        """The first fatal drift of :meth:`drifts`, else the first drift, else ``None``."""
        found = self.drifts(messages, ids, sampled_mask=sampled_mask, tools=tools)
        return next((d for d in found if d.fatal), found[0] if found else None)

    def drifts(
        self,
        messages: Rows,
        ids: Sequence[int],
        *,
        sampled_mask: Sequence[int] | None = None,
        tools: Sequence[ToolSpec] = (),
    ) -> list[TokenDrift]:
        """Compare ``ids`` with a full re-render of ``messages``, span by span.

        ``sampled_mask`` (aligned with ``ids``; ``None``: nothing sampled) marks the sampled
        spans. A sampled span whose decoded text is the re-render's but whose ids are not
        its canonical tokenization is a ``tokenization`` drift; one whose text differs is
        ``sampled_text``. Any other span must match the re-render's text and ids
        (``template``), and the spans encoded one by one must equal the whole re-render
        encoded at once (``boundary``). The re-render may extend past ``ids``.
        """
        mask = list(sampled_mask) if sampled_mask is not None else [0] * len(ids)
        last = messages[-1]["role"] if messages else "user"
        expected = self.render(messages, generation_prompt=last != "assistant", tools=tools)
        spans = _spans(ids, mask)
        found: list[TokenDrift] = []
        cursor, canonical = 0, []
        for start, end, sampled in spans:
            span = list(ids[start:end])
            if sampled:
                cursor, span_ids = self._sampled_span(expected, cursor, start, span, found)
            else:
                cursor, span_ids = self._env_span(expected, cursor, start, span, found)
            canonical += span_ids
            if found and found[-1].kind == "template":
                return found  # the rest cannot be aligned any more
        whole = self.encode(expected)
        at = _common_prefix(canonical, whole)
        if at < len(canonical):
            found.append(
                TokenDrift(at, tuple(whole[at : at + 8]), tuple(canonical[at : at + 8]), "boundary")
            )
        return found

    def _env_span(
        self, expected: str, cursor: int, start: int, span: list[int], found: list[TokenDrift]
    ) -> tuple[int, list[int]]:
        text = self.decode(span)
        if expected[cursor : cursor + len(text)] != text or self.encode(text) != span:
            want = self.encode(expected[cursor:])
            at = _common_prefix(span, want)
            found.append(
                TokenDrift(
                    start + at, tuple(want[at : at + 8]), tuple(span[at : at + 8]), "template"
                )
            )
        return cursor + len(text), span

    def _sampled_span(
        self, expected: str, cursor: int, start: int, span: list[int], found: list[TokenDrift]
    ) -> tuple[int, list[int]]:
        eot = self.template.end_of_turn
        stop = expected.find(eot, cursor)
        end = len(expected) if stop < 0 else stop + len(eot)
        want_text = expected[cursor:end]
        stopped = bool(span) and span[-1] in self.stop_token_ids
        if not stopped and want_text.endswith(eot):
            want_text = want_text[: -len(eot)]  # cut by the cap: the template closed the turn
        text = self.decode(span)  # another stop id than the end-of-turn token: other text
        want = self.encode(want_text)
        if text != want_text:
            at = _common_prefix(span, want)
            found.append(
                TokenDrift(
                    start + at, tuple(want[at : at + 8]), tuple(span[at : at + 8]), "sampled_text"
                )
            )
        elif want != span:
            at = _common_prefix(span, want)
            found.append(
                TokenDrift(
                    start + at, tuple(want[at : at + 8]), tuple(span[at : at + 8]), "tokenization"
                )
            )
        return cursor + len(want_text), want


def _spans(ids: Sequence[int], mask: Sequence[int]) -> list[tuple[int, int, bool]]:
    """``(start, end, sampled)`` runs of equal mask values covering ``ids``."""
    spans: list[tuple[int, int, bool]] = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or bool(mask[i]) != bool(mask[start]):
            spans.append((start, i, bool(mask[start])))
            start = i
    return spans


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)
