"""Budget-aware multi-turn rollouts, many episodes in parallel, token-in/token-out.

Per episode: a real :class:`~budgetmix.ledger.Ledger` for the drawn budget T
charges each turn before the model is called, and the turn's observation
carries the notice rendered from its state (:func:`environment_message`,
placement ``"observation"``: kept in the history, as the controller does for a
model trained here). The chat is the deployment layout (docs/layout.md):
``[system: instructions, user: task + notice]``, then per turn the assistant
message and the environment's messages: for a
:class:`~budgetmix.training.envs.tool_env.ToolCallEnvironment` one ``tool``
message per call (the last carries the notice; several calls are one turn), or
a ``user`` message for a reply without calls and for a text
:class:`~budgetmix.environment.Environment` (:mod:`budgetmix.training.rollouts.env_turn`, which
a served checkpoint shares). Tools go to the template on every render. The ids of
turn n+1 are the ids so far + the sampled ids (as sampled) + the template's
rendering of the new messages (:meth:`ChatCodec.continuation`); only sampled ids
have ``response_mask`` 1. A rollout that runs out of budget gets reward 0 and
stays in the batch.

Termination reasons: ``success``; ``failure`` (the environment ended the
episode without success); ``format_error`` (it ended it on an invalid
action); ``budget_exhausted`` (the ledger refused the next turn);
``length`` (a response hit ``max_new_tokens`` without EOS, or the next turn
would not fit in ``max_total_tokens``: truncated, and labelled so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from budgetmix._validate import check_choice, check_int
from budgetmix.adapters.base import ToolSpec
from budgetmix.environment import StepLabel, Task
from budgetmix.exceptions import ConfigError
from budgetmix.ledger import fixed_clock_ledger
from budgetmix.notice import NOTICE_PLACEMENTS, NoticePlacement
from budgetmix.policies.samplers import BudgetDraw
from budgetmix.policy import NoticePolicy, NotifyEveryTurn, notice_placement
from budgetmix.training.envs.tool_env import ToolCallEnvironment
from budgetmix.training.rollouts.chat import (
    ChatCodec,
    TokenDrift,
    TokenDriftError,
    environment_message,
    turn_notice,
)
from budgetmix.training.rollouts.env_turn import environment_answer, reply_message, with_notice
from budgetmix.training.rollouts.generation import GenerationRequest, TokenGenerator

__all__ = [
    "EpisodeSpec",
    "Rollout",
    "RolloutSettings",
    "RolloutStep",
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
    re-render of its chat and records what differs in :attr:`Rollout.drifts`
    (classified, :data:`~budgetmix.training.rollouts.chat.DriftKind`); ``"strict"`` also
    raises :class:`TokenDriftError` on a template or boundary error (non-canonical
    sampled tokens are counted, never fatal).

    ``notice_placement`` is the notice policy's placement the rollouts follow; only
    ``"observation"`` (kept in the observation: one row per episode, the layout a
    controller with the same placement feeds) is implemented (docs/layout.md).
    ``notice`` is the :class:`~budgetmix.policy.NoticePolicy` that decides each turn's
    notice, as the controller's does at deployment (default: every turn, in
    ``notice_format``); its format and placement must be ``notice_format`` and
    ``notice_placement``.

    Raises:
        ConfigError: a non-positive token limit, a placement other than
            ``"observation"``, or a ``notice`` policy of another format or placement
            (message names the field).
    """

    notice_format: str = "v1"
    notice_placement: NoticePlacement = "observation"
    max_new_tokens: int = 32
    max_total_tokens: int = 2048
    token_check: TokenCheck = "off"
    notice: NoticePolicy | None = None

    def __post_init__(self) -> None:
        check_choice("RolloutSettings.token_check", self.token_check, ("off", "report", "strict"))
        check_choice("RolloutSettings.notice_placement", self.notice_placement, NOTICE_PLACEMENTS)
        if self.notice_placement != "observation":
            raise ConfigError(
                "RolloutSettings.notice_placement 'ephemeral' needs one training row per turn, "
                "which is not implemented; train with 'observation' (docs/layout.md)"
            )
        for name in ("max_new_tokens", "max_total_tokens"):
            check_int(f"RolloutSettings.{name}", getattr(self, name), minimum=1)
        if self.notice is not None:
            got = (self.notice.format, notice_placement(self.notice))
            if got != (self.notice_format, self.notice_placement):
                raise ConfigError(
                    f"RolloutSettings.notice: format and placement {got} differ from "
                    f"notice_format / notice_placement "
                    f"{(self.notice_format, self.notice_placement)}"
                )

    def notice_policy(self) -> NoticePolicy:
        """The policy that decides each turn's notice (``notice``, or every turn)."""
        if self.notice is not None:
            return self.notice
        return NotifyEveryTurn(format=self.notice_format, placement=self.notice_placement)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeSpec:
    """One episode to roll out: a task, its budget draw and its GRPO group."""

    task: Task
    budget: BudgetDraw
    group: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutStep:
    """One turn: the reply text and what the environment said about it (a turn's tool calls
    combined: rewards summed, observations joined by newlines, the first mistake's label)."""

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
    sampled ids (a scripted demonstrator's injected error, ``imitate=False``, is 0:
    executed, not learned); ``logprobs`` holds the sampler's log-prob of each sampled id
    (0.0 elsewhere). ``messages`` is the chat (OpenAI-style rows, notices in the
    observations). With a token check, ``drifts`` lists what differs from a full
    re-render and ``drift`` is the first fatal one, else the first.
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
    steps: tuple[RolloutStep, ...]
    messages: tuple[dict[str, Any], ...] = field(repr=False)
    drift: TokenDrift | None = None
    drifts: tuple[TokenDrift, ...] = ()

    @property
    def noncanonical_spans(self) -> int:
        """Sampled spans whose ids are not the canonical tokenization of their text (fine)."""
        return sum(d.kind == "tokenization" for d in self.drifts)

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
        "prompt_text",
        "reward",
        "spec",
        "steps",
        "termination",
        "tools",
    )

    def __init__(self, spec: EpisodeSpec, codec: ChatCodec, notice: NoticePolicy) -> None:
        self.spec = spec
        env = spec.task.make_env()
        self.tools: tuple[ToolSpec, ...] = (
            tuple(env.tool_specs()) if isinstance(env, ToolCallEnvironment) else ()
        )
        self.env: Any = env  # a text Environment or a ToolCallEnvironment
        # A fixed clock: notices must not depend on how fast the machine is.
        self.ledger = fixed_clock_ledger(spec.budget.turns)
        observation = self.env.reset(spec.task.seed)
        refused = self.ledger.try_charge_turn()
        assert refused is None  # Budget.turns >= 1, so the first turn always fits
        state = self.ledger.state(in_turn=True)
        self.message = environment_message(observation, state, notice.format, notice)
        self.messages: list[dict[str, Any]] = codec.opening_messages(
            self.env.instructions(), self.message
        )
        self.prompt_text = codec.render(self.messages, generation_prompt=True, tools=self.tools)
        self.ids = codec.encode(self.prompt_text)
        self.prompt_len = len(self.ids)
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.steps: list[RolloutStep] = []
        self.reward = 0.0
        self.termination: Termination | None = None

    def request(self, key: int) -> GenerationRequest:
        return GenerationRequest(
            self.ids,
            self.env,
            self.message,
            self.ledger.state(in_turn=True),
            key,  # a caching generator feeds only the ids since the last turn
            messages=tuple(self.messages),
            tools=self.tools,
        )


