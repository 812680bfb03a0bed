"""Budgeted clients and transports survive what frameworks do to the objects they are
given (issue 31): ``copy.deepcopy`` (DSPy deep-copies an LM's arguments), pickling in
the same process, and the client type checks (Semantic Kernel's ``isinstance(client,
AsyncOpenAI)``)."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import pytest
from budgetmix import Budget, BudgetController
from budgetmix.adapters import budgeted
from budgetmix.adapters.http import AsyncBudgetTransport, BudgetTransport

openai = pytest.importorskip("openai")


def _handles() -> list[object]:
    controller = BudgetController(Budget(turns=2))
    base = "http://127.0.0.1:9/v1"
    return [
        budgeted(openai.OpenAI(api_key="test", base_url=base), controller),
        budgeted(openai.AsyncOpenAI(api_key="test", base_url=base), controller),
        BudgetTransport(None, controller),
        AsyncBudgetTransport(None, controller),
    ]


@pytest.mark.parametrize("index", range(4), ids=["sync", "async", "transport", "atransport"])
def test_a_copy_or_a_pickle_is_the_handle_itself(index: int) -> None:
    handle = _handles()[index]
    assert copy.deepcopy(handle) is handle
    assert copy.copy(handle) is handle
    assert copy.deepcopy({"kwargs": [handle]})["kwargs"][0] is handle
    assert pickle.loads(pickle.dumps(handle)) is handle


def test_a_pickle_does_not_restore_in_another_process() -> None:
    blob = pickle.dumps(_handles()[0])
    code = "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"
    proc = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True)
    assert proc.returncode != 0
    assert b"unpickles only in the process that made it" in proc.stderr


def test_a_wrapped_client_passes_the_sdk_type_checks() -> None:
    sync, async_, *_ = _handles()
    assert isinstance(sync, openai.OpenAI) and not isinstance(sync, openai.AsyncOpenAI)
    assert isinstance(async_, openai.AsyncOpenAI) and not isinstance(async_, openai.OpenAI)
    assert type(async_).__name__ == "AsyncBudgetedOpenAI"  # type() still tells the wrapper
