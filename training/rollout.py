"""Budget-aware multi-turn rollouts, many episodes in parallel, token-in/token-out.

Per episode: a real :class:`~budgetmix.ledger.Ledger` for the drawn budget T
charges each turn before the model is called, and the environment message
carries the notice rendered from its state (:func:`environment_message`).
The ids of turn n+1 are the ids so far + the sampled ids + the ids of the new
environment message; only sampled ids have ``response_mask`` 1. A rollout
that runs out of budget gets reward 0 and stays in the batch.

Termination reasons: ``success``; ``failure`` (the environment ended the
episode without success); ``format_error`` (it ended it on an invalid
action); ``budget_exhausted`` (the ledger refused the next turn);
``length`` (a response hit ``max_new_tokens`` without EOS, or the next turn
would not fit in ``max_total_tokens``: truncated, and labelled so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from budgetmix._validate import check_choice, check_int
from budgetmix.budget import Budget
from budgetmix.environment import StepLabel, Task
from budgetmix.ledger import Ledger
from budgetmix.policies.samplers import BudgetDraw
from budgetmix.training.chat import ChatCodec, TokenDrift, TokenDriftError, environment_message
from budgetmix.training.generation import GenerationRequest, TokenGenerator

__all__ = [
    "EpisodeSpec",
    "Rollout",
    "RolloutSettings",
    "StepRecord",
    "Termination",
    "TokenCheck",
    "run_rollouts",
]

TokenCheck = Literal["off", "report", "strict"]
Termination = Literal["success", "failure", "format_error", "budget_exhausted", "length"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutSettings:
    """Limits and checks of a rollout batch.

    ``token_check``: ``"report"`` compares every finished rollout with a full
    re-render of its chat and records any drift in :attr:`Rollout.drift`;
    ``"strict"`` raises :class:`TokenDriftError` instead.

    Raises:
        ConfigError: a non-positive token limit (message names the field).
    """

    notice_format: str = "v1"
    max_new_tokens: int = 32
    max_total_tokens: int = 2048
    token_check: TokenCheck = "off"

    def __post_init__(self) -> None:
        check_choice("RolloutSettings.token_check", self.token_check, ("off", "report", "strict"))
        for name in ("max_new_tokens", "max_total_tokens"):
            check_int(f"RolloutSettings.{name}", getattr(self, name), minimum=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeSpec:
    """One episode to roll out: a task, its budget draw and its GRPO group."""

    task: Task
    budget: BudgetDraw
    group: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One turn: the action text and what the environment said about it."""

    turn: int
    action: str
    observation: str
    reward: float
    label: StepLabel


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    """The record distributed RL engines accept, plus budget bookkeeping.

    ``response_ids`` holds everything after the opening prompt: sampled ids
    and environment-message ids interleaved; ``response_mask`` is 1 exactly on
    sampled ids; ``logprobs`` holds the sampler's log-prob of each sampled id
    (0.0 elsewhere). ``drift`` is set when the strict re-render check failed.
    """

    task_id: str
    seed: int
    group: int
    budget: BudgetDraw
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    reward: float
    success: bool
    num_turns: int
    termination: Termination
    steps: tuple[StepRecord, ...]
    messages: tuple[dict[str, str], ...] = field(repr=False)
    drift: TokenDrift | None = None

    @property
    def sampled_tokens(self) -> int:
        """How many ids of ``response_ids`` the model sampled (environment-message ids excluded)."""
        return sum(self.response_mask)


class _Episode:
    __slots__ = (
        "env",
        "ids",
        "ledger",
        "logprobs",
        "mask",
        "message",
        "messages",
        "prompt_len",
        "reward",
        "spec",
        "steps",
        "termination",
    )

    def __init__(self, spec: EpisodeSpec, codec: ChatCodec, fmt: str) -> None:
        self.spec = spec
        self.env = spec.task.make_env()
        # A fixed clock: notices must not depend on how fast the machine is.
        self.ledger = Ledger(Budget(turns=spec.budget.turns), clock=lambda: 0.0)
        observation = self.env.reset(spec.task.seed)
        refused = self.ledger.try_charge_turn()
        assert refused is None  # Budget.turns >= 1, so the first turn always fits
        self.message = environment_message(observation, self.ledger.state(in_turn=True), fmt)
        instructions = self.env.instructions()
        self.messages = codec.opening_messages(instructions, self.message)
        self.ids = codec.prompt_ids(instructions, self.message)
        self.prompt_len = len(self.ids)
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.steps: list[StepRecord] = []
        self.reward = 0.0
        self.termination: Termination | None = None


