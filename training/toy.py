"""A trivially learnable multi-turn environment and its scripted agent (tests, CPU demo).

``EchoEnv``: each episode asks for a short sequence of letters, one per turn
(``echo c``); answering the shown letter advances, anything else is a mistake
and the same letter is asked again. Success after the last letter. An episode
needs as many turns as it has letters, so tight budgets bite exactly when the
policy makes mistakes: recovery costs turns. Small enough that a 2-layer,
hidden-64 model learns it on a CPU in seconds.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from budgetmix.environment import StepLabel, StepResult
from budgetmix.exceptions import ConfigError

if TYPE_CHECKING:
    from budgetmix.training.rollouts.generation import GenerationRequest

__all__ = ["EchoEnv", "echo_agent"]


class EchoEnv:
    """Echo letters back, one per turn; reward 1.0 on success.

    Raises:
        ConfigError: empty ``letters`` or lengths outside ``1 <= min_len <= max_len``.
    """

    name = "echo"

    def __init__(self, letters: str = "abcd", min_len: int = 1, max_len: int = 3) -> None:
        if not letters or not 1 <= min_len <= max_len:
            raise ConfigError("EchoEnv needs letters and 1 <= min_len <= max_len")
        self.letters = letters
        self.min_len = min_len
        self.max_len = max_len
        self.targets: list[str] = []
        self.position = 0

    def instructions(self) -> str:
        """The task statement: reply with the letter after ``echo`` and nothing else."""
        return "Reply with the letter after 'echo', nothing else."

    def reset(self, seed: int) -> str:
        """Draw the episode's letter sequence from ``seed``; returns ``echo <first letter>``."""
        rng = random.Random(seed)
        length = rng.randint(self.min_len, self.max_len)
        self.targets = [rng.choice(self.letters) for _ in range(length)]
        self.position = 0
        return f"echo {self.targets[0]}"

    @property
    def target(self) -> str:
        """The letter the episode asks for now."""
        return self.targets[self.position]

    def step(self, action: str) -> StepResult:
        """Advance on the asked letter (reward 1.0 and done after the last); otherwise ask
        again, labelled ``env_action_failed`` for another letter, ``model_format_error`` else."""
        answer = action.strip()
        if answer == self.target:
            self.position += 1
            if self.position == len(self.targets):
                return StepResult(
                    observation="done",
                    reward=1.0,
                    done=True,
                    success=True,
                    label=StepLabel(valid=True, progress=True),
                )
            return StepResult(
                observation=f"ok. echo {self.target}", label=StepLabel(valid=True, progress=True)
            )
        valid = answer in self.letters and len(answer) == 1
        mistake = "env_action_failed" if valid else "model_format_error"
        return StepResult(
            observation=f"wrong. echo {self.target}",
            label=StepLabel(valid=valid, mistake=mistake, detail=answer[:20]),
        )


def echo_agent(error_rate: float = 0.0, seed: int = 0) -> EchoAgent:
    """A scripted agent for :class:`EchoEnv` that answers wrongly with ``error_rate``."""
    return EchoAgent(error_rate, seed)


class EchoAgent:
    """Answers the asked letter; with probability ``error_rate`` a wrong letter instead."""

    def __init__(self, error_rate: float, seed: int) -> None:
        if not 0.0 <= error_rate <= 1.0:
            raise ConfigError(f"error_rate must lie in [0, 1], got {error_rate!r}")
        self.error_rate = error_rate
        self.rng = random.Random(seed)

    def __call__(self, request: GenerationRequest) -> str:
        env = request.env
        assert isinstance(env, EchoEnv)
        if self.rng.random() < self.error_rate:
            # "abcd" keeps a wrong answer available even for a one-letter alphabet.
            wrong = sorted({c for c in env.letters + "abcd" if c != env.target})
            return self.rng.choice(wrong)
        return env.target
