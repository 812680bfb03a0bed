"""One played episode as data, and how it becomes an :class:`EpisodeRecord`.

The live loop and prefix sharing go through the same two functions here:
:func:`apply_step` feeds one environment step into a budgeted episode, and
:func:`make_record` turns the episode's result plus its steps into a record.
:func:`replay` re-runs a recorded trajectory under a smaller budget without
calling the agent or the environment, which is how prefix sharing derives the
records of every smaller budget from one run of a budget-blind agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from budgetmix.budget import Budget
from budgetmix.environment import AgentReply, StepResult
from budgetmix.evaluation.failures import classify_failure
from budgetmix.evaluation.results import EpisodeRecord
from budgetmix.events import EpisodeResult, EpisodeStatus, MistakeKind
from budgetmix.exceptions import BudgetmixError

if TYPE_CHECKING:
    from budgetmix.controller import BudgetController
    from budgetmix.episode import Episode
    from budgetmix.steps import Turn

__all__ = [
    "EpisodeKey",
    "Step",
    "Trajectory",
    "apply_step",
    "make_record",
    "observed_step",
    "replay",
]

_KINDS = frozenset(str(k) for k in MistakeKind)


@dataclass(frozen=True, slots=True)
class EpisodeKey:
    """Which episode of the grid: task, sample index and the seeds derived for it."""

    task_id: str
    sample: int
    seed: int
    env_seed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One turn: the action's labels, the outcome and what the turn cost."""

    valid: bool
    progress: bool
    mistake: str | None
    detail: str
    success: bool
    done: bool
    failure_hint: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the step was a successful one: a valid action with no mistake."""
        return self.valid and self.mistake is None


@dataclass(slots=True)
class Trajectory:
    """The steps of one run, and how it ended if the agent raised at turn ``len(steps)+1``."""

    steps: list[Step] = field(default_factory=list)
    exception: str | None = None  # "provider_error" | "error"
    error: str | None = None
    in_setup: bool = False  # raised by env.reset / agent.start, before any turn
    setup_s: float = 0.0


def observed_step(result: StepResult, reply: AgentReply, *, latency_s: float) -> Step:
    """The step an environment reported for the agent's ``reply``, with what it cost."""
    label = result.label
    hint = result.info.get("failure") if result.info else None
    return Step(
        valid=label.valid,
        progress=label.progress,
        mistake=label.mistake,
        detail=label.detail,
        success=result.success,
        done=result.done,
        failure_hint=hint if isinstance(hint, str) else None,
        input_tokens=reply.input_tokens,
        output_tokens=reply.output_tokens,
        cost_usd=reply.cost_usd,
        tool_calls=int(result.info.get("tool_calls", 0)) if result.info else 0,
        latency_s=latency_s,
    )


def record_usage(turn: Turn, step: Step) -> None:
    """Charge what the agent's call cost to the turn."""
    if step.input_tokens or step.output_tokens or step.cost_usd:
        turn.usage(
            input_tokens=step.input_tokens,
            output_tokens=step.output_tokens,
            cost_usd=step.cost_usd,
        )


def apply_step(ep: Episode, step: Step) -> bool:
    """Record one environment step in ``ep``; returns whether the episode is over."""
    mistake = step.mistake
    detail = step.detail
    if mistake is not None and mistake not in _KINDS:
        # an environment-specific label: keep it in the detail, count it as a failed action
        detail = f"{mistake}: {detail}" if detail else mistake
        mistake = str(MistakeKind.ENV_ACTION_FAILED)
    ep.record_step(ok=step.ok, progress=step.progress, mistake=mistake, detail=detail)
    if step.success:
        ep.finish(True)
        return True
    if step.done:
        ep.finish(False)
        return True
    return False


def apply_exception(ep: Episode, kind: str, error: str | None) -> None:
    """End ``ep`` after the agent raised (``kind``: provider_error or error)."""
    if kind == "provider_error":
        ep.record_mistake(MistakeKind.PROVIDER_ERROR, detail=(error or "")[:200])
    ep.finish(False)


