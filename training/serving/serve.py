"""Serving a fine-tuned checkpoint: the same layout in production as in training.

Two ways to drive a checkpoint that :func:`budgetmix.training.train` wrote:

* :class:`TrainedPolicyAgent` acts in an :class:`~budgetmix.environment.Environment`
  under the evaluator or the controller (it is a :class:`budgetmix.environment.EnvAgent`).
  It builds its context exactly like a training rollout — token in, token out, in
  the model's chat template, with the same code (:mod:`budgetmix.training.rollouts.env_turn`):
  the prompt ids, then per turn the sampled ids plus the template's rendering of the
  environment's answer with the controller's notice on its last message (the bytes
  the model was trained on; earlier notices stay, as in training): for a text
  environment the user message ``observation + "\\n" + notice``, for a tool
  environment (:class:`~budgetmix.training.envs.tool_env.ToolCallEnvironment`) one
  ``tool`` message per call, the agent stepping the environment itself with the calls
  the template's parser reads from the reply. ``budgetmix eval --agent checkpoint``
  uses it. The episode's KV cache is kept from one turn to the next
  (:class:`~budgetmix.training.rollouts.sampler.KVCacheSampler`, keyed by episode), so a turn
  runs the model on its new ids only, as training rollouts do. Agents built by
  :meth:`TrainedPolicyAgent.factory` with ``batch_size`` above 1 share an
  :class:`~budgetmix.training.serving.serve_batch.EpisodeBatcher`: the turns of an evaluation's
  concurrent episodes are sampled in one forward pass, each episode acting as at batch 1.
* :func:`chat_model` loads the checkpoint as a
  :class:`~budgetmix.adapters.local.LocalChatModel` for the adapters' tool loop
  (``run_agent``), the deployment of tool-calling environments. Give the
  controller the notice the model was trained with, :func:`deployment_notice`
  (``NotifyEveryTurn(format=..., placement="observation")``, read from the
  checkpoint's ``training_env.json``): then the model is fed, turn by turn, the
  ids a training rollout of the same episode holds (docs/layout.md); ``run_agent``
  refuses another placement or format.

Both read the checkpoint's replies with the tool-call parser it was trained with
(``training_env.json``'s ``tool_call_format``; else the one its template implies, and a
template with no known parser is refused, never read with another), and carry
``trained_grace_turn = False`` for a checkpoint trained without a grace turn (every one
the trainer writes): ``run_agent`` and the evaluator refuse to grant it one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from budgetmix.adapters.base import ToolSpec
from budgetmix.adapters.chat_template import ToolCallFormat
from budgetmix.environment import AgentReply, Environment
from budgetmix.exceptions import BudgetmixError, ConfigError
from budgetmix.notice import NoticePlacement, append_notice
from budgetmix.policy import NotifyEveryTurn
from budgetmix.training.rollouts.env_turn import environment_answer, reply_message, with_notice

if TYPE_CHECKING:
    from budgetmix.training.rollouts.generation import ModelGenerator
    from budgetmix.training.serving.serve_batch import BatchedGenerator, EpisodeBatcher

__all__ = ["TrainedPolicyAgent", "chat_model", "deployment_notice", "episode_seed"]


def episode_seed(agent_seed: int, seed: int) -> int:
    """The seed of an episode's sampling stream: a stable 63-bit mix of the agent's ``seed``
    and the episode's (independent of ``PYTHONHASHSEED``; distinct pairs give unrelated
    streams)."""
    digest = hashlib.blake2b(f"{agent_seed}:{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class TrainedPolicyAgent:
    """A trained checkpoint as an environment agent (sync ``EnvAgent``).

    Args:
        model, tokenizer: an in-memory model and its tokenizer (with chat template).
        temperature: 0 decodes greedily; above 0 samples (seeded by ``seed``).
        max_new_tokens: cap of one response.
        seed: sampling seed (ignored when greedy).
        episode_seeds: ``False`` (the default): one sampling stream, seeded by ``seed`` at
            construction, runs on across the agent's episodes (``budgetmix demo`` drives
            one agent over sequential episodes so). ``True``: :meth:`start` reseeds the
            stream from ``(seed, the episode seed it receives)`` (:func:`episode_seed`),
            so every episode draws from a stream of its own: an evaluator builds a fresh
            agent per episode and passes each (task, sample) cell its own seed, so the K
            samples of a task differ and a rerun draws the same ids again (``budgetmix
            eval --agent checkpoint`` turns it on).
        tool_call_format: the parser of its tool calls (default: the template's).
        batcher: an :class:`~budgetmix.training.serving.serve_batch.EpisodeBatcher` of ``model``
            shared with other agents: their concurrent turns are sampled in one forward
            pass, each episode drawing from its own stream seeded by ``seed``, so it acts
            as alone (:meth:`factory` builds such agents). ``None``: batch 1.

    The model is run on each id of an episode once: the episode's KV cache is kept
    across its turns (keyed by episode) and dropped when the next episode starts or
    a tool environment's episode ends.

    Raises:
        ConfigError: negative temperature or ``max_new_tokens`` below 1, or a ``batcher``
            of another model or temperature.
    """

    sees_budget = True
    #: The notice policy the checkpoint was trained with (:meth:`from_pretrained` sets it).
    trained_notice: NotifyEveryTurn | None = None
    #: ``False``: trained without a grace turn (:meth:`from_pretrained` sets it); the
    #: evaluator then refuses a policy that grants one.
    trained_grace_turn: bool | None = None

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = 0.0,
        max_new_tokens: int = 16,
        seed: int = 0,
        tool_call_format: ToolCallFormat | None = None,
        batcher: EpisodeBatcher | None = None,
        episode_seeds: bool = False,
    ) -> None:
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature!r}")
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
        from budgetmix.training.rollouts.chat import ChatCodec
        from budgetmix.training.rollouts.generation import ModelGenerator

        self.codec = ChatCodec.for_model(model, tokenizer, tool_call_format=tool_call_format)
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.episode_seeds = bool(episode_seeds)
        self.generator: ModelGenerator | BatchedGenerator
        if batcher is None:
            self.generator = ModelGenerator.seeded(
                model, tokenizer, temperature=temperature, batch_size=1, seed=seed
            )
        elif batcher.model is not model or batcher.temperature != temperature:
            raise ConfigError("batcher: built for another model or temperature than the agent")
        else:
            self.generator = batcher.generator(seed)
        self._instructions = ""
        self._ids: list[int] | None = None
        self._messages: list[dict[str, Any]] = []
        self._prompt_text = ""
        self._env: Any = None  # a tool environment the agent steps itself
        self._tools: tuple[ToolSpec, ...] = ()
        self._answers: list[dict[str, Any]] = []  # its answer to the last reply
        self._episode = 0  # keys the episode's KV cache in the generator

    @classmethod
    def factory(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        batch_size: int = 1,
        flush_s: float = 0.01,
        **options: Any,
    ) -> Callable[[], TrainedPolicyAgent]:
        """A fresh agent per call (an evaluator's ``agent_factory``), all on ``model``.

        With ``batch_size`` above 1 the agents share one
        :class:`~budgetmix.training.serving.serve_batch.EpisodeBatcher`: up to ``batch_size``
        concurrent episodes are sampled in one forward pass (a turn waits ``flush_s`` at
        most for the others', and for those being prefilled), and each acts as a batch-1
        agent with the same ``options`` would. ``options`` are the constructor's
        (``temperature``, ``seed``, ...); give ``episode_seeds=True`` for an evaluator's
        sampled episodes to draw each from its cell's stream (else every fresh agent
        restarts the same stream: K equal samples).

        Raises:
            ConfigError: ``batch_size`` below 1, a negative ``flush_s``, or a bad option.
        """
        from budgetmix.training.serving.serve_batch import EpisodeBatcher

        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        cls(model, tokenizer, **options)  # a bad option fails now, not in the first episode
        if batch_size == 1:
            return lambda: cls(model, tokenizer, **options)
        temperature = float(options.get("temperature", 0.0))
        batcher = EpisodeBatcher(
            model, tokenizer, temperature=temperature, batch_size=batch_size, flush_s=flush_s
        )
        return lambda: cls(model, tokenizer, batcher=batcher, **options)

    @classmethod
    def from_pretrained(cls, path: str | Path, **options: Any) -> TrainedPolicyAgent:
        """Load a checkpoint directory (safetensors; never downloads, never unpickles).

        A directory with a ``manifest.json`` (every ``final/`` that training writes)
        is verified file by file first. ``trained_notice`` is set to
        :func:`deployment_notice` of ``path``: give the evaluator or controller its
        format (the agent always places the notice as training did, in the observation);
        the recorded parser and ``trained_grace_turn`` come from the same file.

        Raises:
            ConfigError: ``path`` is not a local directory, a bad option, or a file that
                records an unknown parser.
            CheckpointError: a file is damaged (the message names it) or cannot be loaded.
        """
        from budgetmix.training.data.models import load_pretrained
        from budgetmix.training.data.provenance import read_training_grace, read_training_parser

        model, tokenizer = load_pretrained(path)
        options.setdefault("tool_call_format", read_training_parser(path))
        agent = cls(model, tokenizer, **options)
        agent.trained_notice = deployment_notice(path)
        agent.trained_grace_turn = read_training_grace(path)
        return agent

    def start(self, env: Environment, seed: int) -> None:
        """Begin an episode in ``env`` (called once per episode by the evaluator, after
        ``env.reset``, with the cell's ``seed``; with ``episode_seeds`` the sampling stream is
        reseeded from it). A tool environment is driven by the agent itself (see :meth:`act`)."""
        from budgetmix.training.envs.tool_env import ToolCallEnvironment

        self.generator.reset()  # the last episode's cache
        if self.episode_seeds and self.generator.generator is not None:
            self.generator.generator.manual_seed(episode_seed(self.seed, seed))
        self._episode += 1
        self._instructions = env.instructions()
        self._ids = None
        self._messages = []
        self._env = env if isinstance(env, ToolCallEnvironment) else None
        self._tools = tuple(self._env.tool_specs()) if self._env is not None else ()
        self._answers = []

    def act(
        self, observation: str, notice: str | None, turns_remaining: int | None
    ) -> str | AgentReply:
        """The model's next action for ``observation`` under ``notice``.

        In a text environment the caller steps the environment with the returned text.
        In a tool environment (:class:`~budgetmix.training.envs.tool_env.ToolCallEnvironment`)
        the agent takes the step itself, as a training rollout does: the reply's calls,
        parsed by the template, go to ``env.call_tool`` (one ``tool`` message each), a
        reply without calls to ``env.respond``; it returns an :class:`AgentReply` whose
        ``result`` is that step (the evaluator does not call ``env.step`` then). The next
        call appends ``notice`` to the last of those messages and ignores ``observation``
        (it is their joined text).

        Raises:
            TemplateStabilityError: the chat template re-renders earlier turns.
            BudgetmixError: the context grew past 100k tokens.

        An exception ends the episode's cache (a batched agent's episode leaves the
        batches: the others do not wait for it).
        """
        try:
            return self._act(observation, notice)
        except BaseException:
            self.generator.reset()
            raise

    def _act(self, observation: str, notice: str | None) -> str | AgentReply:
        ids = self._context(observation, notice)
        (generation,) = self.generator.generate_ids([ids], self.max_new_tokens, [self._episode])
        sampled = list(generation.ids)
        if not generation.stopped:
            # as in training, a response is closed by its end-of-turn token before the next
            sampled.append(self.codec.eos_token_id)
        self._ids = ids + sampled
        if len(self._ids) > 100_000:
            self.generator.reset()
            raise BudgetmixError("context grew past 100k tokens; the episode is runaway")
        text = self.codec.reply_text(sampled, stopped=True)
        turn = sum(m["role"] == "assistant" for m in self._messages) + 1
        reply = reply_message(self.codec, text, turn, tools=self._env is not None)
        self._messages.append(reply)
        if self._env is None:
            return text
        result, self._answers = environment_answer(self._env, reply, tools=True)
        if result.done:
            self.generator.reset()
        return AgentReply(text=text, result=result)

    def _context(self, observation: str, notice: str | None) -> list[int]:
        """The ids the model is fed this turn: the prompt, or the ids so far and the
        template's rendering of the environment's answer (the notice on its last message)."""
        if self._ids is None:
            message = append_notice(observation, notice) if notice else observation
            self._messages = self.codec.opening_messages(self._instructions, message)
            self._prompt_text = self.codec.render(
                self._messages, generation_prompt=True, tools=self._tools
            )
            return self.codec.encode(self._prompt_text)
        if self._env is not None:
            new = with_notice(self._answers, notice)
        else:
            new = with_notice([{"role": "user", "content": observation}], notice)
        self._prompt_text, ids = self.codec.continuation(
            self._messages, new, self._tools, self._prompt_text
        )
        self._messages.extend(new)
        return self._ids + ids


def deployment_notice(path: str | Path) -> NotifyEveryTurn | None:
    """The notice policy the checkpoint at ``path`` was trained with:
    ``NotifyEveryTurn(format=..., placement=...)`` from its ``training_env.json``, the one
    to give the controller that deploys it; ``None`` when the directory records none (a
    model not trained with budgetmix, or trained before the file recorded it).

    Raises:
        ConfigError: the file records an unknown placement or format.
    """
    from budgetmix.training.data.provenance import read_training_notice

    notice = read_training_notice(path)
    if notice is None:
        return None
    placement = cast("NoticePlacement", notice["placement"])
    return NotifyEveryTurn(format=notice["format"], placement=placement)


def chat_model(path: str | Path, **options: Any) -> Any:
    """The checkpoint as a :class:`~budgetmix.adapters.local.LocalChatModel` (never downloads).

    Its ``trained_notice`` is :func:`deployment_notice` of ``path``: ``run_agent`` refuses
    a controller whose notice placement or format differs from it (set it to ``None`` to
    deploy the model otherwise on purpose). Its replies are parsed with the recorded
    ``tool_call_format``, and ``trained_grace_turn`` is the recorded ``grace_turn``
    (``False``: ``run_agent`` refuses ``exhaustion="grace"``).

    Raises:
        ConfigError: ``path`` is not a local directory, a bad option, or a file that
            records an unknown parser.
        CheckpointError: a file the manifest lists is damaged (the message names it).
    """
    from budgetmix.adapters.local import LocalChatModel
    from budgetmix.training.data.provenance import read_training_grace, read_training_parser

    options.setdefault("tool_call_format", read_training_parser(path))
    model = LocalChatModel.from_pretrained(path, local_files_only=True, **options)
    model.trained_notice = deployment_notice(path)
    model.trained_grace_turn = read_training_grace(path)
    return model