def run_rollouts(
    specs: Sequence[EpisodeSpec],
    generator: TokenGenerator,
    codec: ChatCodec,
    settings: RolloutSettings,
) -> list[Rollout]:
    """Roll out every episode of ``specs`` in parallel; one :class:`Rollout` per spec, in order.

    Raises:
        TokenDriftError: ``settings.token_check == "strict"`` and a rollout's ids differ
            from a full re-render of its chat in a template or boundary span.
        TemplateStabilityError: the chat template re-renders earlier turns once the
            environment's messages are added (see docs/layout.md for the way out).
        ConfigError: the notice format is unknown.
    """
    notice = settings.notice_policy()
    episodes = [_Episode(spec, codec, notice) for spec in specs]
    for ep in episodes:
        if ep.prompt_len + settings.max_new_tokens > settings.max_total_tokens:
            ep.termination = "length"
    while True:
        active = [ep for ep in episodes if ep.termination is None]
        if not active:
            break
        requests = [ep.request(n) for n, ep in enumerate(episodes) if ep.termination is None]
        for ep, gen in zip(
            active, generator.generate(requests, settings.max_new_tokens), strict=True
        ):
            ep.ids.extend(gen.ids)
            ep.mask.extend([int(gen.imitate)] * len(gen.ids))
            ep.logprobs.extend(gen.logprobs)
            _advance(ep, gen.ids, gen.stopped, codec, settings)
    return [_finish(ep, codec, settings) for ep in episodes]


def _advance(
    ep: _Episode, sampled: Sequence[int], stopped: bool, codec: ChatCodec, settings: RolloutSettings
) -> None:
    text = codec.reply_text(sampled, stopped=stopped)
    turn = ep.ledger.state().turns_used
    reply = reply_message(codec, text, turn, tools=bool(ep.tools))
    ep.messages.append(reply)
    if not stopped:
        ep.termination = "length"
        return
    result, answers = environment_answer(ep.env, reply, tools=bool(ep.tools))
    ep.reward += result.reward
    ep.steps.append(
        RolloutStep(
            turn=turn,
            action=text,
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
    notice = turn_notice(ep.ledger.state(in_turn=True), settings.notice_policy())
    answers = with_notice(answers, notice)
    prompt_text, env_ids = codec.continuation(ep.messages, answers, ep.tools, ep.prompt_text)
    if len(ep.ids) + len(env_ids) + settings.max_new_tokens > settings.max_total_tokens:
        ep.ledger.refund_turn()  # the turn was never taken
        ep.termination = "length"
        return
    ep.message = answers[-1]["content"]
    ep.messages.extend(answers)
    ep.prompt_text = prompt_text
    ep.ids.extend(env_ids)
    ep.mask.extend([0] * len(env_ids))
    ep.logprobs.extend([0.0] * len(env_ids))


def _finish(ep: _Episode, codec: ChatCodec, settings: RolloutSettings) -> Rollout:
    assert ep.termination is not None
    drifts: list[TokenDrift] = []
    if settings.token_check != "off":
        mask = [0] * ep.prompt_len + ep.mask
        drifts = codec.drifts(ep.messages, ep.ids, sampled_mask=mask, tools=ep.tools)
        fatal = next((d for d in drifts if d.fatal), None)
        if fatal is not None and settings.token_check == "strict":
            raise TokenDriftError(fatal)
    drift = next((d for d in drifts if d.fatal), drifts[0] if drifts else None)
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
        drifts=tuple(drifts),
    )
