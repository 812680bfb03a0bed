"""DSPy, unmodified, under the budget: ``dspy.LM(..., client=budgeted(openai.OpenAI(...),
controller))``. DSPy deep-copies an LM's keyword arguments (its cache and request
handling), so the budgeted client must survive ``copy.deepcopy``: it copies to itself
(a real copy failed with ``cannot pickle '_thread.RLock'`` before any request)."""

from __future__ import annotations

import os

import pytest
from _integration_support import framework
from budgetmix import Budget, BudgetController, EpisodeStatus
from budgetmix.adapters import budgeted
from budgetmix.adapters.testing import FakeLLMServer, Reply

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price map download
openai = framework("openai")
dspy = framework("dspy")

ANSWER = "[[ ## answer ## ]]\n3\n\n[[ ## completed ## ]]"  # DSPy's chat format


def test_a_dspy_program_is_budgeted_through_a_budgeted_client(server: FakeLLMServer) -> None:
    server.push(*[Reply.say(ANSWER) for _ in range(5)])
    controller = BudgetController(Budget(turns=2))
    client = budgeted(openai.OpenAI(api_key="test", base_url=server.base_url), controller)
    lm = dspy.LM(
        "openai/gpt-4o",
        api_base=server.base_url,
        api_key="test",
        client=client,  # the one line
        cache=False,
        num_retries=0,
    )
    predict = dspy.Predict("question -> answer")
    answers = []
    with (
        pytest.raises(Exception, match="budget exhausted on turns") as info,
        dspy.context(lm=lm),
        controller.episode() as ep,
    ):
        for i in range(4):
            answers.append(predict(question=f"what is 1+2? ({i})").answer)
    assert answers == ["3", "3"]  # two turns, then the stop
    assert type(info.value).__module__.startswith("dspy")  # what the caller sees
    assert len(server.model_requests()) == 2  # the third never left
    assert ep.result is not None and ep.result.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert ep.result.stop_reason == "turns" and ep.result.used["turns"] == 2
    assert ep.result.used["input_tokens"] > 0
