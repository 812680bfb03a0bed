"""Environment messages and their token ids: the budget notice, chat-template glue, drift checks.

The environment message of a turn is the observation followed by the notice
that :func:`budgetmix.notice.render_notice` renders from the ledger state of
the turn about to be taken (charged first, then rendered with
``in_turn=True``, exactly as the runtime controller does), so a model sees in
training byte for byte what the controller injects in production.

Token ids are built token-in/token-out: a turn's ids are appended to the ids
so far and never re-derived from a re-rendered chat. :class:`ChatCodec`
derives the template glue once from a probe conversation, and
:meth:`ChatCodec.check_continuity` compares a finished episode against a full
re-render to report any drift instead of training on it silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from budgetmix.exceptions import BudgetmixError, ConfigError
from budgetmix.ledger import LedgerState
from budgetmix.notice import render_notice

__all__ = ["ChatCodec", "TokenDrift", "TokenDriftError", "environment_message"]

#: Between the observation and the notice; the notice is always the message's last line.
NOTICE_SEPARATOR = "\n"


def environment_message(observation: str, state: LedgerState, fmt: str) -> str:
    """The text of one environment message: ``observation``, newline, budget notice.

    ``state`` must be the ledger state of the turn about to be taken
    (``ledger.state(in_turn=True)`` right after ``try_charge_turn()``).

    Raises:
        ConfigError: ``fmt`` is not a registered notice format.
    """
    return f"{observation}{NOTICE_SEPARATOR}{render_notice(state, fmt)}"


@dataclass(frozen=True, slots=True)
class TokenDrift:
    """Where token-in/token-out ids and a full re-render of the chat disagree."""

    position: int
    expected: tuple[int, ...]
    actual: tuple[int, ...]

    def describe(self) -> str:
        """One line naming the first differing position and both id runs (re-render, rollout)."""
        return (
            f"token drift at position {self.position}: re-render has {list(self.expected)}, "
            f"rollout has {list(self.actual)}"
        )


class TokenDriftError(BudgetmixError):
    """Strict mode: a rollout's ids differ from a full re-render of its chat."""

    def __init__(self, drift: TokenDrift) -> None:
        super().__init__(drift.describe())
        self.drift = drift


_PROBE_ASSISTANT = "A"


class ChatCodec:
    """Turns chat messages into ids for one tokenizer with a chat template.

    Raises:
        ConfigError: the tokenizer has no chat template or EOS token, or its
            template is not prefix-stable (rendering more messages rewrites
            earlier ones), which makes token-in/token-out impossible.
    """

    def __init__(self, tokenizer: Any, *, use_system_role: bool = True) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ConfigError("tokenizer has no chat_template")
        if tokenizer.eos_token is None:
            raise ConfigError("tokenizer has no eos_token")
        self.tokenizer = tokenizer
        self.use_system_role = use_system_role
        self.eos_token_id: int = int(tokenizer.eos_token_id)
        self._glue_prefix, self._glue_suffix = self._probe_glue()

    def render(self, messages: Sequence[dict[str, str]], *, generation_prompt: bool) -> str:
        """``messages`` as text through the tokenizer's chat template; ``generation_prompt``
        appends the assistant generation prompt."""
        text = self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=generation_prompt
        )
        return str(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added (the template text holds them)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens (EOS, template markers) kept."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def opening_messages(self, instructions: str, first_message: str) -> list[dict[str, str]]:
        """The opening chat: ``instructions`` as the system message and ``first_message`` as
        the user message, or both in one user message when ``use_system_role`` is off."""
        if self.use_system_role:
            return [
                {"role": "system", "content": instructions},
                {"role": "user", "content": first_message},
            ]
        return [{"role": "user", "content": f"{instructions}\n\n{first_message}"}]

    def prompt_ids(self, instructions: str, first_message: str) -> list[int]:
        """Ids of the opening prompt, ending with the assistant generation prompt."""
        msgs = self.opening_messages(instructions, first_message)
        return self.encode(self.render(msgs, generation_prompt=True))

    def _probe_glue(self) -> tuple[str, str]:
        # The text between a sampled EOS and an environment message's content, and
        # after that content up to the next generation prompt, read off a probe chat.
        marker = "\x00ENV\x00"
        base_msgs = [*self.opening_messages("S", "U"), {"role": "assistant", "content": "A"}]
        base = self.render(base_msgs, generation_prompt=False)
        full = self.render(
            [*base_msgs, {"role": "user", "content": marker}], generation_prompt=True
        )
        if not full.startswith(base):
            raise ConfigError("chat template is not prefix-stable; token-in/token-out needs one")
        end = _PROBE_ASSISTANT + self.tokenizer.eos_token
        cut = base.rfind(end)
        if cut < 0:
            raise ConfigError("chat template does not end assistant turns with the EOS token")
        after_eos = base[cut + len(end) :]
        rest = full[len(base) :]
        if rest.count(marker) != 1:
            raise ConfigError("chat template alters user message content")
        before, after = rest.split(marker)
        return after_eos + before, after

    def env_message_ids(self, text: str) -> list[int]:
        """Ids to append after a sampled EOS: glue, the message, the next generation prompt."""
        return self.encode(self._glue_prefix + text + self._glue_suffix)

    def check_continuity(
        self, messages: Sequence[dict[str, str]], ids: Sequence[int]
    ) -> TokenDrift | None:
        """Compare ``ids`` with a full re-render of ``messages``; ``None`` when ``ids`` is a prefix.

        The re-render may extend past ``ids`` (template glue after the last EOS).
        """
        expected = self.encode(self.render(messages, generation_prompt=False))
        for i, tok in enumerate(ids):
            if i >= len(expected) or expected[i] != tok:
                return TokenDrift(i, tuple(expected[i : i + 8]), tuple(ids[i : i + 8]))
        return None