def replay(
    controller: BudgetController, traj: Trajectory, budget: int
) -> tuple[EpisodeResult, int]:
    """Re-run ``traj`` under ``budget`` turns; returns the result and the steps used."""
    used = 0
    with controller.episode(name="replay", budget=Budget(turns=budget)) as ep:
        if traj.in_setup and traj.exception is not None:
            apply_exception(ep, traj.exception, traj.error)
            return _done(ep), 0
        for step in traj.steps:
            turn = ep.try_begin_turn()
            if turn is None:
                break
            record_usage(turn, step)
            used += 1
            if apply_step(ep, step):
                break
        else:
            if traj.exception is not None:
                turn = ep.try_begin_turn()
                if turn is not None:
                    apply_exception(ep, traj.exception, traj.error)
            else:
                ep.try_begin_turn()  # the budget refuses the next turn: exhausted
    return _done(ep), used


def _done(ep: Episode) -> EpisodeResult:
    if ep.result is None:  # the with-block closes every episode; this guards misuse
        raise BudgetmixError("episode not finished")
    return ep.result


def _fault_outcome(
    steps: Sequence[Step], fault_step: int | None
) -> tuple[bool, bool | None, int | None]:
    """Whether the fault was reached, whether a good step followed it, and how many
    turns after the fault that step came (None when not reached or never recovered)."""
    if fault_step is None or len(steps) < fault_step:
        return False, None, None
    later = next((i + 1 for i, s in enumerate(steps) if i + 1 > fault_step and s.ok), None)
    return True, later is not None, later - fault_step if later is not None else None


def _failure(result: EpisodeResult, steps: Sequence[Step], raised: str | None) -> str:
    """The failure category from the status, the last step's labels and what was raised."""
    last = steps[-1] if steps else None
    return classify_failure(
        result.status,
        last_mistake=last.mistake if last else None,
        last_info={"failure": last.failure_hint} if last and last.failure_hint else None,
        exception=raised,
    )


def make_record(
    key: EpisodeKey,
    budget: int,
    result: EpisodeResult,
    traj: Trajectory,
    steps_used: int,
    *,
    latency_s: float,
    fault_step: int | None,
    training_ceiling: int | None,
    derived: bool,
) -> EpisodeRecord:
    """The record of one episode (live or derived) from its result and steps."""
    steps = traj.steps[:steps_used]
    # the agent raised within this budget iff the run was cut at its end with status
    # failed (a budget that ran out first ends budget_exhausted instead)
    ended_here = steps_used == len(traj.steps) and result.status is EpisodeStatus.FAILED
    raised = traj.exception if ended_here else None
    recovered = {m for r in result.recoveries for m in r.recovered}
    fault_injected, fault_recovered, fault_turns = _fault_outcome(steps, fault_step)
    return EpisodeRecord(
        task_id=key.task_id,
        budget=budget,
        sample=key.sample,
        seed=key.seed,
        env_seed=key.env_seed,
        success=result.success,
        status=str(result.status),
        failure=_failure(result, steps, raised),
        turns_used=result.turns_used,
        success_turn=next((i + 1 for i, s in enumerate(steps) if s.success), None),
        model_calls=result.turns_used,
        env_calls=len(steps),
        tool_calls=int(result.used.get("tool_calls", 0)) + sum(s.tool_calls for s in steps),
        input_tokens=int(result.used.get("input_tokens", 0)),
        output_tokens=int(result.used.get("output_tokens", 0)),
        cost_usd=float(result.used.get("cost_usd", 0.0)),
        latency_s=latency_s,
        steps_ok=sum(1 for s in steps if s.ok),
        mistakes=len(result.mistakes),
        mistake_kinds=tuple(str(m.kind) for m in result.mistakes),
        recoveries=len(result.recoveries),
        recovered_mistakes=len(recovered),
        turns_to_recover=tuple(r.turns_to_recover for r in result.recoveries),
        unrecovered=len(result.mistakes) - len(recovered),
        fault_step=fault_step,
        fault_injected=fault_injected,
        fault_recovered=fault_recovered,
        fault_turns_to_recover=fault_turns,
        derived=derived,
        extrapolated=training_ceiling is not None and budget > training_ceiling,
        error=traj.error if raised else None,
    )
