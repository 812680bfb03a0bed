"""Rollouts through the production path: the controller, an OpenAI client, an inference server.

:class:`ServerRollouts` plays each episode exactly as production does: a
:class:`~budgetmix.BudgetController` for the drawn budget (notice placement
``"observation"``, the trained layout), the environment's deployed tools
(``env.controller_tools()``), and ``run_agent`` over an ``openai.OpenAI``
client (or the team's own loop over ``budgeted(client)``: ``agent=``), against
an OpenAI-compatible server: vLLM, or
:class:`~budgetmix.training.serving.openai_server.LocalOpenAIServer` on CPU. The server
renders the chat template itself; what is trained is what it saw and sampled.

Token ids come from the server, never re-tokenized here. The client's HTTP
transport (:class:`~budgetmix.training.serving.server_tokens.TokenCapture`) adds vLLM's
request fields to every Chat Completions request (``return_token_ids``, ``logprobs``,
``return_tokens_as_token_ids``) and records, per request, the response's
``prompt_token_ids``, ``choices[0].token_ids`` and the log-prob of each sampled
id. A server that returns no ids fails the batch with a
:class:`~budgetmix.ConfigError` naming the missing field.

Stitching: the prompt ids of turn n+1 must start with the prompt ids + the
completion ids of turn n (a prefix-stable template, ids kept as sampled). Then
an episode is one :class:`~budgetmix.training.rollouts.rollout.Rollout` whose ids are the
last prompt + its completion, ``response_mask`` 1 exactly on the completion ids,
``logprobs`` the server's. Otherwise (a template that re-renders earlier turns,
a reply re-tokenized differently) the episode falls back to one row per turn
(prompt ids of the turn, its completion as the response, the episode's reward on
each row) and is counted in :attr:`ServerRollouts.report`.

Weights: the server must sample from the current policy; see docs/training.md
("Server rollouts") for vLLM's weight-transfer endpoints, and
:class:`~budgetmix.training.serving.openai_server.LocalOpenAIServer` (shared model object or
``/reload_weights``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from budgetmix.adapters import budgeted, run_agent
from budgetmix.adapters.loop import AgentRun
from budgetmix.adapters.openai import OpenAIChatModel
from budgetmix.budget import Budget
from budgetmix.controller import BudgetController
from budgetmix.environment import StepLabel, StepResult
from budgetmix.events import EpisodeResult, EpisodeStatus, MistakeKind
from budgetmix.exceptions import ConfigError, ProviderError
from budgetmix.policies import NotifyEveryTurn
from budgetmix.policies.samplers import BudgetDraw
from budgetmix.training.envs.tool_env import ToolEnv
from budgetmix.training.rollouts.rollout import (
    EpisodeSpec,
    Rollout,
    RolloutSettings,
    RolloutStep,
    Termination,
)
from budgetmix.training.serving.server_tokens import (
    StitchedRow,
    TokenCapture,
    TokenLog,
    stitch,
    token_log,
)

__all__ = [
    "EpisodeAgent",
    "ServerEpisode",
    "ServerReport",
    "ServerRollouts",
    "run_agent_episode",
]

#: Mistakes of the reply's form (the model's), not refusals by the environment.
_NOT_YOURS = frozenset({MistakeKind.UNKNOWN_TOOL, MistakeKind.INVALID_TOOL_ARGUMENTS})


# -- one episode ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ServerEpisode:
    """What an agent loop gets to play one episode: the environment (reset), its task
    (the first user message), the controller, the environment's deployed tools, the
    ``run_agent`` chat model, a client budgeted by the controller, the request options
    (``model``, ``max_tokens``, ``temperature``) a loop of its own should send, and the
    server's ``base_url`` (for a framework's own client: its HTTP transport
    ``BudgetTransport(TokenCapture(), controller)`` records the ids the same way)."""

    env: ToolEnv
    task: str
    controller: BudgetController
    tools: list[Any]
    chat_model: OpenAIChatModel
    client: Any
    request_options: dict[str, Any]
    base_url: str = ""


#: An agent loop: plays the episode, returns run_agent's AgentRun or the episode's result.
EpisodeAgent = Callable[[ServerEpisode], "AgentRun | EpisodeResult"]


def run_agent_episode(episode: ServerEpisode) -> AgentRun:
    """The default loop: ``run_agent`` with the environment's tools, instructions and judge."""
    env = episode.env
    return run_agent(
        episode.chat_model,
        episode.tools,
        episode.task,
        episode.controller,
        system=env.instructions(),
        judge=env.judge,
    )


@dataclass(frozen=True, slots=True)
class ServerReport:
    """One batch: episodes played, training rows, episodes split into one row per turn
    (with the turn whose prompt broke the prefix), completions cut by ``max_tokens``."""

    episodes: int
    rows: int
    split_episodes: int
    split_turns: tuple[int, ...]
    cut_completions: int
    requests: int


