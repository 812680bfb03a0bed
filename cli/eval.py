"""``budgetmix eval`` and ``budgetmix report``: the command-line faces of the evaluator.

``eval_main(argv)`` runs a Pass@(K,T) grid from a config file (JSON or TOML,
keys as the long flags with ``_``) and/or flags (flags win), shows a progress
bar, and writes into ``--out``: ``results.jsonl``, ``summary.json``,
``report.md`` and the PNG plots. Rerunning the same command resumes an
interrupted run and does no work for a finished one.

Agents: ``random`` (budget-blind), ``oracle`` and ``noisy`` (the environment's
scripted oracle, a noisy one with ``--noise``), ``local`` (a checkpoint directory
through :class:`budgetmix.adapters.LocalChatModel`) and ``openai`` (any
OpenAI-compatible server at ``--base-url``; key from ``--api-key-env``), and
``checkpoint`` (a budgetmix training checkpoint, driven in its training layout).
``--notice`` defaults to ``v1``; for ``checkpoint`` to the format its
``training_env.json`` records. ``--blind`` declares the agent budget-blind: no
notice, no turns remaining, and prefix sharing.

``report_main(argv)`` (:mod:`budgetmix.cli.report`) rebuilds the report from a results
file or compares two (``--compare``). Exit codes: 0 ok, 2 after one stderr line naming
the flag or key (``budgetmix eval: error: --samples: must be an integer >= 1, got 0``)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from budgetmix._deps import require
from budgetmix.adapters.env_agent import ChatModelEnvAgent
from budgetmix.cli._errors import (
    UsageError,
    blame,
    choice,
    integer,
    integers,
    mapping,
    model_dir,
    number,
    output_dir,
    run_command,
)
from budgetmix.cli.eval_args import AGENTS as _AGENTS
from budgetmix.cli.eval_args import EXECUTORS as _EXECUTORS
from budgetmix.cli.eval_args import eval_parser as _parser
from budgetmix.cli.eval_progress import interrupt_account, progress_callbacks
from budgetmix.cli.report import report_main, show_report, write_report
from budgetmix.cli.tracing import TRACE_CHOICES, start_tracing
from budgetmix.environment import EnvAgent, Task
from budgetmix.evaluation.agents import ScriptedEnvAgent
from budgetmix.evaluation.runner import AgentFactory, EvalConfig, Evaluator
from budgetmix.exceptions import BudgetmixError, ConfigError, MissingExtraError
from budgetmix.notice import NOTICE_FORMATS
from budgetmix.telemetry.exporters import TRACES_EXPORTER_ENV

__all__ = [
    "build_agent_factory",
    "build_tasks",
    "eval_main",
    "load_config",
    "parse_eval_args",
    "report_main",
]

_ERRORS = (BudgetmixError, ValueError)


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON or TOML config (by suffix; ``-`` in keys becomes ``_``).

    Raises:
        ConfigError: unreadable file, bad syntax, or not a table/object.
    """
    p = Path(path)
    try:
        text = p.read_text()
        data = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"config {str(p)!r}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config {str(p)!r}: expected a table/object at the top")
    return {k.replace("-", "_"): v for k, v in data.items()}


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    with blame("--config"):
        cfg: dict[str, Any] = {} if args.config is None else load_config(args.config)
    known = set(vars(args)) - {"config"}
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise UsageError("--config", f"unknown keys {unknown}")
    for key, value in vars(args).items():
        if key != "config" and value is not None:
            cfg[key] = value
    return cfg


# What each setting may hold, whether it came from a flag or the config file.
_INT_MIN = {
    "tasks": 1,
    "samples": 1,
    "concurrency": 1,
    "workers": 1,
    "max_new_tokens": 1,
    "batch_size": 1,
    "seed": 0,
    "training_ceiling": 1,
    "fault_step": 1,
    "n_boot": 1,
}
_FLOAT_RANGE: dict[str, tuple[float, float | None]] = {
    "noise": (0.0, 1.0),
    "temperature": (0.0, None),
}
_CHOICES = {
    "agent": _AGENTS,
    "env_seed_mode": ("task", "sample"),
    "on_error": ("raise", "record"),
    "trace": TRACE_CHOICES,
    "executor": _EXECUTORS,
}
_BOOLS = ("blind", "no_prefix_sharing", "overwrite", "no_plots", "no_progress")


