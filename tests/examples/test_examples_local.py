"""examples/local_model_loop.py runs offline end to end (tiny model, no downloads)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from budgetmix import EpisodeStatus  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local_model_loop.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_model_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    # A model this small runs fastest on one thread, and does not fight parallel jobs.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_local_model_loop_solves_the_task(
    example: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    run = example.main([])
    assert run.status is EpisodeStatus.SUCCESS
    assert run.output == "19 + 23 = 42."
    assert [m.role for m in run.messages] == ["user", "assistant", "tool", "assistant"]
    out = capsys.readouterr().out
    assert "status=success turns=2/4" in out


def test_local_model_loop_grace_turn_at_exhaustion(example: ModuleType) -> None:
    run = example.main(["--turns", "1", "--grace"])
    assert run.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert run.result.grace_turn and run.grace_answer
    assert run.messages[1].tool_calls[0].name == "add"  # the one budgeted turn used the tool
