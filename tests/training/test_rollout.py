"""Token-in/token-out rollouts on scripted generations: masks, continuity, notices, budgets."""

from __future__ import annotations

import random
from typing import Any

import pytest
from budgetmix.budget import Budget
from budgetmix.ledger import Ledger
from budgetmix.notice import render_notice
from budgetmix.policies.samplers import BudgetDraw, BudgetMix, FixedBudget
from budgetmix.training.envs import env_tasks
from budgetmix.training.rollouts.chat import ChatCodec, TokenDriftError, environment_message
from budgetmix.training.rollouts.generation import Generation, GenerationRequest, ScriptedGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts
from budgetmix.training.toy import EchoEnv, echo_agent

STRICT = RolloutSettings(notice_format="v1", token_check="strict")


def _specs(n: int, turns: int) -> list[EpisodeSpec]:
    draw = FixedBudget(turns).sample(random.Random(0))
    return [
        EpisodeSpec(task=t, budget=draw, group=i)
        for i, t in enumerate(env_tasks("echo", range(n), {}))
    ]


def test_masks_cover_exactly_the_sampled_tokens(tokenizer: Any) -> None:
    codec = ChatCodec(tokenizer)
    gen = ScriptedGenerator(echo_agent(error_rate=0.3, seed=1), tokenizer)
    rollouts = run_rollouts(_specs(16, 6), gen, codec, STRICT)
    eos = tokenizer.eos_token_id
    for r in rollouts:
        assert len(r.response_ids) == len(r.response_mask) == len(r.logprobs)
        sampled = [t for t, m in zip(r.response_ids, r.response_mask, strict=True) if m]
        # every assistant turn is exactly "<action><eos>", nothing else is masked in
        expected: list[int] = []
        for step in r.steps:
            expected += tokenizer.encode(step.action, add_special_tokens=False) + [eos]  # noqa: RUF005
        assert sampled == expected
        assert r.response_mask[0] == 1  # the response starts with the first sampled token
        env_text = tokenizer.decode(
            [t for t, m in zip(r.response_ids, r.response_mask, strict=True) if not m]
        )
        assert "Budget (v1)" in env_text or r.num_turns == 1


def test_ids_are_the_concatenation_of_turns_and_match_a_full_rerender(tokenizer: Any) -> None:
    codec = ChatCodec(tokenizer)
    gen = ScriptedGenerator(echo_agent(error_rate=0.5, seed=2), tokenizer)
    for r in run_rollouts(_specs(8, 5), gen, codec, RolloutSettings(token_check="report")):
        assert r.drift is None
        rendered = codec.encode(codec.render(r.messages, generation_prompt=False))
        ids = list(r.prompt_ids + r.response_ids)
        assert rendered[: len(ids)] == ids
        assert codec.decode(rendered[len(ids) :]) == "\n"  # only the template's trailing glue


def test_strict_check_reports_drift(tokenizer: Any) -> None:
    codec = ChatCodec(tokenizer)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ab"}]
    ids = codec.encode(codec.render(messages, generation_prompt=False))
    assert codec.check_continuity(messages, ids) is None
    bad = [*ids]
    bad[-3] = tokenizer.convert_tokens_to_ids("z")
    drift = codec.check_continuity(messages, bad)
    assert drift is not None and drift.position == len(ids) - 3

    class SpecialTokens:
        """Samples special tokens, as an untrained model does."""

        def generate(self, requests: Any, max_new_tokens: int) -> list[Generation]:
            ids = (tokenizer.unk_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id)
            return [Generation(ids, (0.0,) * 3, True) for _ in requests]

    rollouts = run_rollouts(_specs(1, 1), SpecialTokens(), codec, STRICT)
    # The reply's text drops special tokens (as LocalChatModel's does), so the re-render
    # differs inside the sampled span: reported, never fatal.
    drift = rollouts[0].drift
    assert drift is not None and drift.kind == "sampled_text" and not drift.fatal


