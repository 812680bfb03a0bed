"""A tool-use task with injectable faults.

:class:`FaultyToolsEnv` is a pointer-chasing lookup: a table maps keys to
values; a value ``see kN`` points to another key. The agent must follow the
chain from the start key with ``lookup`` calls and answer the final plain
value. It is a :class:`~budgetmix.training.envs.tool_env.ToolEnv`: its tools are
``lookup(key)``, ``list_keys()`` and ``answer(value)`` (tool calls in training,
``env.controller_tools()`` under the controller). The text protocol takes
Hermes ``<tool_call>`` blocks or, one per turn, the plain actions::

    call lookup {"key": "k3"}
    call list_keys {}
    answer amber-417

(the last line starting with ``call`` or ``answer`` counts). Faults: ``lookup``
fails with probability ``flaky_p`` (seeded by ``reset``), and every tool call
at a step in ``fail_at_steps`` (1-based; a step is a tool call or a reply) fails.

Labels per step:

* no ``call``/``answer`` line and no tool call: ``valid=False``,
  ``mistake="model_format_error"`` (a reply without a tool call does the same);
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

from budgetmix.environment import EnvStateError, StepResult
from budgetmix.events import MistakeKind
from budgetmix.exceptions import ConfigError
from budgetmix.training.envs.tool_env import ToolEnv, ToolMistake, ToolResult, env_tool

__all__ = ["FaultyToolsEnv", "ToolCallError", "make_tools"]

_ACTION = re.compile(
    r"^\s*[`*]*\s*(call|answer)\b[ \t]*(.*?)[`*]*\s*$", re.IGNORECASE | re.MULTILINE
)
_CALL = re.compile(r"^([A-Za-z_]\w*)\s*(.*)$", re.DOTALL)
_WORDS = ("amber", "basil", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo")


class ToolCallError(ToolMistake, RuntimeError):
    """A tool failed (``tool_error``); the message is what the environment reported."""

    def __init__(self, message: str, kind: MistakeKind | str = MistakeKind.TOOL_ERROR) -> None:
        super().__init__(message, kind)


class FaultyToolsEnv(ToolEnv):
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
            "answer it. Tools: lookup(key) returns the value under a key; list_keys() "
            "returns all keys; answer(value) gives your answer. Tools sometimes fail; "
            "retrying may help. Without tool calling, write exactly one action per turn: "
            '`call lookup {"key": "k1"}` or `answer <value>`.'
        )

    def start(self, seed: int) -> str:
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
        self._seen = set()
        return f"Find the value that the chain starting at key {self.chain[0]!r} leads to."

    # -- tools ---------------------------------------------------------------------------
    def _check_fault(self, tool: str, *, flaky: bool = False) -> None:
        if self.steps in self.fail_at_steps or flaky:
            raise ToolCallError(f"{tool} failed (service temporarily unavailable). You may retry.")

    @env_tool
    def lookup(self, key: str) -> ToolResult:
        """Return the value stored under a key (``see kN`` points to another key).

        Args:
            key: the key to look up, e.g. "k3".
        """
        # One draw per lookup call, so the flaky pattern does not depend on fail_at_steps.
        self._check_fault("lookup", flaky=self._faults.random() < self.flaky_p)
        if key not in self.table:
            raise ToolMistake(f"lookup error: no key {key!r}.", MistakeKind.INVALID_TOOL_ARGUMENTS)
        progress = key in self.chain and key not in self._seen
        self._seen.add(key)
        return ToolResult(output=f"lookup({key!r}) -> {self.table[key]!r}", progress=progress)

    @env_tool
    def list_keys(self) -> str:
        """Return all keys in the store, as a JSON list."""
        self._check_fault("list_keys")
        return "list_keys() -> " + json.dumps(sorted(self.table))

    @env_tool(name="answer")
    def answer_value(self, value: str) -> ToolResult:
        """Give the final answer (a right one ends the episode).

        Args:
            value: the plain value the chain leads to.
        """
        given = value.strip().strip("`'\".").strip()
        if given.lower() == self.answer.lower():
            return ToolResult(output="Correct.", progress=True, done=True, success=True)
        obs = f"Wrong answer: {given!r}." + ("" if self.wrong_answer_ends else " Keep looking.")
        return ToolResult(output=obs, done=self.wrong_answer_ends, detail="wrong answer")

    # -- the text protocol ---------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        """Apply one action: Hermes ``<tool_call>`` blocks, else the last ``call`` or
        ``answer`` line.

        Raises:
            EnvStateError: before ``reset`` or after the episode ended.
        """
        if "<tool_call>" in action:
            return super().step(action)
        found = _ACTION.findall(action)
        if not found:
            return self.respond(action)
        verb, rest = found[-1][0].lower(), found[-1][1].strip()
        if verb == "answer":
            return self.call_tool("answer", json.dumps({"value": rest}))
        match = _CALL.match(rest)
        tool = match.group(1) if match else rest
        raw = (match.group(2) if match else "").strip() or "{}"
        return self.call_tool(tool, raw)

    def reply(self, text: str) -> ToolResult:
        """A reply with neither a tool call nor an action: ``model_format_error``
        (``valid=False``); the episode goes on."""
        raise ToolMistake(
            "No action found. Call a tool, or write `call <tool> <json arguments>` or "
            "`answer <value>`.",
            MistakeKind.MODEL_FORMAT_ERROR,
        )


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
        return _run(env.call_tool("lookup", json.dumps({"key": key})))

    def list_keys() -> str:
        """Return all keys in the store, as a JSON list."""
        return _run(env.call_tool("list_keys", "{}"))

    def submit_answer(value: str) -> str:
        """Give the final answer (ends the episode)."""
        return _run(env.call_tool("answer", json.dumps({"value": value})))

    return [lookup, list_keys, submit_answer]