def _check_value(key: str, value: Any) -> None:
    flag = "--" + key.replace("_", "-")
    if key in _INT_MIN:
        integer(flag, value, low=_INT_MIN[key])
    elif key in _FLOAT_RANGE:
        number(flag, value, low=_FLOAT_RANGE[key][0], high=_FLOAT_RANGE[key][1])
    elif key in _CHOICES:
        choice(flag, value, _CHOICES[key])
    elif key in _BOOLS:
        if not isinstance(value, bool):
            raise UsageError(flag, f"must be true or false, got {value!r}")
    elif key in ("seeds", "budgets"):
        integers(flag, value, low=1 if key == "budgets" else 0)
    elif key in ("env_kwargs", "policy"):
        mapping(flag, value)
    elif not isinstance(value, str):
        raise UsageError(flag, f"must be a string, got {value!r}")


def _check_agent(cfg: Mapping[str, Any]) -> None:
    kind = cfg.get("agent", "oracle")
    if cfg.get("batch_size", 1) > 1 and kind != "checkpoint":
        raise UsageError("--batch-size", f"only agent checkpoint batches episodes, not {kind}")
    if kind in ("local", "checkpoint"):
        if not cfg.get("model"):
            raise UsageError("--model", f"a model directory is required for agent {kind}")
        model_dir("--model", cfg["model"])
    if kind == "openai":
        url = urlsplit(cfg.get("base_url") or "")
        if url.scheme not in ("http", "https") or not url.netloc:
            # the URL itself is not echoed: it may carry credentials
            raise UsageError("--base-url", "an http(s) URL is required for agent openai")
        if not cfg.get("model_name"):
            raise UsageError("--model-name", "a model name is required for agent openai")


def _check_env(env: str, env_kwargs: Mapping[str, Any]) -> None:
    from budgetmix.training.envs import make_env, resolve_env

    with blame("--env"):
        resolve_env(env)
    try:
        make_env(env, **env_kwargs)
    except MissingExtraError as exc:
        raise UsageError("--env", str(exc)) from None
    except Exception as exc:  # gymnasium raises its own error types for bad arguments
        raise UsageError("--env-kwargs", str(exc) or type(exc).__name__) from None


