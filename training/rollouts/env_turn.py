"""One turn of the episode layout: the reply's chat row and the environment's answer.

The one home of what a training rollout (:mod:`budgetmix.training.rollouts.rollout`) and a
served checkpoint (:class:`budgetmix.training.serving.serve.TrainedPolicyAgent`) do with a
sampled reply, so both build the same chat (docs/layout.md):

* :func:`reply_message`: the assistant row; with tools, the template's parser turns
  the text into structured ``tool_calls`` (ids ``call_<turn - 1>_<n>``);
* :func:`environment_answer`: the environment's step and its messages: for a
  :class:`~budgetmix.training.envs.tool_env.ToolCallEnvironment` one ``tool``
  message per call (``call_tool``), or a ``user`` message for a reply without
  calls (``respond``); for a text environment a ``user`` message (``step``);
* :func:`with_notice`: the notice appended to the last of those messages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from budgetmix.environment import StepResult
from budgetmix.notice import append_notice
from budgetmix.training.rollouts.chat import ChatCodec

__all__ = ["combined", "environment_answer", "reply_message", "with_notice"]

Row = dict[str, Any]


def reply_message(codec: ChatCodec, text: str, turn: int, *, tools: bool) -> Row:
    """The assistant row of turn ``turn`` (1-based) for the sampled ``text``: parsed into
    ``tool_calls`` by the template's parser when the episode has tools."""
    if tools:
        return codec.template.reply_row(text, id_prefix=f"call_{turn - 1}")
    return {"role": "assistant", "content": text}


def environment_answer(env: Any, reply: Row, *, tools: bool) -> tuple[StepResult, list[Row]]:
    """Step ``env`` with ``reply`` (a :func:`reply_message` row): the turn's combined
    result (:func:`combined`) and the messages that answer it.

    With ``tools`` (``env`` is a tool environment) each call of the reply runs through
    ``env.call_tool`` in order, and its result is a ``tool`` message; once a call ends
    the episode, later calls of the same reply are not run. A reply without calls goes
    to ``env.respond``. Without ``tools`` the reply's text goes to ``env.step``.
    """
    text = str(reply.get("content") or "")
    calls = reply.get("tool_calls") or []
    if not tools or not calls:
        result = env.respond(text) if tools else env.step(text)
        return result, [{"role": "user", "content": result.observation}]
    results: list[StepResult] = []
    answers: list[Row] = []
    for call in calls:
        fn = call["function"]
        args = fn["arguments"]
        result = env.call_tool(fn["name"], args if isinstance(args, str) else json.dumps(args))
        results.append(result)
        answers.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "name": fn["name"],
                "content": result.observation,
            }
        )
        if result.done:
            break
    return combined(results), answers


def with_notice(answers: Sequence[Row], notice: str | None) -> list[Row]:
    """``answers`` with ``notice`` appended to the last one's content (placement
    ``"observation"``); unchanged without a notice."""
    out = [dict(a) for a in answers]
    if notice:
        out[-1]["content"] = append_notice(str(out[-1]["content"]), notice)
    return out


def combined(results: Sequence[StepResult]) -> StepResult:
    """One turn's tool results as one step: rewards summed, done if any is, the first
    mistake's label (else the last label)."""
    if len(results) == 1:
        return results[0]
    label = next((r.label for r in results if r.label.mistake), results[-1].label)
    return StepResult(
        observation="\n".join(r.observation for r in results),
        reward=sum(r.reward for r in results),
        done=any(r.done for r in results),
        success=any(r.done and r.success for r in results),
        label=label,
    )
