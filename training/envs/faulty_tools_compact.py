"""``faulty-tools-compact``: the tool environment with injected faults, in one-letter moves.

:class:`~budgetmix.training.envs.faulty_tools.FaultyToolsEnv`'s task (follow a
chain of ``hops`` lookups to a value, with flaky tools) in a text a tiny
char-level model can learn in CPU minutes, the way
:class:`~budgetmix.training.envs.frozenlake_compact.CompactFrozenLake` shrinks
FrozenLake. Each turn the agent writes one letter:

* ``n`` -- look up the next link of the chain;
* ``a`` -- answer with the value at the end of the chain (right only once the
  chain is complete; before that it answers a pointer: wrong, the episode ends);
* ``g`` -- guess now, from a partial chain: right with probability ``guess_p``;
  the episode ends either way.

Every one of them is a tool call and fails with probability ``fault_p`` (an
injected fault: ``mistake="tool_error"``, the turn is spent, nothing changes,
retrying may help; one draw per call from a generator seeded by ``reset``,
like FaultyToolsEnv's flaky lookups; guesses draw from a second one). The
observation is the number of links found as one letter repeated (``A`` none,
``B`` one, ... the letter after the last link means the chain is complete), six
copies as in frozenlake-compact, followed by ``!`` after a failed call and ``?``
after a reply that was no move (``model_format_error``) or a lookup with no next
key. The budget notice is not part of the observation: rollouts and the
controller append it.

Labels (reusing FaultyToolsEnv's vocabulary): a fault ``tool_error``; a new link
or a right answer/guess ``progress``; a lookup past the end
``invalid_tool_arguments`` (valid, refused); an unparseable reply
``model_format_error`` (``valid=False``); a wrong answer or guess ends the episode
with ``detail`` saying which (no mistake kind fits a planning error).

``state`` is ``(links, last_call_failed)``, which the exact model
(:mod:`budgetmix.training.envs.faulty_tools_oracle`) and the diagnostics read;
``model`` is that model. The environment stands alone (no ``inner``), so
:func:`~budgetmix.environment.unwrap` returns it.
"""

from __future__ import annotations

import random

from budgetmix.environment import EnvStateError, StepLabel, StepResult
from budgetmix.events import MistakeKind
from budgetmix.training.envs.faulty_tools_oracle import (
    ANSWER,
    GUESS,
    NEXT,
    ToolsModel,
    parse_tool_move,
)

__all__ = ["LINK_NAMES", "OBS_REPEAT", "TOOLS_COMPACT_ENV_NAME", "CompactFaultyTools"]

#: Link-count letters: ``A`` no link found, ``B`` one, ...
LINK_NAMES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Copies of the state letter in an observation (as in frozenlake-compact).
OBS_REPEAT = 6
_CALLS = ("lookup", "answer", "guess")
#: The name the environment registry knows this environment by.
TOOLS_COMPACT_ENV_NAME = "faulty-tools-compact"


class CompactFaultyTools:
    """A chain of ``hops`` flaky lookups, then an answer; or a guess (see the module notes).

    Args:
        hops: lookups on the chain.
        fault_p: probability that a tool call fails (``tool_error``).
        guess_p: probability that a guess is right.

    Raises:
        ConfigError: ``hops`` outside ``1..25``, ``fault_p`` outside ``[0, 1)``,
            ``guess_p`` outside ``[0, 1]``.
    """

    name = TOOLS_COMPACT_ENV_NAME

    def __init__(self, hops: int = 9, fault_p: float = 0.2, guess_p: float = 0.25) -> None:
        self.model = ToolsModel(hops, fault_p, guess_p)
        self.links = 0
        self.failed = False
        self.done = False
        self.success = False
        self.steps = 0
        self._mark = ""
        self._faults = random.Random(0)
        self._guesses = random.Random(0)
        self._started = False

    @property
    def state(self) -> tuple[int, bool]:
        """``(links found, whether the last tool call failed)``."""
        return self.links, self.failed

    @property
    def hops(self) -> int:
        """Lookups on the chain."""
        return self.model.hops

    def instructions(self) -> str:
        """The task and the move letters, in one short line."""
        last = LINK_NAMES[self.hops]
        return (
            f"Chain of {self.hops} lookups, tools fail (!): retry. You see links found "
            f"A..{last}. n next lookup, a answer (at {last}), g guess now."
        )

    def _obs(self) -> str:
        text = " ".join([LINK_NAMES[self.links]] * OBS_REPEAT)
        return f"{text} {self._mark}" if self._mark else text

    def reset(self, seed: int) -> str:
        """Start with no link found; ``seed`` fixes the faults and the guesses."""
        self.links, self.failed, self.done, self.success, self.steps = 0, False, False, False, 0
        self._mark = ""
        self._faults = random.Random(f"faults:{seed}")
        self._guesses = random.Random(f"guesses:{seed}")
        self._started = True
        return self._obs()

    def _result(self, label: StepLabel, *, done: bool = False, success: bool = False) -> StepResult:
        self.done, self.success = done, success
        return StepResult(
            observation=self._obs(),
            reward=1.0 if success else 0.0,
            done=done,
            success=success,
            label=label,
            info={"links": self.links, "failed": self.failed},
        )

    def step(self, action: str) -> StepResult:
        """Apply one move; a reply that is no move spends the turn (``model_format_error``).

        Raises:
            EnvStateError: before ``reset`` or after the episode ended.
        """
        if not self._started or self.done:
            raise EnvStateError("call reset() first" if not self._started else "episode is over")
        self.steps += 1
        move = parse_tool_move(action)
        if move is None:
            self.failed, self._mark = False, "?"
            label = StepLabel(
                valid=False, mistake=MistakeKind.MODEL_FORMAT_ERROR.value, detail="no move"
            )
            return self._result(label)
        self.failed = self._faults.random() < self.model.fault_p  # one draw per tool call
        if self.failed:
            self._mark = "!"
            detail = f"{_CALLS[move]} failed (injected fault)"
            return self._result(StepLabel(mistake=MistakeKind.TOOL_ERROR.value, detail=detail))
        self._mark = ""
        if move == NEXT:
            return self._lookup()
        if move == ANSWER:
            right = self.links == self.hops
            detail = "right answer" if right else "wrong answer: the chain is incomplete"
            return self._result(StepLabel(progress=right, detail=detail), done=True, success=right)
        assert move == GUESS
        right = self._guesses.random() < self.model.guess_p
        detail = "guess right" if right else "guess wrong"
        return self._result(StepLabel(progress=right, detail=detail), done=True, success=right)

    def _lookup(self) -> StepResult:
        if self.links == self.hops:
            self._mark = "?"
            label = StepLabel(
                mistake=MistakeKind.INVALID_TOOL_ARGUMENTS.value,
                detail="no next key: chain complete",
            )
            return self._result(label)
        self.links += 1
        return self._result(StepLabel(progress=True, detail=f"link {self.links} found"))
