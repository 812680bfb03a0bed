"""Serving a fine-tuned checkpoint: the same layout in production as in training.

Two ways to drive a checkpoint that :func:`budgetmix.training.train` wrote:

* :class:`TrainedPolicyAgent` acts in any text :class:`~budgetmix.environment.Environment`
  under the controller (it is a :class:`budgetmix.environment.EnvAgent`). It
  builds its context exactly like a training rollout — token in, token out, in
  the model's chat template: the prompt ids, then per turn the sampled ids plus
  the template's rendering of the user message ``observation + "\\n" + notice``
  (:meth:`~budgetmix.training.chat.ChatCodec.continuation`) with the notice
  rendered by the controller (the bytes the model was trained on). Earlier
  notices stay in the context, as they did in training. ``budgetmix eval
  --agent checkpoint`` uses it.
* :func:`chat_model` loads the checkpoint as a
  :class:`~budgetmix.adapters.local.LocalChatModel` for the adapters' tool loop
  (``run_agent``), the deployment of tool-calling environments. Give the
  controller the notice placement the model was trained with,
  ``NotifyEveryTurn(placement="observation")``: then the model is fed, turn by
  turn, the ids a training rollout of the same episode holds (docs/layout.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budgetmix.environment import Environment
from budgetmix.exceptions import BudgetmixError, ConfigError
from budgetmix.notice import append_notice

__all__ = ["TrainedPolicyAgent", "chat_model"]


class TrainedPolicyAgent:
    """A trained checkpoint as an environment agent (sync ``EnvAgent``).

    Args:
        model, tokenizer: an in-memory model and its tokenizer (with chat template).
        temperature: 0 decodes greedily; above 0 samples (seeded by ``seed``).
        max_new_tokens: cap of one response.
        seed: sampling seed (ignored when greedy).

    Raises:
        ConfigError: negative temperature or ``max_new_tokens`` below 1.
    """

    sees_budget = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = 0.0,
        max_new_tokens: int = 16,
        seed: int = 0,
    ) -> None:
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature!r}")
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
        from budgetmix.training.chat import ChatCodec
        from budgetmix.training.generation import ModelGenerator

        self.codec = ChatCodec.for_model(model, tokenizer)
        self.max_new_tokens = max_new_tokens
        self.generator = ModelGenerator.seeded(
            model, tokenizer, temperature=temperature, batch_size=1, seed=seed
        )
        self._instructions = ""
        self._ids: list[int] | None = None
        self._messages: list[dict[str, Any]] = []
        self._prompt_text = ""

    @classmethod
    def from_pretrained(cls, path: str | Path, **options: Any) -> TrainedPolicyAgent:
        """Load a checkpoint directory (safetensors; never downloads, never unpickles).

        A directory with a ``manifest.json`` (every ``final/`` that training writes)
        is verified file by file first.

        Raises:
            ConfigError: ``path`` is not a local directory, or a bad option.
            CheckpointError: a file is damaged (the message names it) or cannot be loaded.
        """
        from budgetmix.training.models import load_pretrained

        model, tokenizer = load_pretrained(path)
        return cls(model, tokenizer, **options)

    def start(self, env: Environment, seed: int) -> None:
        """Begin an episode in ``env`` (called once per episode by the evaluator)."""
        self._instructions = env.instructions()
        self._ids = None
        self._messages = []

    def act(self, observation: str, notice: str | None, turns_remaining: int | None) -> str:
        """The model's next action for ``observation`` under ``notice``.

        Raises:
            TemplateStabilityError: the chat template re-renders earlier turns.
            BudgetmixError: the context grew past 100k tokens.
        """
        message = append_notice(observation, notice) if notice else observation
        if self._ids is None:
            self._messages = self.codec.opening_messages(self._instructions, message)
            self._prompt_text = self.codec.render(self._messages, generation_prompt=True)
            ids = self.codec.encode(self._prompt_text)
        else:
            user = [{"role": "user", "content": message}]
            self._prompt_text, new = self.codec.continuation(
                self._messages, user, (), self._prompt_text
            )
            self._messages.extend(user)
            ids = self._ids + new
        (generation,) = self.generator.generate_ids([ids], self.max_new_tokens)
        sampled = list(generation.ids)
        if not generation.stopped:
            # as in training, a response is closed by its end-of-turn token before the next
            sampled.append(self.codec.eos_token_id)
        self._ids = ids + sampled
        if len(self._ids) > 100_000:
            raise BudgetmixError("context grew past 100k tokens; the episode is runaway")
        action = self.codec.reply_text(sampled, stopped=True)
        self._messages.append({"role": "assistant", "content": action})
        return action


def chat_model(path: str | Path, **options: Any) -> Any:
    """The checkpoint as a :class:`~budgetmix.adapters.local.LocalChatModel` (never downloads).

    Raises:
        ConfigError: ``path`` is not a local directory, or a bad option.
        CheckpointError: a file the manifest lists is damaged (the message names it).
    """
    from budgetmix.adapters.local import LocalChatModel

    return LocalChatModel.from_pretrained(path, local_files_only=True, **options)
