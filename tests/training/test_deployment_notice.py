"""A checkpoint records how it was trained, and its deployment reads it (issue 17 follow-ups).

One short training run of an ML team's own checkpoint (a byte-level BPE, the official
Qwen3 template, a tiny Qwen2 model) on a tool environment, with
``TrainConfig.chat_template`` set to TRL's prefix-stable Qwen3 training variant:

* the trainer trains with the variant and saves it as the checkpoint's template, so
  ``serve.chat_model`` serves with it;
* ``training_env.json`` records the notice placement and format; ``deployment_notice``
  reads them back, ``chat_model`` and ``TrainedPolicyAgent.from_pretrained`` carry them,
  and ``run_agent`` refuses a controller with another placement or format.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _layout_fixtures import TEMPLATES, LookupEnv, build_bpe_tokenizer, save_tiny_checkpoint
from budgetmix import Budget, BudgetController
from budgetmix.adapters import arun_agent, run_agent
from budgetmix.adapters._loop_support import check_trained_notice
from budgetmix.cli.train import parse_train_args
from budgetmix.exceptions import ConfigError
from budgetmix.policies import NotifyEveryTurn, NotifyWhenAtMost
from budgetmix.training.config import TrainConfig
from budgetmix.training.data.models import load_pretrained
from budgetmix.training.data.provenance import TRAINING_ENV_FILE, write_training_env
from budgetmix.training.serving import serve
from budgetmix.training.trainer import Trainer, train

OFFICIAL = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
VARIANT_FILE = TEMPLATES / "Qwen-Qwen3-training-trl.jinja"
VARIANT = VARIANT_FILE.read_text()
TRAINED = NotifyEveryTurn(format="v1-compact", placement="observation")


def _config(base: Path, out: Path, **more: Any) -> TrainConfig:
    return TrainConfig(
        env="_layout_fixtures:LookupEnv",
        model_path=str(base),
        chat_template=str(VARIANT_FILE),
        sft_steps=0,
        steps=1,
        groups_per_step=1,
        group_size=2,
        max_new_tokens=8,
        max_total_tokens=2048,
        sampler={"kind": "fixed", "turns": 3},
        output_dir=str(out),
        progress=False,
        **more,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(base checkpoint, trained final/)``."""
    tokenizer = build_bpe_tokenizer("qwen")
    tokenizer.chat_template = OFFICIAL
    base = tmp_path_factory.mktemp("base")
    save_tiny_checkpoint("qwen", tokenizer, base)
    result = train(_config(base, tmp_path_factory.mktemp("run")))
    assert result.final_model_dir is not None
    return base, result.final_model_dir


def test_training_uses_the_template_file_and_the_checkpoint_keeps_it(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    base, final = trained
    assert OFFICIAL != VARIANT
    trainer = Trainer(_config(base, tmp_path))  # what the run above rendered its rollouts with
    assert trainer.codec.template.template == VARIANT
    assert load_pretrained(base)[1].chat_template == OFFICIAL  # the base is untouched
    assert load_pretrained(final)[1].chat_template == VARIANT
    assert (final / "chat_template.jinja").read_text() == VARIANT  # a server started on it
    assert serve.chat_model(final).template.template == VARIANT


def test_the_checkpoint_records_its_notice_and_deployment_reads_it(
    trained: tuple[Path, Path],
) -> None:
    _, final = trained
    recorded = json.loads((final / TRAINING_ENV_FILE).read_text())
    assert recorded["notice"] == {"placement": "observation", "format": "v1-compact"}
    assert serve.deployment_notice(final) == TRAINED
    assert serve.chat_model(final).trained_notice == TRAINED
    assert serve.TrainedPolicyAgent.from_pretrained(final).trained_notice == TRAINED
    # the trainer also records the parser it read replies with, and no grace turn (issue 26)
    assert recorded["tool_call_format"] == "hermes" and recorded["grace_turn"] is False
    assert serve.chat_model(final).trained_grace_turn is False


def test_run_agent_refuses_another_notice_layout_for_a_trained_checkpoint(
    trained: tuple[Path, Path],
) -> None:
    _, final = trained
    chat = serve.chat_model(final, max_new_tokens=4)
    env = LookupEnv()
    task = env.reset(0)
    wrong = [
        Budget(turns=2),  # run_agent's own controller: ephemeral v1
        BudgetController(Budget(turns=2), notice=NotifyEveryTurn(format="v1-compact")),
        BudgetController(Budget(turns=2), notice=NotifyEveryTurn(placement="observation")),
    ]
    for budget in wrong:
        with pytest.raises(ConfigError, match=r"trained with notices placed 'observation' in "
                           r"format 'v1-compact'.*deployment_notice"):  # fmt: skip
            run_agent(chat, env.controller_tools(), task, budget)
    with pytest.raises(ConfigError, match=r"placed 'observation' in format 'v1-compact'"):
        asyncio.run(arun_agent(chat, env.controller_tools(), task, Budget(turns=2)))
    controller = BudgetController(Budget(turns=1), notice=serve.deployment_notice(final))
    run = run_agent(chat, env.controller_tools(), task, controller, system=env.instructions())
    assert run.turns_used == 1
    chat.trained_notice = None  # deployed otherwise on purpose
    assert run_agent(chat, env.controller_tools(), task, Budget(turns=1)).turns_used == 1


def test_the_same_placement_and_format_with_another_schedule_is_accepted() -> None:
    class Model:
        trained_notice = TRAINED
        model_name = "m"

    check_trained_notice(Model(), NotifyWhenAtMost(3, format="v1-compact", placement="observation"))
    with pytest.raises(ConfigError, match="'ephemeral' in format 'v1-compact'"):
        check_trained_notice(Model(), NotifyWhenAtMost(3, format="v1-compact"))


def test_a_directory_without_a_recorded_notice_or_with_a_bad_one(tmp_path: Path) -> None:
    write_training_env(tmp_path, "echo", {})
    assert serve.deployment_notice(tmp_path) is None
    assert serve.deployment_notice(tmp_path / "nothing-here") is None
    write_training_env(tmp_path, "echo", {}, notice_format="v9")
    with pytest.raises(ConfigError, match=r"training_env.json: notice.format must be one of"):
        serve.deployment_notice(tmp_path)


def test_chat_template_must_name_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"TrainConfig.chat_template: no file 'missing.jinja'"):
        TrainConfig(chat_template="missing.jinja")
    with pytest.raises(ConfigError, match=r"--chat-template: 'missing.jinja' does not exist"):
        parse_train_args(["--chat-template", "missing.jinja"])
    config, _ = parse_train_args(["--chat-template", str(VARIANT_FILE)])
    assert config.chat_template == str(VARIANT_FILE)
    assert config.chat_template_text() == VARIANT
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_eval_of_the_checkpoint_on_its_tool_environment_uses_its_notice(
    trained: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``budgetmix eval --agent checkpoint`` on the tool environment: without ``--notice``
    the notice format is the one the checkpoint records; an explicit one wins."""
    from budgetmix.cli import main

    _, final = trained
    for extra, expected in (([], "v1-compact"), (["--notice", "v1"], "v1")):
        out = tmp_path / expected
        argv = ["eval", "--agent", "checkpoint", "--model", str(final), "--max-new-tokens", "4"]
        argv += ["--env", "_layout_fixtures:LookupEnv", "--budgets", "2", "--tasks", "1"]
        argv += ["--out", str(out), "--no-plots", "--no-progress", *extra]
        assert main(argv) == 0, capsys.readouterr().err
        header = json.loads((out / "results.jsonl").read_text().splitlines()[0])
        assert header["identity"]["notice_format"] == expected
