"""``fault-chain-compact``: a flaky lookup chain where a mistake needs a repair, one letter a move.

The environment of issue 29's design: knowing the budget pays (a guess is the
right play only when the chain cannot be finished in the turns left) and
mistakes are non-terminal (a malformed call breaks the chain until an explicit
repair), so an agent that errs can recover. The dynamics are
:mod:`budgetmix.training.envs.fault_chain_oracle`'s (its module notes); each
turn the agent writes one letter:

* ``n`` look up the next link (an injected fault with probability ``fault_p``:
  ``tool_error``, retry);
* ``r`` repair a broken chain;
* ``a`` answer with what is in hand (the end of a complete chain, or a guess);
* ``g`` fetch a guess (right with probability ``guess_p`` when answered).

The observation is the number of links found as one letter (``A`` none, ``B``
one, ...; the letter after the last link means complete), six copies as in
frozenlake-compact, then the mode, six copies too: nothing, ``*`` (a guess in
hand) or ``x`` (broken: repair), and ``!`` after an injected fault
(``B B B B B B x x x x x x``). The mode is written six times because a tiny model
reads a one-character mark only after a long plateau (issue 29's pilots: written
once, a 2-layer model stayed at the marginal move distribution for 300+ SFT
steps and did not repair a broken chain). The budget notice is not part of the
observation: rollouts and the controller append it.

Labels: a fault ``tool_error``; a malformed call (an answer without a value, a
lookup or guess on a complete chain, an unparseable reply) breaks the chain,
``invalid_tool_arguments`` (``model_format_error``, ``valid=False``, for an
unparseable reply); a move refused while broken ``env_action_failed``; a new link,
a repair and a right answer ``progress``. ``state`` is ``(links, mode)`` and
``model`` the :class:`~budgetmix.training.envs.fault_chain_oracle.ChainModel`.
"""

from __future__ import annotations

import random

from budgetmix.environment import EnvStateError, StepLabel, StepResult
from budgetmix.events import MistakeKind
from budgetmix.training.envs.fault_chain_oracle import (
    ANSWER,
    BROKEN,
    GUESS,
    HELD,
    LOOKUP,
    OK,
    REPAIR,
    ChainModel,
    parse_chain_move,
)

__all__ = ["CHAIN_ENV_NAME", "CompactFaultChain"]

#: The name the environment registry knows this environment by.
CHAIN_ENV_NAME = "fault-chain-compact"
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_OBS_REPEAT = 6
_MODE_MARK = {OK: "", HELD: "*", BROKEN: "x"}
_MALFORMED = MistakeKind.INVALID_TOOL_ARGUMENTS.value


class CompactFaultChain:
    """A chain of ``hops`` flaky lookups with repairs and guesses (see the module notes).

    Args:
        hops: lookups on the chain.
        fault_p: probability that a lookup fails (``tool_error``).
        guess_p: probability that an answered guess is right.

    Raises:
        ConfigError: as :class:`~budgetmix.training.envs.fault_chain_oracle.ChainModel`.
    """

    name = CHAIN_ENV_NAME

    def __init__(self, hops: int = 6, fault_p: float = 0.2, guess_p: float = 0.3) -> None:
        self.model = ChainModel(hops, fault_p, guess_p)
        self.links, self.mode = 0, OK
        self.done = self.success = self._started = False
        self.steps = 0
        self._fault_mark = False
        self._faults = random.Random(0)
        self._guesses = random.Random(0)

    @property
    def state(self) -> tuple[int, int]:
        """``(links found, mode)``: mode ``OK`` 0, ``HELD`` 1, ``BROKEN`` 2."""
        return self.links, self.mode

    def instructions(self) -> str:
        """The task and the move letters, in one short line."""
        last = _LETTERS[self.model.hops]
        return (
            f"Chain of {self.model.hops} lookups A..{last}, tools fail (!): retry. x: broken, "
            "r repairs. n next, a answer (at the end, or a guess *), g fetch a guess."
        )

    def _obs(self) -> str:
        parts = [_LETTERS[self.links]] * _OBS_REPEAT
        mode = _MODE_MARK[self.mode]
        parts += [mode] * (_OBS_REPEAT if mode else 0) + (["!"] if self._fault_mark else [])
        return " ".join(parts)

    def reset(self, seed: int) -> str:
        """Start with no link found; ``seed`` fixes the faults and the guesses."""
        self.links, self.mode, self.done, self.success, self.steps = 0, OK, False, False, 0
        self._fault_mark = False
        self._faults = random.Random(f"chain-faults:{seed}")
        self._guesses = random.Random(f"chain-guesses:{seed}")
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
            info={"links": self.links, "mode": self.mode},
        )

    def _break(self, detail: str, *, valid: bool = True) -> StepResult:
        self.mode = BROKEN
        kind = _MALFORMED if valid else MistakeKind.MODEL_FORMAT_ERROR.value
        return self._result(StepLabel(valid=valid, mistake=kind, detail=detail))

    def step(self, action: str) -> StepResult:
        """Apply one move (see the module notes).

        Raises:
            EnvStateError: before ``reset`` or after the episode ended.
        """
        if not self._started or self.done:
            raise EnvStateError("call reset() first" if not self._started else "episode is over")
        self.steps += 1
        self._fault_mark = False
        move = parse_chain_move(action)
        if move is None:
            return self._break("no move: a malformed call breaks the chain", valid=False)
        if self.mode == BROKEN and move != REPAIR:
            refused = MistakeKind.ENV_ACTION_FAILED.value
            return self._result(StepLabel(mistake=refused, detail="broken: repair first"))
        if move == LOOKUP:
            return self._lookup()
        if move == ANSWER:
            return self._answer()
        if move == GUESS:
            if self.links == self.model.hops:
                return self._break("guess on a complete chain")
            self.mode = HELD
            return self._result(StepLabel(detail="guess in hand"))
        repaired = self.mode == BROKEN
        self.mode = OK
        return self._result(StepLabel(progress=repaired, detail="repaired" if repaired else "ok"))

    def _lookup(self) -> StepResult:
        if self.links == self.model.hops:
            return self._break("no next key: the chain is complete")
        if self._faults.random() < self.model.fault_p:  # one draw per lookup
            self._fault_mark = True
            label = StepLabel(mistake=MistakeKind.TOOL_ERROR.value, detail="lookup failed (fault)")
            return self._result(label)
        self.links, self.mode = self.links + 1, OK
        return self._result(StepLabel(progress=True, detail=f"link {self.links} found"))

    def _answer(self) -> StepResult:
        if self.mode == HELD:
            right = self._guesses.random() < self.model.guess_p
            detail = "guess right" if right else "guess wrong"
            return self._result(StepLabel(progress=right, detail=detail), done=True, success=right)
        if self.links < self.model.hops:
            return self._break("answer with a pointer: the chain is incomplete")
        label = StepLabel(progress=True, detail="right answer")
        return self._result(label, done=True, success=True)
