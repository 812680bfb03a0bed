"""Attribute, span and event names: the GenAI conventions and budgetmix's own namespace.

The OpenTelemetry semantic-conventions package marks its ``GEN_AI_*``
constants deprecated (moved), so the strings are defined here. Budget state
never uses the ``gen_ai.`` prefix (there is no convention for it).
"""

from __future__ import annotations

__all__ = [
    "BM_ACCOUNTING_PREFIX",
    "BM_EPISODE_ID",
    "BM_EVENT_EXHAUSTED",
    "BM_EVENT_EXTENDED",
    "BM_EVENT_GRACE",
    "BM_EVENT_MISTAKE",
    "BM_EVENT_RECOVERY",
    "BM_EVENT_RETRY",
    "BM_EVENT_WARNING",
    "BM_MISTAKES",
    "BM_NOTICE_FORMAT",
    "BM_RECOVERIES",
    "BM_STATUS",
    "BM_STOP_REASON",
    "BM_TURN",
    "ERROR_TYPE",
    "GEN_AI_AGENT_ID",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "bm_limit",
    "bm_remaining",
    "bm_used",
]

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
# both are included in gen_ai.usage.input_tokens
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"

BM_EPISODE_ID = "budgetmix.episode.id"
BM_STATUS = "budgetmix.status"
BM_STOP_REASON = "budgetmix.stop_reason"
BM_MISTAKES = "budgetmix.mistakes"
BM_RECOVERIES = "budgetmix.recoveries"
BM_TURN = "budgetmix.turn"
BM_NOTICE_FORMAT = "budgetmix.notice.format"
BM_ACCOUNTING_PREFIX = "budgetmix.accounting."

BM_EVENT_MISTAKE = "budgetmix.mistake"
BM_EVENT_RECOVERY = "budgetmix.recovery"
BM_EVENT_WARNING = "budgetmix.budget.warning"
BM_EVENT_EXTENDED = "budgetmix.budget.extended"
BM_EVENT_EXHAUSTED = "budgetmix.budget.exhausted"
BM_EVENT_GRACE = "budgetmix.budget.grace_turn"
BM_EVENT_RETRY = "budgetmix.retry"


def bm_limit(dimension: str) -> str:
    return f"budgetmix.budget.{dimension}.limit"


def bm_used(dimension: str) -> str:
    return f"budgetmix.budget.{dimension}.used"


def bm_remaining(dimension: str) -> str:
    return f"budgetmix.budget.{dimension}.remaining"