def test_strict_mode_raises_on_drift(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    codec = ChatCodec(tokenizer)
    real = codec.continuation

    def corrupted(*args: Any) -> tuple[str, list[int]]:
        text, ids = real(*args)
        return text, codec.encode(codec.decode(ids).replace("turn", "turm"))

    # A codec bug that re-tokenizes the env message differently is caught, not trained on.
    monkeypatch.setattr(codec, "continuation", corrupted)
    gen = ScriptedGenerator(echo_agent(error_rate=1.0, seed=3), tokenizer)
    with pytest.raises(TokenDriftError):
        run_rollouts(_specs(2, 3), gen, codec, STRICT)


def test_notice_bytes_equal_an_equivalent_ledger_sequence(tokenizer: Any) -> None:
    codec = ChatCodec(tokenizer)
    gen = ScriptedGenerator(echo_agent(error_rate=0.6, seed=4), tokenizer)
    for fmt in ("v1", "v1-compact"):
        settings = RolloutSettings(notice_format=fmt, token_check="strict")
        for r in run_rollouts(_specs(12, 4), gen, codec, settings):
            ledger = Ledger(Budget(turns=r.budget.turns))
            user_messages = [m["content"] for m in r.messages if m["role"] == "user"]
            observations = ["echo"] + [s.observation for s in r.steps]
            for i, text in enumerate(user_messages):
                assert ledger.try_charge_turn() is None
                notice = render_notice(ledger.state(in_turn=True), fmt)
                assert text.endswith("\n" + notice)
                assert text == environment_message(
                    text[: -len(notice) - 1], ledger.state(in_turn=True), fmt
                )
                if i:
                    assert text.startswith(observations[i])
            # the ledger refuses exactly when the rollout says the budget ran out
            exhausted = ledger.try_charge_turn() is not None
            if r.termination == "budget_exhausted":
                assert exhausted and r.num_turns == r.budget.turns


def test_notice_bytes_equal_the_controllers(tokenizer: Any) -> None:
    controller_mod = pytest.importorskip("budgetmix.controller")
    policy_mod = pytest.importorskip("budgetmix.policy")
    codec = ChatCodec(tokenizer)
    gen = ScriptedGenerator(echo_agent(error_rate=0.5, seed=5), tokenizer)
    for r in run_rollouts(_specs(6, 3), gen, codec, RolloutSettings(notice_format="v1-compact")):
        ctl = controller_mod.BudgetController(
            Budget(turns=r.budget.turns),
            notice=policy_mod.NotifyEveryTurn(format="v1-compact"),
            clock=lambda: 0.0,
        )
        notices = []
        with ctl.episode() as ep:
            for _ in range(r.num_turns + 1):
                turn = ep.try_begin_turn()
                if turn is None:
                    break
                notices.append(turn.notice)
                turn.end()
                if len(notices) == r.num_turns and r.termination == "success":
                    break
            ep.finish(success=r.success)
        ours = [m["content"].rsplit("\n", 1)[1] for m in r.messages if m["role"] == "user"]
        assert ours == notices[: len(ours)]
        assert len(ours) == r.num_turns


def test_budget_exhausted_rollouts_get_zero_and_stay(tokenizer: Any) -> None:
    codec = ChatCodec(tokenizer)
    sampler = BudgetMix(ceiling=4)
    rng = random.Random(0)
    specs = [
        EpisodeSpec(task=t, budget=sampler.sample(rng), group=0)
        for t in env_tasks("echo", range(40), {})
    ]
    gen = ScriptedGenerator(echo_agent(error_rate=0.5, seed=6), tokenizer)
    rollouts = run_rollouts(specs, gen, codec, STRICT)
    assert len(rollouts) == len(specs)
    assert [r.task_id for r in rollouts] == [s.task.task_id for s in specs]
    exhausted = [r for r in rollouts if r.termination == "budget_exhausted"]
    assert exhausted and all(r.reward == 0.0 and r.num_turns == r.budget.turns for r in exhausted)
    assert all(r.reward == 1.0 for r in rollouts if r.termination == "success")
    for r in rollouts:
        assert r.num_turns <= r.budget.turns
        assert len(r.steps) == r.num_turns
        assert r.budget.sampler == "budgetmix"


def test_length_termination_is_labelled(tokenizer: Any) -> None:
    codec = ChatCodec(tokenizer)

    def rambler(request: GenerationRequest) -> str:
        return "a very long answer"

    settings = RolloutSettings(max_new_tokens=4, token_check="strict")
    [r] = run_rollouts(_specs(1, 3), ScriptedGenerator(rambler, tokenizer), codec, settings)
    assert r.termination == "length" and r.reward == 0.0
    assert sum(r.response_mask) == 4 and r.steps == ()
    tight = RolloutSettings(max_total_tokens=200, max_new_tokens=2)
    gen = ScriptedGenerator(echo_agent(error_rate=1.0), tokenizer)
    [r] = run_rollouts(_specs(1, 9), gen, codec, tight)
    assert r.termination == "length"
    assert len(r.prompt_ids) + len(r.response_ids) <= 200


def test_format_errors_are_step_labels(tokenizer: Any) -> None:
    env = EchoEnv()
    env.reset(0)
    assert not env.step("zz").label.valid
    codec = ChatCodec(tokenizer)
    draw = BudgetDraw(turns=2, sampler="fixed")

    def bad(request: GenerationRequest) -> str:
        return "?"

    [r] = run_rollouts(
        [EpisodeSpec(task=env_tasks("echo", [0], {})[0], budget=draw)],
        ScriptedGenerator(bad, tokenizer),
        codec,
        STRICT,
    )
    assert [s.label.mistake for s in r.steps] == ["model_format_error"] * 2


def test_the_rollouts_ask_the_notice_policy_each_turn_as_the_controller_does(
    tokenizer: Any,
) -> None:
    from budgetmix.exceptions import ConfigError
    from budgetmix.policies.notice import NotifyFinalTurn
    from budgetmix.policy import NotifyEveryTurn

    final = NotifyFinalTurn(format="v1", placement="observation")
    settings = RolloutSettings(notice_format="v1", token_check="strict", notice=final)
    codec = ChatCodec(tokenizer)
    gen = ScriptedGenerator(echo_agent(error_rate=1.0, seed=3), tokenizer)  # never done early
    (r,) = run_rollouts(_specs(1, 4), gen, codec, settings)
    assert r.num_turns == 4 and r.termination == "budget_exhausted"
    observations = [m["content"] for m in r.messages if m["role"] == "user"]
    assert len(observations) == 4  # the opening one and one per later turn
    with_notice = ["Budget (v1)" in o for o in observations]
    assert with_notice == [False, False, False, True]  # the final turn's only
    every = RolloutSettings(notice_format="v1", token_check="strict")
    (d,) = run_rollouts(_specs(1, 4), ScriptedGenerator(echo_agent(1.0, 3), tokenizer), codec,
                        every)  # fmt: skip
    assert all("Budget (v1)" in m["content"] for m in d.messages if m["role"] == "user")
    assert every.notice_policy() == NotifyEveryTurn(format="v1", placement="observation")
    with pytest.raises(ConfigError, match=r"RolloutSettings\.notice"):
        RolloutSettings(notice_format="v1-compact", notice=final)
