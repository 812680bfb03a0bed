"""Pass@(K,T) evaluation: run agents on a grid of budgets and samples, then report.

* :class:`Evaluator` / :class:`EvalConfig` run every task x budget T x sample k
  under the controller, concurrently, streaming :class:`EpisodeRecord` lines to a
  resumable JSONL file (prefix sharing for budget-blind agents).
* :func:`pass_at_k` and :func:`pass_at_k_summary`: the unbiased estimator with
  Wilson / bootstrap intervals.
* :func:`summarize`, :func:`build_report`, :func:`compare_runs`: summary JSON,
  markdown tables, PNG plots (matplotlib, the ``plots`` extra).
* :class:`ScriptedEnvAgent`: a scripted agent as an evaluator agent (the agent
  protocols are in :mod:`budgetmix.environment`; a chat model plays through
  :class:`budgetmix.adapters.ChatModelEnvAgent`).

The ``budgetmix eval`` / ``report`` commands are :mod:`budgetmix.cli.eval` and
:mod:`budgetmix.cli.report`.

Importing this package loads neither matplotlib nor gymnasium.
"""

from budgetmix.evaluation.agents import ScriptedEnvAgent
from budgetmix.evaluation.failures import FAILURE_CATEGORIES, classify_failure
from budgetmix.evaluation.metrics import cost_at_success, success_at_cost, summarize
from budgetmix.evaluation.passk import (
    PassKEstimate,
    PassKSummary,
    TaskCounts,
    bootstrap_difference,
    pass_at_k,
    pass_at_k_curve,
    pass_at_k_summary,
    wilson_interval,
)
from budgetmix.evaluation.report import build_report, compare_runs, markdown_report
from budgetmix.evaluation.results import EpisodeRecord, ResultsWriter, read_results
from budgetmix.evaluation.runner import EvalConfig, EvalRun, Evaluator, derive_seed

__all__ = [
    "FAILURE_CATEGORIES",
    "EpisodeRecord",
    "EvalConfig",
    "EvalRun",
    "Evaluator",
    "PassKEstimate",
    "PassKSummary",
    "ResultsWriter",
    "ScriptedEnvAgent",
    "TaskCounts",
    "bootstrap_difference",
    "build_report",
    "classify_failure",
    "compare_runs",
    "cost_at_success",
    "derive_seed",
    "markdown_report",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_at_k_summary",
    "read_results",
    "success_at_cost",
    "summarize",
    "wilson_interval",
]