def parse_eval_args(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The validated settings (config file, then flags) ``argv`` describes; nothing runs.

    Checks every value's type and range, builds the environment once and checks a
    model agent's directory exists (before any loader or model hub is reached).

    Raises:
        UsageError: a bad value; the message names the flag (also for config-file keys).
        SystemExit: argparse's own errors (exit status 2, one stderr line) and ``--help``.
    """
    cfg = _settings(_parser().parse_args(argv))
    for key, value in cfg.items():
        _check_value(key, value)
    for key in ("env", "budgets"):
        if not cfg.get(key):
            raise UsageError(f"--{key}", "required (the flag or the config file's key)")
    _check_env(cfg["env"], cfg.get("env_kwargs", {}))
    if cfg.get("notice") is not None:
        choice("--notice", cfg["notice"], [*sorted(NOTICE_FORMATS), "none"])
    if cfg.get("policy") is not None:
        from budgetmix.policies import policy_from_config

        with blame("--policy"):
            policy_from_config(cfg["policy"])
    _check_agent(cfg)
    output_dir("--out", cfg.get("out", "runs/eval"))
    return cfg


def build_tasks(env: str, env_kwargs: Mapping[str, Any], seeds: Sequence[int]) -> list[Task]:
    """One task per seed; random FrozenLake maps get ``map_seed = seed`` (a map per task).

    Raises:
        ConfigError: unknown environment or bad arguments.
    """
    from budgetmix.training.envs import make_env

    make_env(env, **env_kwargs)  # validate once, before any episode
    tasks = []
    for s in seeds:
        kw = dict(env_kwargs)
        if env == "frozenlake" and kw.get("map_name") == "random" and "map_seed" not in kw:
            kw["map_seed"] = s
        tasks.append(
            Task(task_id=f"{env}-{s}", make_env=functools.partial(make_env, env, **kw), seed=s)
        )
    return tasks


def _oracle(env: str) -> tuple[Any, bool]:
    from budgetmix.training import envs

    if env == "frozenlake":
        return envs.FrozenLakeOracle(), True
    if env == "faulty_tools":
        return envs.FaultyToolsOracle(), False  # never reads its budget
    if env == "humaneval":
        return envs.HumanEvalOracle(), False
    raise ConfigError(f"agent: no oracle for environment {env!r}")


def _scripted_factory(cfg: Mapping[str, Any], ident: dict[str, Any]) -> AgentFactory:
    """The budget-blind random agent, the environment's oracle or a noisy oracle."""
    from budgetmix.training import envs

    kind, env, blind = ident["kind"], cfg["env"], ident["blind"]
    noise = float(cfg.get("noise", 0.2))
    ident["noise"] = noise if kind != "oracle" else None

    def scripted() -> EnvAgent:
        if kind == "random":
            return ScriptedEnvAgent(envs.RandomAgent(invalid_rate=noise), sees_budget=False)
        oracle, aware = _oracle(env)
        agent = oracle if kind == "oracle" else envs.NoisyOracle(oracle, mistake_rate=noise)
        return ScriptedEnvAgent(agent, sees_budget=aware and not blind)

    return scripted


def _checkpoint_factory(cfg: Mapping[str, Any], ident: dict[str, Any]) -> AgentFactory:
    """A budgetmix training checkpoint, driven in its training layout (token in, token out)."""
    if not cfg.get("model"):
        raise ConfigError("model: a checkpoint directory is required for agent checkpoint")
    model_dir("model", cfg["model"])  # never let a missing path reach the loader
    from budgetmix.training.data.models import load_pretrained
    from budgetmix.training.serving.serve import TrainedPolicyAgent

    weights, tokenizer = load_pretrained(cfg["model"])
    temperature = ident["temperature"]
    max_new = int(cfg.get("max_new_tokens", 16))
    seed = int(cfg.get("seed", 0))
    ident["model"] = str(cfg["model"])
    ident["episode_seeds"] = True  # each (task, sample) cell samples its own stream
    # batch_size is left out of the identity: it gives batch 1's ids (a resume may change it)
    return TrainedPolicyAgent.factory(
        weights,
        tokenizer,
        batch_size=int(cfg.get("batch_size", 1)),
        temperature=temperature,
        max_new_tokens=max_new,
        seed=seed,
        episode_seeds=True,
    )


def _local_factory(cfg: Mapping[str, Any], ident: dict[str, Any]) -> AgentFactory:
    """A local Hugging Face chat model (:class:`~budgetmix.adapters.local.LocalChatModel`)."""
    if not cfg.get("model"):
        raise ConfigError("model: a checkpoint directory is required for agent local")
    model_dir("model", cfg["model"])  # never let a missing path reach the model hub
    from budgetmix.adapters.local import LocalChatModel

    model = LocalChatModel.from_pretrained(
        cfg["model"],
        local_files_only=True,
        temperature=ident["temperature"],
        max_new_tokens=int(cfg.get("max_new_tokens", 64)),
        seed=int(cfg.get("seed", 0)),
    )
    ident["model"] = str(cfg["model"])
    blind = ident["blind"]
    return lambda: ChatModelEnvAgent(model, sees_budget=not blind)


def _openai_factory(cfg: Mapping[str, Any], ident: dict[str, Any]) -> AgentFactory:
    """Any OpenAI-compatible server at ``base_url``; the key from ``api_key_env``."""
    if not cfg.get("base_url") or not cfg.get("model_name"):
        raise ConfigError("base_url and model_name are required for agent openai")
    openai = require("openai", "openai")
    from budgetmix.adapters.openai import OpenAIChatModel

    key = os.environ.get(str(cfg.get("api_key_env", "OPENAI_API_KEY")), "EMPTY")
    client = openai.AsyncOpenAI(base_url=cfg["base_url"], api_key=key)
    chat = OpenAIChatModel(
        client,
        cfg["model_name"],
        provider_name="openai-compatible",
        request_options={"temperature": ident["temperature"]},
    )
    ident.update(base_url=cfg["base_url"], model=cfg["model_name"])
    blind = ident["blind"]
    return lambda: ChatModelEnvAgent(chat, sees_budget=not blind, use_async=True)


# Each builder fills in the agent's identity as it goes (it is part of the fingerprint).
_MODEL_FACTORIES: dict[str, Callable[[Mapping[str, Any], dict[str, Any]], AgentFactory]] = {
    "checkpoint": _checkpoint_factory,
    "local": _local_factory,
    "openai": _openai_factory,
}


def build_agent_factory(cfg: Mapping[str, Any]) -> tuple[AgentFactory, dict[str, Any]]:
    """The per-episode agent factory and the agent's identity (for the fingerprint).

    Raises:
        ConfigError: unknown agent, missing ``base_url``, or ``model`` missing or not a
            local model directory (checked before any loader runs).
        MissingExtraError: the model agent's dependencies are missing.
    """
    kind = cfg.get("agent", "oracle")
    ident: dict[str, Any] = {"kind": kind, "blind": bool(cfg.get("blind", False))}
    if kind in ("random", "oracle", "noisy"):
        return _scripted_factory(cfg, ident), ident
    build = _MODEL_FACTORIES.get(kind)
    if build is None:
        raise ConfigError(f"agent: expected one of {', '.join(_AGENTS)}, got {kind!r}")
    ident["temperature"] = float(cfg.get("temperature", 0.0))
    return build(cfg, ident), ident


def _default_notice(cfg: Mapping[str, Any]) -> str:
    """``v1``, or for a checkpoint agent the format its ``training_env.json`` records."""
    if cfg.get("agent") == "checkpoint" and cfg.get("model"):
        from budgetmix.training.serving.serve import deployment_notice

        trained = deployment_notice(cfg["model"])
        if trained is not None:
            return trained.format
    return "v1"


def _eval_config(cfg: Mapping[str, Any], agent_ident: Mapping[str, Any]) -> EvalConfig:
    env = str(cfg["env"])
    notice = cfg["notice"] if "notice" in cfg else _default_notice(cfg)
    return EvalConfig(
        budgets=tuple(cfg["budgets"]),
        samples=int(cfg.get("samples", 1)),
        concurrency=int(cfg.get("concurrency", 8)),
        notice_format=None if notice in (None, "none") else str(notice),
        seed=int(cfg.get("seed", 0)),
        env_seed_mode=cfg.get("env_seed_mode", "sample" if env == "frozenlake" else "task"),
        training_ceiling=cfg.get("training_ceiling"),
        fault_step=cfg.get("fault_step"),
        prefix_sharing=not cfg.get("no_prefix_sharing", False),
        on_error=cfg.get("on_error", "raise"),
        identity={"env": env, "env_kwargs": dict(cfg.get("env_kwargs", {})), "agent": agent_ident},
        policy=cfg.get("policy"),
    )


def _executor(cfg: Mapping[str, Any]) -> Any:
    """``--executor`` (default: a process pool when ``--workers`` is above 1, else threads)."""
    from budgetmix.evaluation.executors import executor_named

    workers = int(cfg.get("workers", 1))
    name = cfg.get("executor") or ("process" if workers > 1 else "thread")
    with blame("--executor"):
        return executor_named(name, workers)


def _run_eval(cfg: Mapping[str, Any]) -> int:
    env = str(cfg["env"])
    seeds = cfg.get("seeds") or list(range(int(cfg.get("tasks", 5))))
    tasks = build_tasks(env, dict(cfg.get("env_kwargs", {})), seeds)
    # a damaged model directory fails inside the loader: still one line naming the flag
    flag = "--model" if cfg.get("agent") in ("local", "checkpoint") else "--agent"
    with blame(flag, BudgetmixError, OSError, ValueError, TypeError):
        factory, agent_ident = build_agent_factory(cfg)
    out = Path(cfg.get("out", "runs/eval"))
    evaluator = Evaluator(factory, tasks, _eval_config(cfg, agent_ident))
    overwrite = bool(cfg.get("overwrite", False))
    bar, on_plan, on_record = progress_callbacks(not cfg.get("no_progress", False))
    tracing = None
    if cfg.get("trace") or os.environ.get(TRACES_EXPORTER_ENV):
        with blame("--trace"):
            tracing = start_tracing(cfg.get("trace"), out)
    try:
        with bar or contextlib.nullcontext():
            run = evaluator.run(
                out / "results.jsonl",
                on_record=on_record,
                on_plan=on_plan,
                overwrite=overwrite,
                executor=_executor(cfg),
            )
    finally:
        traced = tracing.finish() if tracing is not None else None
    if traced is not None:
        print(f"traces: {traced}")
    print(
        f"{run.live_episodes} episodes run, {run.derived_records} derived by prefix sharing, "
        f"{run.skipped} already done; {run.env_steps} env steps "
        f"({run.env_steps_separate} without sharing) in {run.elapsed_s:.1f}s"
    )
    n_boot = int(cfg.get("n_boot", 1000))
    show_report(
        write_report(
            out / "results.jsonl", out, plots=not cfg.get("no_plots", False), n_boot=n_boot
        )
    )
    return 0


def eval_main(argv: Sequence[str] | None = None) -> int:
    """``budgetmix eval``: run the grid, write results, summary, markdown and plots.

    Returns 0; 2 after one stderr line (a bad flag or config key, named, or a budgetmix
    error); 130/143 after Ctrl-C/SIGTERM, with one line naming what the rerun resumes.
    """
    args = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--overwrite"]
    out: list[Path] = []

    def body() -> int:
        out.append(Path((cfg := parse_eval_args(argv)).get("out", "runs/eval")) / "results.jsonl")
        return _run_eval(cfg)

    account = lambda: interrupt_account(out[-1] if out else None, args)  # noqa: E731
    return run_command("budgetmix eval", body, errors=_ERRORS, on_interrupt=account)
