"""The experiment on its second environment, faulty-tools-compact: config, the environment
record, and the ``ci`` sizes run end to end (structure and sanity, never the effect size)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")

from budgetmix.exceptions import ConfigError
from budgetmix.training.experiment import (
    EXPERIMENT_PRESETS,
    ExperimentConfig,
    ExperimentReport,
    experiment_preset,
    run_experiment,
)
from budgetmix.training.experiment.config import TOOLS_ENV
from budgetmix.training.experiment.environments import experiment_env

TOOLS = {"env": "faulty-tools-compact", "env_kwargs": {"hops": 9, "fault_p": 0.2, "guess_p": 0.25}}


def test_tools_presets_are_default_and_full_on_the_second_environment() -> None:
    assert {k: v for k, v in TOOLS_ENV.items()} == TOOLS
    # `tools` is the 6,000-token design (prereg 16:24), `default-6k` since the demo shrank
    for tools, base in (("tools", "default-6k"), ("full-tools", "full")):
        a, b = experiment_preset(tools).to_dict(), experiment_preset(base).to_dict()
        assert a.pop("env") == "faulty-tools-compact" and b.pop("env") == "frozenlake-compact"
        assert a.pop("env_kwargs") == TOOLS["env_kwargs"] and b.pop("env_kwargs") == {}
        assert a.pop("preset") == tools and b.pop("preset") == base
        assert a == b  # every other setting is the preregistered preset's
    for name in EXPERIMENT_PRESETS:
        if "tools" not in name and name not in ("confirm", "gpu"):  # issue 29's fault chain
            assert experiment_preset(name).env == "frozenlake-compact"
    assert {experiment_preset(n).env for n in ("confirm", "gpu")} == {"fault-chain-compact"}


def test_bad_environment_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.env:"):
        ExperimentConfig(env="chess")
    with pytest.raises(ConfigError, match=r"env_kwargs.*hops"):
        ExperimentConfig(env="faulty-tools-compact", env_kwargs={"hops": 0})
    with pytest.raises(ConfigError, match=r"env_kwargs.*colour"):
        ExperimentConfig(env="faulty-tools-compact", env_kwargs={"colour": 1})
    with pytest.raises(ConfigError, match=r"env_kwargs.*fault_p"):
        ExperimentConfig(env="faulty-tools-compact", env_kwargs={"fault_p": 1.0})
    with pytest.raises(ConfigError, match="env_kwargs"):
        ExperimentConfig(env_kwargs={"hops": 3})  # FrozenLake takes desc and success_rate


def test_the_environment_records_carry_each_exact_model() -> None:
    tools = experiment_env(experiment_preset("tools"))
    assert (tools.name, tools.ceiling, tools.moves, tools.sensitivity_from) == (
        "faulty-tools-compact", 15, ("n", "a", "g"), 1,
    )  # fmt: skip
    assert tools.decision == "guess with 1-9 turns left, look up otherwise"
    aware, blind = tools.curves(22)
    assert round(aware[11], 4) == 0.4743 and round(blind[11], 4) == 0.3221
    lake = experiment_env(experiment_preset("default"))
    assert (lake.name, lake.ceiling, lake.sensitivity_from) == ("frozenlake-compact", 14, 2)
    assert lake.kwargs == {
        "desc": ["SFF", "HFF", "HHG"],
        "success_rate": 0.8,
        "demo_gamma": 0.99,
        "demo_budget_aware": True,
    }


#: A 3-hop chain keeps the end-to-end run short (ceiling 8: guess with 1-3 turns left).
SMALL = {"env": "faulty-tools-compact", "env_kwargs": {"hops": 3, "fault_p": 0.3, "guess_p": 0.25}}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> ExperimentReport:
    out = tmp_path_factory.mktemp("experiment-tools")
    return run_experiment(experiment_preset("ci", **SMALL), out, progress=False)


@pytest.mark.slow  # the CI preset end to end
def test_ci_sizes_on_the_tool_environment_run_end_to_end(report: ExperimentReport) -> None:
    cfg = experiment_preset("ci")
    assert report.ceiling == 8 and report.budgets == {"50%": 4, "100%": 8, "150%": 12}
    assert report.environment["name"] == "faulty-tools-compact"
    assert {r["arm"] for r in report.grid} == {"base", "fixed", "budgetmix", "budgetmix-masked"}
    for row in report.grid:
        assert 0.0 <= row["lo"] <= row["value"] <= row["hi"] <= 1.0
    assert report.oracle["aware"]["50%"] == pytest.approx(0.3866, abs=1e-4)
    assert report.oracle["blind_demonstrator"]["50%"] == pytest.approx(0.2401, abs=1e-4)
    primary = report.stats["primary"]
    assert (primary["arm"], primary["versus"], primary["cells"]) == ("budgetmix", "fixed", [4])
    sens = report.diagnostics["sensitivity"]
    assert set(sens) == {"base", "fixed", "budgetmix", "budgetmix-masked"}
    for arm, s in sens.items():
        assert s["flip_action"] == "g" and list(s["optimal_budgets"]) == [1, 2, 3]
        assert s["turns_left"] == list(range(1, 13))
        assert len(s["per_seed"]) == (1 if arm == "base" else cfg.seeds)
    assert report.diagnostics["decision_points"] > 0
    for q in report.diagnostics["action_quality"].values():
        assert sum([q["a_better"], q["tie"], q["b_better"]]) == pytest.approx(1.0)
    rollouts = {t["rollouts"] for runs in report.training.values() for t in runs}
    assert rollouts == {cfg.rl_steps * cfg.groups_per_step * cfg.group_size}
    text = (report.out_dir / "report.md").read_text()
    assert "faulty-tools-compact" in text and "Budget sensitivity at the start state" in text
    summary = json.loads((report.out_dir / "summary.json").read_text())
    assert summary["environment"]["moves"] == ["n", "a", "g"]
    assert summary["config"]["env_kwargs"] == SMALL["env_kwargs"]
    assert (report.out_dir / "budget_sensitivity.png").is_file()
    assert (report.best_checkpoint / "model.safetensors").is_file()
