"""What :mod:`budgetmix.instrumentation` writes about content and outcomes on spans.

* :func:`set_content` - opt-in content, credentials masked;
* :func:`write_turn_content` - a turn's messages in the GenAI conventions' parts format
  (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``);
* :func:`set_episode_content` - the task and the final answer on the episode span;
* :func:`set_outcome` - span status ERROR and ``error.type`` for an episode that did
  not succeed (:data:`FAILED_STATUSES`), so a backend's status filter finds it.

Only :mod:`budgetmix.instrumentation` calls these (it stays the one writer of spans);
they live apart to keep each module short.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from budgetmix import semconv as sc
from budgetmix.events import EpisodeResult, EpisodeStatus
from budgetmix.genai_content import input_messages, output_messages, system_instructions
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

__all__ = [
    "FAILED_STATUSES",
    "set_content",
    "set_episode_content",
    "set_outcome",
    "write_turn_content",
]

_logger = logging.getLogger("budgetmix")

#: Episode statuses that mark the episode span failed (status ERROR, ``error.type``):
#: every one but ``success``.
FAILED_STATUSES = frozenset(
    {
        EpisodeStatus.FAILED,
        EpisodeStatus.BUDGET_EXHAUSTED,
        EpisodeStatus.EARLY_STOPPED,
        EpisodeStatus.ERROR,
    }
)


def set_content(span: trace.Span, key: str, value: Any) -> None:
    """Opt-in content on a span, with credentials masked (never a secret in a trace).

    The text comes from :func:`~budgetmix.telemetry.redact_content`, which masks before
    encoding and never raises: whatever a tool returns, capturing it cannot change the
    episode's outcome."""
    from budgetmix.telemetry.redaction import redact_content

    span.set_attribute(key, redact_content(value))


def write_turn_content(
    span: trace.Span, inputs: Any, outputs: Any, system: Any, finish_reason: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A turn's content on its span in the parts format (any of ``inputs``,
    ``outputs``, ``system`` may be None: not written); the parts written."""
    parts_in = _converted(input_messages, inputs)
    parts_out = _converted(lambda m: output_messages(m, finish_reason), outputs)
    instructions = _converted(system_instructions, system)
    if instructions:
        set_content(span, sc.GEN_AI_SYSTEM_INSTRUCTIONS, instructions)
    if parts_in is not None:
        set_content(span, sc.GEN_AI_INPUT_MESSAGES, parts_in)
    if parts_out is not None:
        set_content(span, sc.GEN_AI_OUTPUT_MESSAGES, parts_out)
    return parts_in or [], parts_out or []


def _converted(convert: Callable[[Any], list[dict[str, Any]]], value: Any) -> Any:
    """``convert(value)``; None for None or when the value cannot be read (an object
    whose attributes raise): capturing content never changes an episode's outcome."""
    if value is None:
        return None
    try:
        return convert(value)
    except Exception:
        _logger.debug("budgetmix: content not captured (unreadable value)", exc_info=True)
        return None


def set_episode_content(
    span: trace.Span, task: str | None, answer: str | None, final_output: Any
) -> None:
    """The task and the final answer (``final_output``, else ``answer``: the last
    reply's text) on the episode span: as GenAI messages, and as OpenInference's
    ``input.value``/``output.value``, which Arize Phoenix shows in its lists."""
    if final_output is not None:
        from budgetmix.telemetry.redaction import redact_content

        answer = final_output if isinstance(final_output, str) else redact_content(final_output)
    if task is not None:
        set_content(span, sc.OI_INPUT_VALUE, task)
        span.set_attribute(sc.OI_INPUT_MIME_TYPE, "text/plain")
        set_content(span, sc.GEN_AI_INPUT_MESSAGES, input_messages(task))
    if answer is not None:
        set_content(span, sc.OI_OUTPUT_VALUE, answer)
        span.set_attribute(sc.OI_OUTPUT_MIME_TYPE, "text/plain")
        reply = [{"role": "assistant", "content": answer}]
        set_content(span, sc.GEN_AI_OUTPUT_MESSAGES, output_messages(reply, "stop"))


def set_outcome(span: trace.Span, result: EpisodeResult) -> None:
    """An episode that did not succeed: status ERROR (described by its status and stop
    reason) and ``error.type`` (the exception's type for ``error``, else the status)."""
    status = result.status
    if status not in FAILED_STATUSES:
        return
    if status is EpisodeStatus.ERROR:
        error_type = (result.error or "error").split(":")[0]
    else:
        error_type = str(status)
    span.set_attribute(sc.ERROR_TYPE, error_type)
    described = f"{status}: {result.stop_reason}" if result.stop_reason else str(status)
    span.set_status(Status(StatusCode.ERROR, described))