def run_rollouts(
    specs: Sequence[EpisodeSpec],
    generator: TokenGenerator,
    codec: ChatCodec,
    settings: RolloutSettings,
) -> list[Rollout]:
    """Roll out every episode of ``specs`` in parallel; one :class:`Rollout` per spec, in order.

    Raises:
        TokenDriftError: ``settings.token_check == "strict"`` and a rollout's ids differ
            from a full re-render of its chat.
        ConfigError: the notice format is unknown.
    """
    fmt = settings.notice_format
    episodes = [_Episode(spec, codec, fmt) for spec in specs]
    for ep in episodes:
        if ep.prompt_len + settings.max_new_tokens > settings.max_total_tokens:
            ep.termination = "length"
    while True:
        active = [ep for ep in episodes if ep.termination is None]
        if not active:
            break
        requests = [
            GenerationRequest(ep.ids, ep.env, ep.message, ep.ledger.state(in_turn=True))
            for ep in active
        ]
        for ep, gen in zip(
            active, generator.generate(requests, settings.max_new_tokens), strict=True
        ):
            ep.ids.extend(gen.ids)
            ep.mask.extend([1] * len(gen.ids))
            ep.logprobs.extend(gen.logprobs)
            _advance(ep, gen.ids, gen.stopped, codec, settings)
    return [_finish(ep, codec, settings) for ep in episodes]


def _advance(
    ep: _Episode, sampled: Sequence[int], stopped: bool, codec: ChatCodec, settings: RolloutSettings
) -> None:
    action = codec.decode(sampled[:-1] if stopped else sampled)
    ep.messages.append({"role": "assistant", "content": action})
    if not stopped:
        ep.termination = "length"
        return
    result = ep.env.step(action)
    ep.reward += result.reward
    ep.steps.append(
        StepRecord(
            turn=ep.ledger.state().turns_used,
            action=action,
            observation=result.observation,
            reward=result.reward,
            label=result.label,
        )
    )
    if result.done:
        if result.success:
            ep.termination = "success"
        else:
            ep.termination = "failure" if result.label.valid else "format_error"
        return
    if ep.ledger.try_charge_turn() is not None:
        ep.termination = "budget_exhausted"
        return
    message = environment_message(
        result.observation, ep.ledger.state(in_turn=True), settings.notice_format
    )
    env_ids = codec.env_message_ids(message)
    if len(ep.ids) + len(env_ids) + settings.max_new_tokens > settings.max_total_tokens:
        ep.ledger.refund_turn()  # the turn was never taken
        ep.termination = "length"
        return
    ep.message = message
    ep.messages.append({"role": "user", "content": message})
    ep.ids.extend(env_ids)
    ep.mask.extend([0] * len(env_ids))
    ep.logprobs.extend([0.0] * len(env_ids))


def _finish(ep: _Episode, codec: ChatCodec, settings: RolloutSettings) -> Rollout:
    assert ep.termination is not None
    drift = None
    if settings.token_check != "off":
        drift = codec.check_continuity(ep.messages, ep.ids)
        if drift is not None and settings.token_check == "strict":
            raise TokenDriftError(drift)
    spec = ep.spec
    # Out of budget (or truncated) means no task reward, whatever partial credit the env gave.
    reward = ep.reward if ep.termination in ("success", "failure", "format_error") else 0.0
    return Rollout(
        task_id=spec.task.task_id,
        seed=spec.task.seed,
        group=spec.group,
        budget=spec.budget,
        prompt_ids=tuple(ep.ids[: ep.prompt_len]),
        response_ids=tuple(ep.ids[ep.prompt_len :]),
        response_mask=tuple(ep.mask),
        logprobs=tuple(ep.logprobs),
        reward=reward,
        success=ep.termination == "success",
        num_turns=ep.ledger.state().turns_used,
        termination=ep.termination,
        steps=tuple(ep.steps),
        messages=tuple(ep.messages),
        drift=drift,
    )
