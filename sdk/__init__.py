"""budgetmix: turn budgets for tool-using LLM agents.

Enforce limits before anything is sent, tell the model its budget in one
versioned format, trace mistakes and recoveries, evaluate Pass@(K,T), and
train local models to match (``budgetmix.training``).
"""

from budgetmix._version import __version__
from budgetmix.accounting import DEFAULT_ACCOUNTING, AccountingPolicy
from budgetmix.budget import DIMENSIONS, Budget
from budgetmix.controller import BudgetController
from budgetmix.episode import Episode, current_episode
from budgetmix.events import (
    BudgetEvent,
    EpisodeResult,
    EpisodeStatus,
    Mistake,
    MistakeKind,
    Recovery,
)
from budgetmix.exceptions import (
    BudgetExhausted,
    BudgetmixError,
    CheckpointError,
    ConfigError,
    EarlyStopped,
    MissingExtraError,
    ProviderError,
    ResponseFormatError,
)
from budgetmix.hooks import Hooks
from budgetmix.ledger import Ledger, LedgerState
from budgetmix.notice import (
    DEFAULT_NOTICE_FORMAT,
    NOTICE_FORMATS,
    NOTICE_PLACEMENTS,
    NoticePlacement,
    place_notice_openai_chat,
    render_notice,
    with_notice_anthropic,
    with_notice_openai_chat,
    with_notice_openai_responses,
)
from budgetmix.policy import NotifyEveryTurn, StepRecord
from budgetmix.provider_errors import classify_exception
from budgetmix.retry import RetryPolicy
from budgetmix.steps import ToolCall, Turn

__all__ = [
    "DEFAULT_ACCOUNTING",
    "DEFAULT_NOTICE_FORMAT",
    "DIMENSIONS",
    "NOTICE_FORMATS",
    "NOTICE_PLACEMENTS",
    "AccountingPolicy",
    "Budget",
    "BudgetController",
    "BudgetEvent",
    "BudgetExhausted",
    "BudgetmixError",
    "CheckpointError",
    "ConfigError",
    "EarlyStopped",
    "Episode",
    "EpisodeResult",
    "EpisodeStatus",
    "Hooks",
    "Ledger",
    "LedgerState",
    "MissingExtraError",
    "Mistake",
    "MistakeKind",
    "NoticePlacement",
    "NotifyEveryTurn",
    "ProviderError",
    "Recovery",
    "ResponseFormatError",
    "RetryPolicy",
    "StepRecord",
    "ToolCall",
    "Turn",
    "__version__",
    "classify_exception",
    "current_episode",
    "place_notice_openai_chat",
    "render_notice",
    "with_notice_anthropic",
    "with_notice_openai_chat",
    "with_notice_openai_responses",
]