_TERMINATION: dict[EpisodeStatus, Termination] = {
    EpisodeStatus.SUCCESS: "success",
    EpisodeStatus.FAILED: "failure",
    EpisodeStatus.BUDGET_EXHAUSTED: "budget_exhausted",
    EpisodeStatus.EARLY_STOPPED: "budget_exhausted",
}


def _default_controller(draw: BudgetDraw, settings: RolloutSettings) -> BudgetController:
    notice = NotifyEveryTurn(format=settings.notice_format, placement="observation")
    # a fixed clock, as training's ledger has: notices must not depend on the machine's speed
    return BudgetController(Budget(turns=draw.turns), notice=notice, clock=lambda: 0.0)


@dataclass(slots=True)
class _Played:
    spec: EpisodeSpec
    slot: TokenLog
    status: EpisodeStatus | None
    results: list[tuple[int, StepResult]]
    mistakes: dict[int, MistakeKind]
    turns: int
    length: bool = False
    #: the conversation as the loop ended it (a run that a tool result ended has that
    #: result after the last request): what each turn's observation is read from
    final: tuple[Mapping[str, Any], ...] = ()


class ServerRollouts:
    """Roll out episodes through the controller and an OpenAI-compatible server.

    Args:
        base_url: the server's OpenAI base URL (``http://host:port/v1``).
        model: the served model's name.
        settings: notice format, ``max_new_tokens`` (each request's ``max_tokens``).
        temperature: each request's sampling temperature.
        agent: the loop that plays an episode (default :func:`run_agent_episode`).
        controller: builds an episode's controller from its budget draw (default: the
            drawn turns, ``NotifyEveryTurn(placement="observation")``).
        max_parallel: episodes played at once (the server batches their requests).
        transport: the HTTP transport under :class:`TokenCapture` (tests).

    Calling it with episode specs returns the :class:`Rollout` rows the trainer trains
    on; :attr:`report` describes the last batch.

    Raises:
        ConfigError: ``max_parallel`` below 1.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        settings: RolloutSettings | None = None,
        temperature: float = 1.0,
        agent: EpisodeAgent = run_agent_episode,
        controller: Callable[[BudgetDraw, RolloutSettings], BudgetController] = (
            _default_controller
        ),
        max_parallel: int = 8,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import openai

        if max_parallel < 1:
            raise ConfigError(f"ServerRollouts.max_parallel must be >= 1, got {max_parallel!r}")
        self.settings = settings or RolloutSettings()
        self.model = model
        self.agent = agent
        self.controller = controller
        self.max_parallel = max_parallel
        self.request_options = {
            "max_tokens": self.settings.max_new_tokens,
            "temperature": temperature,
        }
        # openai 3.57 takes an httpx client as well as an httpx2 one (its type names httpx2)
        http: Any = httpx.Client(transport=TokenCapture(transport), timeout=600)
        self.client = openai.OpenAI(
            base_url=base_url, api_key="budgetmix-local", http_client=http, max_retries=0
        )
        self.report = ServerReport(0, 0, 0, (), 0, 0)

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    def __call__(self, specs: Sequence[EpisodeSpec]) -> list[Rollout]:
        """Play every spec's episode (in parallel); its rows, in spec order.

        Raises:
            ConfigError: an environment that is not a :class:`ToolEnv`, or a server that
                returns no token ids (the message names the field).
            ProviderError: the server failed (other than a context overflow).
        """
        with ThreadPoolExecutor(self.max_parallel, thread_name_prefix="budgetmix-rollout") as pool:
            played = list(pool.map(self._play, specs))
        for p in played:
            if p.slot.error is not None:
                raise p.slot.error
        out: list[Rollout] = []
        split: list[int] = []
        for p in played:
            rows, broke = stitch(p.slot.exchanges)
            if broke is not None:
                split.append(broke)
            out += [_rollout(p, row) for row in rows]
        exchanges = [e for p in played for e in p.slot.exchanges]
        self.report = ServerReport(
            episodes=len(played),
            rows=len(out),
            split_episodes=len(split),
            split_turns=tuple(split),
            cut_completions=sum(e.finish_reason == "length" for e in exchanges),
            requests=len(exchanges),
        )
        return out

    def _episode(self, env: ToolEnv, task: str, spec: EpisodeSpec) -> ServerEpisode:
        """The episode the agent plays: its controller, tools, chat model and client."""
        controller = self.controller(spec.budget, self.settings)
        return ServerEpisode(
            env=env,
            task=task,
            controller=controller,
            tools=env.controller_tools(),
            chat_model=OpenAIChatModel(
                self.client,
                self.model,
                provider_name="openai_compatible",
                request_options=self.request_options,
            ),
            client=budgeted(self.client, controller),
            request_options={**self.request_options, "model": self.model},
            base_url=str(self.client.base_url),
        )

    def _play(self, spec: EpisodeSpec) -> _Played:
        env = spec.task.make_env()
        if not isinstance(env, ToolEnv):
            raise ConfigError(
                f"ServerRollouts: environment {type(env).__name__!r} is not a ToolEnv "
                "(server rollouts play its deployed tools under the controller)"
            )
        slot = TokenLog()
        results: list[tuple[int, StepResult]] = []
        _record_results(env, results, slot)
        episode = self._episode(env, env.reset(spec.task.seed), spec)
        token = token_log.set(slot)
        full = False
        try:
            outcome: AgentRun | EpisodeResult | None = self.agent(episode)
        except ProviderError as exc:
            if not _context_full(exc):
                raise
            outcome = None  # the context is full: truncated, as a training rollout is
            full = True
        finally:
            token_log.reset(token)
        result = outcome.result if isinstance(outcome, AgentRun) else outcome
        if not full and not isinstance(result, EpisodeResult):
            raise ConfigError(
                "ServerRollouts: the agent must return run_agent's AgentRun or the episode's "
                f"EpisodeResult, got {type(outcome).__name__}"
            )
        mistakes: dict[int, MistakeKind] = {}
        for m in result.mistakes if result is not None else ():
            mistakes.setdefault(m.turn, m.kind)
        return _Played(
            spec=spec,
            slot=slot,
            status=result.status if result is not None else None,
            results=results,
            mistakes=mistakes,
            turns=result.turns_used if result is not None else len(slot.exchanges),
            length=result is None,
            final=tuple(
                {"role": m.role, "content": m.content}
                for m in (outcome.messages if isinstance(outcome, AgentRun) else ())
            ),
        )


def _context_full(exc: BaseException) -> bool:
    """Whether the server refused the request as longer than its context (vLLM's wording,
    kept by the SDK's error the ProviderError is raised from)."""
    return any("maximum context length" in str(e) for e in (exc, exc.__cause__) if e)


def _record_results(env: ToolEnv, into: list[tuple[int, StepResult]], slot: TokenLog) -> None:
    """Record every step result ``env`` makes, with the turn it belongs to (the number of
    exchanges so far): rewards and labels as the environment gave them."""
    make = env._result  # the one place a ToolEnv builds its StepResults

    def recording(*args: Any, **kwargs: Any) -> StepResult:
        result = make(*args, **kwargs)
        into.append((len(slot.exchanges), result))
        return result

    setattr(env, "_result", recording)  # noqa: B010 - an instance attribute over the method


def _rollout(p: _Played, row: StitchedRow) -> Rollout:
    termination: Termination = (
        "length" if p.length or p.status is None else _TERMINATION.get(p.status, "failure")
    )
    reward = sum(r.reward for _, r in p.results)
    exchanges = p.slot.exchanges
    last = exchanges[-1]
    return Rollout(
        task_id=p.spec.task.task_id,
        seed=p.spec.task.seed,
        group=p.spec.group,
        budget=p.spec.budget,
        prompt_ids=row.prompt_ids,
        response_ids=row.response_ids,
        response_mask=row.response_mask,
        logprobs=row.logprobs,
        reward=reward if termination in ("success", "failure", "format_error") else 0.0,
        success=termination == "success",
        num_turns=p.turns,
        termination=termination,
        steps=tuple(_steps(p)),
        messages=(*last.messages, {"role": "assistant", **last.reply}),
    )


def _steps(p: _Played) -> list[RolloutStep]:
    """One record per turn: the reply, the environment's answer, its reward and label."""
    out = []
    final = p.final or (p.slot.exchanges[-1].messages if p.slot.exchanges else ())
    answers = _answers(final)
    for turn, ex in enumerate(p.slot.exchanges, start=1):
        mine = [r for t, r in p.results if t == turn]
        kind = p.mistakes.get(turn)
        if kind is not None:
            label = StepLabel(valid=kind not in _NOT_YOURS, mistake=str(kind))
        else:
            label = StepLabel(progress=any(r.label.progress for r in mine))
        reply = ex.reply
        action = str(reply.get("content") or "")
        if reply.get("tool_calls"):
            action += json.dumps(reply["tool_calls"])
        out.append(
            RolloutStep(
                turn=turn,
                action=action,
                observation=answers[turn - 1] if turn <= len(answers) else "",
                reward=sum(r.reward for r in mine),
                label=label,
            )
        )
    return out


def _answers(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The environment's messages after each assistant message, joined by newlines."""
    out: list[list[str]] = []
    for m in messages:
        if m.get("role") == "assistant":
            out.append([])
        elif out and m.get("role") in ("tool", "user"):
            out[-1].append(str(m.get("content") or ""))
    return ["\n".join(parts) for parts in out]
