"""A tool-use task with injectable faults.

:class:`FaultyToolsEnv` is a pointer-chasing lookup: a table maps keys to
values; a value ``see kN`` points to another key. The agent must follow the
chain from the start key with ``lookup`` calls and answer the final plain
value. Actions are text, one per turn::

    call lookup {"key": "k3"}
    call list_keys {}
    answer amber-417

(the last line starting with ``call`` or ``answer`` counts). Faults: ``lookup``
fails with probability ``flaky_p`` (seeded by ``reset``), and every tool call
at a step in ``fail_at_steps`` (1-based) fails.

Labels per step:

* no ``call``/``answer`` line: ``valid=False``, ``mistake="model_format_error"``;
* unknown tool: ``valid=False``, ``mistake="unknown_tool"``;
* arguments that are not a JSON object with the right fields: ``valid=False``,
  ``mistake="invalid_tool_arguments"``; a key that does not exist: the same
  mistake with ``valid=True``;
* an injected or flaky failure: ``mistake="tool_error"``;
* ``progress``: a lookup that reveals a link of the chain not seen before, or
  the right answer. A wrong answer ends the episode with ``detail="wrong answer"``
  (no mistake kind fits a planning error).

:class:`~budgetmix.environment.FaultInjection` wraps any environment and rejects
chosen steps with an error observation and ``mistake="env_action_failed"``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Collection
from typing import Any

from budgetmix.environment import EnvStateError, StepLabel, StepResult
from budgetmix.exceptions import BudgetmixError, ConfigError

__all__ = ["FaultyToolsEnv", "ToolCallError", "make_tools"]

_ACTION = re.compile(
    r"^\s*[`*]*\s*(call|answer)\b[ \t]*(.*?)[`*]*\s*$", re.IGNORECASE | re.MULTILINE
)
_CALL = re.compile(r"^([A-Za-z_]\w*)\s*(.*)$", re.DOTALL)
_WORDS = ("amber", "basil", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo")
_TOOLS = ("lookup", "list_keys")


class ToolCallError(BudgetmixError, RuntimeError):
    """A tool function failed; the message is what the environment reported."""


class FaultyToolsEnv:
    """Follow a chain of ``lookup`` calls to an answer, with flaky tools.

    Args:
        hops: lookups on the chain (the answer is at the end of the ``hops``-th).
        n_keys: keys in the table (chain plus distractors).
        flaky_p: probability that a ``lookup`` call fails.
        fail_at_steps: 1-based steps at which any tool call fails.
        wrong_answer_ends: whether a wrong answer ends the episode.

    Public attributes (valid after :meth:`reset`): ``table`` (key -> value),
    ``chain`` (the keys to look up, in order), ``start_key``, ``answer``,
    ``steps`` (steps taken), ``done``, ``success``.

    Raises:
        ConfigError: ``hops`` < 1, ``n_keys`` < ``hops``, ``flaky_p`` outside
            ``[0, 1)``, or a step in ``fail_at_steps`` < 1.
    """

    name = "faulty_tools"

    def __init__(
        self,
        *,
        hops: int = 2,
        n_keys: int = 8,
        flaky_p: float = 0.0,
        fail_at_steps: Collection[int] = (),
        wrong_answer_ends: bool = True,
    ) -> None:
        if hops < 1:
            raise ConfigError(f"hops: must be >= 1, got {hops}")
        if n_keys < hops:
            raise ConfigError(f"n_keys: must be >= hops ({hops}), got {n_keys}")
        if not 0.0 <= flaky_p < 1.0:
            raise ConfigError(f"flaky_p: must be in [0, 1), got {flaky_p}")
        if any(s < 1 for s in fail_at_steps):
            raise ConfigError("fail_at_steps: steps are 1-based")
        self.hops = hops
        self.n_keys = n_keys
        self.flaky_p = flaky_p
        self.fail_at_steps = frozenset(fail_at_steps)
        self.wrong_answer_ends = wrong_answer_ends
        self.table: dict[str, str] = {}
        self.chain: tuple[str, ...] = ()
        self.answer = ""
        self.steps = 0
        self.done = False
        self.success = False
        self._started = False
        self._seen: set[str] = set()
        self._faults = random.Random(0)

    @property
    def start_key(self) -> str:
        """The key the chain starts at. Raises :class:`EnvStateError` before ``reset``."""
        if not self.chain:
            raise EnvStateError("call reset() first")
        return self.chain[0]

    def instructions(self) -> str:
        """The task, the tools and the action format."""
        return (
            "Find a value in a key-value store using tools. A value of the form 'see kN' "
            "points to key kN: follow the pointers until you reach a plain value, then "
            'answer it. Tools: lookup {"key": <str>} returns the value under a key; '
            "list_keys {} returns all keys. Tools sometimes fail; retrying may help. "
            'Each turn, write exactly one action: `call lookup {"key": "k1"}` or '
            "`answer <value>`."
        )

    def reset(self, seed: int) -> str:
        """Build the table for ``seed`` (separate RNGs for data and for faults)."""
        rng = random.Random(seed)
        keys = [f"k{i}" for i in range(self.n_keys)]
        rng.shuffle(keys)
        self.chain = tuple(keys[: self.hops])
        self.answer = f"{rng.choice(_WORDS)}-{rng.randrange(100, 1000)}"
        self.table = {k: f"see {nxt}" for k, nxt in zip(self.chain, self.chain[1:], strict=False)}
        self.table[self.chain[-1]] = self.answer
        for k in keys[self.hops :]:
            self.table[k] = (
                f"see {rng.choice(keys)}"
                if rng.random() < 0.4
                else f"{rng.choice(_WORDS)}-{rng.randrange(100, 1000)}"
            )
        self._faults = random.Random(f"faults:{seed}")
        self.steps = 0
        self.done = self.success = False
        self._started = True
        self._seen = set()
        return f"Find the value that the chain starting at key {self.chain[0]!r} leads to."

    def step(self, action: str) -> StepResult:
        """Apply one ``call`` or ``answer`` action.

        Raises:
            EnvStateError: before ``reset`` or after the episode ended.
        """
        if not self._started:
            raise EnvStateError("call reset() first")
        if self.done:
            raise EnvStateError("the episode has ended; call reset()")
        self.steps += 1
        found = _ACTION.findall(action)
        if not found:
            return self._result(
                "No action found. Write `call <tool> <json arguments>` or `answer <value>`.",
                StepLabel(valid=False, mistake="model_format_error", detail="no action"),
            )
        verb, rest = found[-1][0].lower(), found[-1][1].strip()
        if verb == "answer":
            return self._answer(rest)
        return self._call(rest)

    def _result(self, obs: str, label: StepLabel, **info: Any) -> StepResult:
        return StepResult(
            observation=obs,
            reward=1.0 if self.success else 0.0,
            done=self.done,
            success=self.success,
            label=label,
            info={"step": self.steps, **info},
        )

    def _answer(self, text: str) -> StepResult:
        given = text.strip().strip("`'\".").strip()
        if given.lower() == self.answer.lower():
            self.done = self.success = True
            return self._result("Correct.", StepLabel(progress=True))
        self.done = self.wrong_answer_ends
        obs = f"Wrong answer: {given!r}." + ("" if self.done else " Keep looking.")
        return self._result(obs, StepLabel(detail="wrong answer"))

    def _call(self, text: str) -> StepResult:
        match = _CALL.match(text)
        tool = match.group(1) if match else text
        if tool not in _TOOLS:
            return self._result(
                f"Unknown tool {tool!r}. Tools: {', '.join(_TOOLS)}.",
                StepLabel(valid=False, mistake="unknown_tool", detail=tool),
                tool=tool,
            )
        raw = (match.group(2) if match else "").strip() or "{}"
        try:
            args = json.loads(raw)
        except json.JSONDecodeError:
            args = None
        expected = {"key"} if tool == "lookup" else set()
        if (
            not isinstance(args, dict)
            or set(args) != expected
            or not all(isinstance(v, str) for v in args.values())
        ):
            fields = ", ".join(f'"{f}": <str>' for f in sorted(expected))
            return self._result(
                f"Bad arguments for {tool}: expected a JSON object {{{fields}}}, got {raw!r}.",
                StepLabel(valid=False, mistake="invalid_tool_arguments", detail=raw),
                tool=tool,
            )
        # One draw per lookup call, so the flaky pattern does not depend on fail_at_steps.
        flaky = tool == "lookup" and self._faults.random() < self.flaky_p
        if self.steps in self.fail_at_steps or flaky:
            return self._result(
                f"Error: {tool} failed (service temporarily unavailable). You may retry.",
                StepLabel(mistake="tool_error", detail="injected" if not flaky else "flaky"),
                tool=tool,
            )
        if tool == "list_keys":
            return self._result("list_keys() -> " + json.dumps(sorted(self.table)), StepLabel())
        key = args["key"]
        if key not in self.table:
            return self._result(
                f"lookup error: no key {key!r}.",
                StepLabel(mistake="invalid_tool_arguments", detail="no such key"),
                tool=tool,
            )
        progress = key in self.chain and key not in self._seen
        self._seen.add(key)
        return self._result(
            f"lookup({key!r}) -> {self.table[key]!r}", StepLabel(progress=progress), tool=tool
        )

    def call_tool(self, tool: str, arguments: dict[str, Any]) -> StepResult:
        """Take one step that calls ``tool`` with ``arguments`` (as the text action would)."""
        return self.step(f"call {tool} {json.dumps(arguments)}")


def make_tools(env: FaultyToolsEnv) -> list[Callable[..., str]]:
    """Typed Python functions for tool-calling agents; each call is one step of ``env``.

    They return the tool's text result and raise :class:`ToolCallError` when the
    step carried a mistake (a failure, a bad key). ``submit_answer`` returns
    ``"Correct."`` or the wrong-answer message.
    """

    def _run(result: StepResult) -> str:
        if result.label.mistake is not None:
            raise ToolCallError(result.observation)
        return result.observation

    def lookup(key: str) -> str:
        """Return the value stored under ``key`` (``see kN`` points to another key)."""
        return _run(env.call_tool("lookup", {"key": key}))

    def list_keys() -> str:
        """Return all keys in the store, as a JSON list."""
        return _run(env.call_tool("list_keys", {}))

    def submit_answer(value: str) -> str:
        """Give the final answer (ends the episode)."""
        return _run(env.step(f"answer {value}"))

    return [lookup, list_keys, submit_answer]
