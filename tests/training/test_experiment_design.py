"""The confirmatory design (issue 29 item 5): the gate, the endpoints by hand, one base run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from budgetmix.training.experiment.config import experiment_preset
from budgetmix.training.experiment.design import (
    GateRefused,
    contrast,
    gate_verdict,
    run_design,
    success_rows,
    write_summary,
)

pytest.importorskip("numpy")

#: 5 lookups, 20% faults: VoI 17.0 / 15.6 points at 25 / 50% for an agent erring 10%.
TOOLS5 = {"env": "faulty-tools-compact", "env_kwargs": {"hops": 5, "fault_p": 0.2, "guess_p": 0.25}}


def test_gate_refuses_the_old_map_at_the_bases_error_rate(tmp_path: Path) -> None:
    cfg = experiment_preset("ci")  # the demo map: VoI 0 at 25 and 50% for a 30%-error agent
    verdict = gate_verdict(cfg, 0.3)
    assert not verdict["passed"] and "below 10 points" in verdict["reason"]
    assert [r["fraction"] for r in verdict["voi"]] == ["25%", "50%", "75%", "100%"]
    assert all(abs(r["voi"]) < 1e-9 for r in verdict["voi"][:2])
    with pytest.raises(GateRefused, match="does not start"):
        run_design(cfg, tmp_path / "d", error_rate=0.3)
    assert json.loads((tmp_path / "d" / "gate.json").read_text())["passed"] is False
    assert not list((tmp_path / "d").glob("base*"))  # nothing trained


def test_gate_reads_the_measured_rate_not_the_demonstrators() -> None:
    cfg = experiment_preset("ci", **TOOLS5)
    low, high = gate_verdict(cfg, 0.1), gate_verdict(cfg, 0.3)
    assert low["passed"] and [round(100 * r["voi"], 1) for r in low["voi"][:2]] == [17.0, 15.6]
    assert not high["passed"]  # the same design, an agent that errs 30%: VoI about 0
    with pytest.raises(Exception, match="error_rate"):
        gate_verdict(cfg, 1.5)


def test_confirm_preset_is_the_preregistered_design() -> None:
    from budgetmix.training.experiment.environments import experiment_env

    cfg = experiment_preset("confirm")
    env = experiment_env(cfg)
    assert (cfg.env, cfg.env_kwargs) == (
        "fault-chain-compact", {"hops": 4, "fault_p": 0.3, "guess_p": 0.3},
    )  # fmt: skip
    # amendment 19:52 UTC 2026-12-02: 4 links, faults 30%, ceiling 13 at e = 0.2
    assert env.ceiling == 13 and cfg.sft_error_rate == 0.2 and cfg.max_number == 99
    assert [max(1, round(f * env.ceiling)) for f in cfg.eval_fractions] == [3, 6, 10, 13]
    assert env.decision.startswith("guess with 2-5 turns left")  # inside one digit class
    # updates matched: every run stops at rl_steps, the token cap cannot bind first
    most = cfg.rl_steps * cfg.groups_per_step * cfg.group_size * env.ceiling * 3
    assert cfg.token_budget > most and (cfg.groups_per_step, cfg.group_size) == (2, 8)
    assert (cfg.seeds, cfg.eval_episodes, cfg.sens_episodes) == (4, 128, 32)
    # amendments 13:35 and 13:57 UTC 2026-12-02: clean labels, every budget, 1000 SFT steps
    assert (cfg.sft_labels, cfg.sft_budgets, cfg.sft_steps) == ("optimal", "every", 1000)
    assert gate_verdict(cfg, 0.3)["passed"] and not gate_verdict(cfg, 0.4)["passed"]


def _unit(arm: str, base: int, seed: int, **cells: str) -> dict[str, object]:
    return {"arm": arm, "base": base, "seed": seed, "outcomes": cells}


def test_contrast_pairs_units_and_episodes_by_hand() -> None:
    units = [
        # base 0 seed 0: cells 25% (+1, 0, 0, +1)/4 and 50% (0, 0, -1, 0)/4 -> unit +0.125
        _unit("budgetmix", 0, 0, **{"25%": "1011", "50%": "0001"}),
        _unit("budgetmix-masked", 0, 0, **{"25%": "0010", "50%": "0011"}),
        # base 1 seed 0: +0.5 in both cells -> +0.5; seed 1 of base 1 has no masked run
        _unit("budgetmix", 1, 0, **{"25%": "1100", "50%": "1111"}),
        _unit("budgetmix-masked", 1, 0, **{"25%": "0000", "50%": "0011"}),
        _unit("budgetmix", 1, 1, **{"25%": "1111", "50%": "1111"}),
    ]
    c = contrast(units, "budgetmix", "budgetmix-masked", ("25%", "50%"))
    assert c is not None
    assert [(u["base"], u["seed"], u["diff"]) for u in c["units"]] == [(0, 0, 0.125), (1, 0, 0.5)]
    assert c["mean"] == pytest.approx(0.3125) and c["t"]["n"] == 2
    assert c["sign_flip"]["p"] == pytest.approx(0.5)  # 2 units: only (+,+) and (-,-) as far
    assert c["bootstrap"]["levels"] == [2, 2, 8]
    assert contrast(units, "budgetmix", "fixed", ("25%",)) is None
    rows = success_rows(units[:1], {"25%": 3, "50%": 6})
    assert rows == [
        {"arm": "budgetmix", "base": 0, "seed": 0, "fraction": "25%", "budget": 3,
         "success": 0.75, "episodes": 4},
        {"arm": "budgetmix", "base": 0, "seed": 0, "fraction": "50%", "budget": 6,
         "success": 0.25, "episodes": 4},
    ]  # fmt: skip


def test_markdown_renders_the_summary_rows() -> None:
    from budgetmix.training.experiment.design import markdown

    units = [
        _unit("budgetmix", 0, 0, **{"25%": "1011", "50%": "0001"}),
        _unit("budgetmix-masked", 0, 0, **{"25%": "0010", "50%": "0011"}),
    ]
    summary = {
        "budgets": {"25%": 4, "50%": 8},
        "voi": [{"fraction": "25%", "voi": 0.261}, {"fraction": "50%", "voi": 0.163}],
        "success": success_rows(units, {"25%": 4, "50%": 8}),
        "gate": {"passed": True, "reason": "ok", "error_rate": 0.2, "source": "pilot"},
        "units": [[0, 0]],
        "endpoints": {
            "primary": contrast(units, "budgetmix", "budgetmix-masked", ("25%", "50%")),
            "secondary": None,
        },
    }
    text = markdown(summary)
    assert "| VoI at the gate's error rate, points | 26.1 | 16.3 |" in text
    assert "| budgetmix | 75.0 | 25.0 |" in text and "| budgetmix-masked | 25.0 | 50.0 |" in text
    assert "**Primary** (budgetmix - budgetmix-masked, mean over 25%/50%, 1 units): **+12.5" in text
    assert "**Secondary**: no unit evaluated yet." in text


@pytest.mark.slow
def test_one_base_runs_seed_by_seed_resumes_and_summarises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = experiment_preset(
        "ci", **TOOLS5, seeds=1, max_number=99, eval_fractions=(0.25, 0.5, 1.0),
        pass_ks=(1,), sens_episodes=2,
    )  # fmt: skip
    out = tmp_path / "design"
    summary = run_design(cfg, out, error_rate=0.1, bases=2, only_base=1)
    units = sorted(p.stem for p in (out / "base1" / "eval").iterdir())
    assert units == ["base-s0", "budgetmix-masked-s0", "budgetmix-s0", "fixed-s0"]
    assert summary["gate"]["passed"] and summary["units"] == [[1, 0]]
    assert {r["arm"] for r in summary["success"]} == {"base", *cfg.methods}
    assert all(r["episodes"] == cfg.eval_episodes for r in summary["success"])
    primary = summary["endpoints"]["primary"]
    assert (primary["arm"], primary["versus"], primary["fractions"]) == (
        "budgetmix", "budgetmix-masked", ["25%", "50%"],
    )  # fmt: skip
    assert [t["steps"] for t in summary["training"]] == [cfg.rl_steps] * 3  # updates matched
    # the number tokens reached the trained model
    final = out / "base1" / "runs" / "budgetmix-s0" / "final"
    tok = json.loads((final / "tokenizer.json").read_text())
    assert any(t["content"] == "14" for t in tok["added_tokens"])
    before = {p: p.stat().st_mtime_ns for p in (out / "base1" / "eval").iterdir()}
    again = run_design(cfg, out, error_rate=0.1, bases=2, only_base=1)  # resume: nothing redone
    assert {p: p.stat().st_mtime_ns for p in (out / "base1" / "eval").iterdir()} == before
    assert again["endpoints"] == summary["endpoints"]
    assert write_summary(cfg, out, summary["gate"])["units"] == [[1, 0]]
    from budgetmix.training.experiment.recovery import design_recovery, format_recovery

    rec = design_recovery(cfg, out, bases=2, episodes=4, samples=2)  # base 0 never ran
    assert set(rec["arms"]) == {"fixed", "budgetmix"}
    for arm in rec["arms"].values():
        assert arm["units"] == 1 and [u["unit"] for u in arm["per_unit"]] == ["b1-s0"]
        assert 0.0 <= arm["all_states"]["mean"] <= 1.0
        assert arm["per_unit"][0]["n_after_mistake"] > 0
    assert len(format_recovery(rec)) == 2 and rec["skipped_bases"] == []
    # the base played under the error model: its states right after a mistake are compared
    slipped = design_recovery(cfg, out, bases=2, episodes=4, samples=2, slip_rate=0.5)
    assert slipped["slip_rate"] == 0.5 and set(slipped["arms"]) == {"fixed", "budgetmix"}
    assert all(a["per_unit"][0]["n_after_mistake"] > 0 for a in slipped["arms"].values())
    # a base that never errs on its own episodes: no state to recover from, said so
    import dataclasses

    from budgetmix.training.experiment.run import ExperimentRun

    own = ExperimentRun.decision_points
    import budgetmix.training.diagnostics.action_quality as aq

    real_non_tied = aq.non_tied
    with monkeypatch.context() as m:  # mistakes made, but only where no move matters
        m.setattr(aq, "non_tied", lambda pts, *a: [
            p for p in real_non_tied(pts, *a) if not p.after_mistake
        ])  # fmt: skip
        tied = design_recovery(cfg, out, bases=2, episodes=4, samples=2)
    assert tied["arms"] == {}
    assert tied["skipped_bases"][0]["reason"].startswith("every state right after a mistake")
    monkeypatch.setattr(ExperimentRun, "decision_points", lambda self, *a, **k: [
        dataclasses.replace(p, after_mistake=False) for p in own(self, *a, **k)
    ])  # fmt: skip
    clean = design_recovery(cfg, out, bases=2, episodes=4, samples=2)
    assert clean["arms"] == {} and [b["base"] for b in clean["skipped_bases"]] == [1]
    assert format_recovery(clean) == [
        f"base 1 skipped: the base made no mistake on its own episodes "
        f"({clean['skipped_bases'][0]['points']} decision points)"
    ]
