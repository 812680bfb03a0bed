"""Attribute, event and metric names: the GenAI conventions and budgetmix's own namespace.

Every ``budgetmix.*`` name an episode, a wrapper or a transport writes is defined
here, and nowhere else. The OpenTelemetry semantic-conventions package marks its
``GEN_AI_*`` constants deprecated (moved), so those strings are defined here too.
Budget state never uses the ``gen_ai.`` prefix (there is no convention for it).
"""

from __future__ import annotations

__all__ = [
    "BM_ACCOUNTING_COUNT_FAILED_REQUESTS",
    "BM_ACCOUNTING_COUNT_FAILED_TOOL_CALLS",
    "BM_ACCOUNTING_COUNT_RETRIES",
    "BM_ACCOUNTING_POLICY",
    "BM_ACCOUNTING_REFUNDED_TOOLS",
    "BM_ACCOUNTING_TURN_UNIT",
    "BM_EPISODE_ID",
    "BM_EVENT_EARLY_STOP",
    "BM_EVENT_EXHAUSTED",
    "BM_EVENT_EXTENDED",
    "BM_EVENT_GRACE",
    "BM_EVENT_MISTAKE",
    "BM_EVENT_RECOVERY",
    "BM_EVENT_RESPONSE_TRUNCATED",
    "BM_EVENT_RETRY",
    "BM_EVENT_USAGE_INVALID",
    "BM_EVENT_USAGE_MISSING",
    "BM_EVENT_WARNING",
    "BM_GRACE_TURN",
    "BM_METRIC_EPISODE_TURNS",
    "BM_METRIC_EXHAUSTIONS",
    "BM_METRIC_MISTAKES",
    "BM_METRIC_RECOVERIES",
    "BM_MISTAKES",
    "BM_MISTAKE_ID",
    "BM_MISTAKE_KIND",
    "BM_NOTICE_FORMAT",
    "BM_RECOVERIES",
    "BM_RECOVERY_ID",
    "BM_RECOVERY_RECOVERED",
    "BM_RECOVERY_TURNS",
    "BM_RETRY_ATTEMPT",
    "BM_RETRY_DELAY_S",
    "BM_STATUS",
    "BM_STOP_REASON",
    "BM_TOOL_TIMING",
    "BM_TURN",
    "BM_USAGE_INVALID",
    "BM_WIRE",
    "CAPTURE_CONTENT_ENV",
    "ERROR_TYPE",
    "EXCEPTION_EVENT",
    "EXCEPTION_MESSAGE",
    "EXCEPTION_TYPE",
    "GEN_AI_AGENT_ID",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CLIENT_OPERATION_DURATION",
    "GEN_AI_CLIENT_TOKEN_USAGE",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_ID",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_SYSTEM_INSTRUCTIONS",
    "GEN_AI_TOKEN_TYPE",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "OI_INPUT_MIME_TYPE",
    "OI_INPUT_VALUE",
    "OI_OUTPUT_MIME_TYPE",
    "OI_OUTPUT_VALUE",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "bm_detail",
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
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"  # on gen_ai.client.token.usage: input / output
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
# the exception event (OpenTelemetry's semantic conventions for exceptions)
EXCEPTION_EVENT = "exception"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
# the GenAI client metrics
GEN_AI_CLIENT_TOKEN_USAGE = "gen_ai.client.token.usage"
GEN_AI_CLIENT_OPERATION_DURATION = "gen_ai.client.operation.duration"
#: The conventional switch of content capture (``true``: message content and tool
#: arguments on spans, when a controller is not told otherwise).
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# OpenInference's input and output of a span (Arize Phoenix shows them in its lists of
# traces and agents; it maps no GenAI attribute to them), on the episode span only.
OI_INPUT_VALUE = "input.value"
OI_INPUT_MIME_TYPE = "input.mime_type"
OI_OUTPUT_VALUE = "output.value"
OI_OUTPUT_MIME_TYPE = "output.mime_type"

BM_EPISODE_ID = "budgetmix.episode.id"
BM_STATUS = "budgetmix.status"
BM_STOP_REASON = "budgetmix.stop_reason"
BM_MISTAKES = "budgetmix.mistakes"
BM_RECOVERIES = "budgetmix.recoveries"
BM_TURN = "budgetmix.turn"
BM_NOTICE_FORMAT = "budgetmix.notice.format"
BM_GRACE_TURN = "budgetmix.grace_turn"
BM_WIRE = "budgetmix.wire"
#: On an ``execute_tool`` span: ``wire`` when timed from the wire (an upper bound: from
#: the response that made the call to the request carrying its result).
BM_TOOL_TIMING = "budgetmix.tool.timing"
BM_ACCOUNTING_POLICY = "budgetmix.accounting.policy"
BM_ACCOUNTING_TURN_UNIT = "budgetmix.accounting.turn_unit"
BM_ACCOUNTING_COUNT_RETRIES = "budgetmix.accounting.count_retries"
BM_ACCOUNTING_COUNT_FAILED_REQUESTS = "budgetmix.accounting.count_failed_requests"
BM_ACCOUNTING_COUNT_FAILED_TOOL_CALLS = "budgetmix.accounting.count_failed_tool_calls"
BM_ACCOUNTING_REFUNDED_TOOLS = "budgetmix.accounting.refunded_tools"

# attributes of the budgetmix.mistake, budgetmix.recovery and budgetmix.retry events
BM_MISTAKE_ID = "budgetmix.mistake.id"
BM_MISTAKE_KIND = "budgetmix.mistake.kind"
BM_RECOVERY_ID = "budgetmix.recovery.id"
BM_RECOVERY_RECOVERED = "budgetmix.recovery.recovered"
BM_RECOVERY_TURNS = "budgetmix.recovery.turns"
BM_RETRY_ATTEMPT = "budgetmix.retry.attempt"
BM_RETRY_DELAY_S = "budgetmix.retry.delay_s"

BM_EVENT_MISTAKE = "budgetmix.mistake"
BM_EVENT_RECOVERY = "budgetmix.recovery"
BM_EVENT_WARNING = "budgetmix.budget.warning"
BM_EVENT_EXTENDED = "budgetmix.budget.extended"
BM_EVENT_EXHAUSTED = "budgetmix.budget.exhausted"
BM_EVENT_GRACE = "budgetmix.budget.grace_turn"
BM_EVENT_RETRY = "budgetmix.retry"
BM_EVENT_EARLY_STOP = "budgetmix.early_stop"
# on a turn's span, from the wrappers and the transport
BM_EVENT_USAGE_MISSING = "budgetmix.usage_missing"
#: usage fields that are no count (charged by :func:`budgetmix.accounting.estimate_tokens`)
BM_EVENT_USAGE_INVALID = "budgetmix.usage_invalid"
BM_USAGE_INVALID = "budgetmix.usage.invalid"
BM_EVENT_RESPONSE_TRUNCATED = "budgetmix.response_truncated"

BM_METRIC_EPISODE_TURNS = "budgetmix.episode.turns"
BM_METRIC_EXHAUSTIONS = "budgetmix.exhaustions"
BM_METRIC_MISTAKES = "budgetmix.mistakes"
BM_METRIC_RECOVERIES = "budgetmix.recoveries"


def bm_limit(dimension: str) -> str:
    """The limit of ``dimension`` (``budgetmix.budget.turns.limit``)."""
    return f"budgetmix.budget.{dimension}.limit"


def bm_used(dimension: str) -> str:
    """What ``dimension`` used (``budgetmix.budget.turns.used``)."""
    return f"budgetmix.budget.{dimension}.used"


def bm_remaining(dimension: str) -> str:
    """What is left of ``dimension`` (``budgetmix.budget.turns.remaining``)."""
    return f"budgetmix.budget.{dimension}.remaining"


def bm_detail(key: str) -> str:
    """A budget event's detail ``key`` (``budgetmix.dimension``, ``budgetmix.added_turns``)."""
    return f"budgetmix.{key}"
