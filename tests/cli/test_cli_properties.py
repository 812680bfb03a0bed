"""Property: each sub-command's argument parsing, driven with hostile values, ends defined.

For random flags of each sub-command with random values (text, numbers, NaN and
infinities, JSON of any shape, paths that exist, do not, or are files where a
folder is expected), the parse-and-validate layer -- the same function the
command runs before doing any work -- ends in exactly one of:

* success (exit status 0), with nothing written;
* exit status 2 with exactly one stderr line ``budgetmix <cmd>: error: ...`` that
  names a flag (or the token argparse did not recognise), never a traceback.

Only parsing runs: no episode, training step or model load starts, so each
example costs microseconds and the suite stays within a few seconds.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from budgetmix.cli._errors import run_command
from budgetmix.cli.demo import parse_demo_args
from budgetmix.cli.eval import parse_eval_args
from budgetmix.cli.notice import parse_notice_args
from budgetmix.cli.report import parse_report_args
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytest.importorskip("numpy")
pytest.importorskip("gymnasium")

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- hostile values --------------------------------------------------------------------
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
PATHS = st.sampled_from(
    ["", ".", "missing", "/no/such/path", "file.txt", "dir", "model", "file.txt/under", "a" * 300]
)
VALUES = st.one_of(
    st.text(max_size=16),
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    st.integers().map(str),
    st.floats().map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e999", "0", "-1", "1", "2", "0.5", "1,2", "0,x"]),
    JSON_VALUES.map(lambda v: json.dumps(v, allow_nan=True)),
    st.sampled_from(["{", "[1]", "5", "null", '{"kind": "zzz"}', "{}"]),
    PATHS,
)


SMALL = st.integers(min_value=1, max_value=6).map(str)


def flag_values(flags: Sequence[str], good: dict[str, st.SearchStrategy[str]]) -> Any:
    """Pairs ``(flag, value)``: any flag of the command, a hostile or a plausible value."""
    flag = st.sampled_from(list(flags))
    return st.lists(
        flag.flatmap(lambda f: st.tuples(st.just(f), VALUES | good.get(f, VALUES))),
        max_size=5,
    )


def argv_of(pairs: Sequence[tuple[str, str]], extra: Sequence[str]) -> list[str]:
    argv = [*extra]
    for f, v in pairs:
        # --flag=value keeps a value that starts with '-' a value
        argv.append(f"{f}={v}" if v.startswith("-") else f)
        if not v.startswith("-"):
            argv.append(v)
    return argv


# -- the harness -----------------------------------------------------------------------
def outcome(prog: str, parse: Callable[[list[str]], object], argv: list[str]) -> tuple[int, str]:
    """``(exit status, stderr)`` of the command's parse layer, as ``main`` reports it."""
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            code: object = run_command(prog, lambda: (parse(argv), 0)[1])
        except SystemExit as exc:
            code = exc.code
    assert isinstance(code, int), code
    return code, err.getvalue()


def check(prog: str, flags: Sequence[str], code: int, err: str, workspace: Path) -> None:
    """The invariant: status 0 or 2; on 2, one line naming a flag; never a traceback."""
    assert code in (0, 2), (code, err)
    event(f"exit status {code}")
    if os.environ.get("CLI_PROPERTIES_SHOW"):
        print(f"{code} {err.strip()[:150]}", file=sys.__stderr__)
    assert "Traceback" not in err
    assert sorted(p.name for p in workspace.iterdir()) == WORKSPACE_FILES  # nothing written
    if code == 0:
        return
    lines = err.splitlines()
    assert len(lines) == 1, err
    head = f"{prog}: error: "
    assert lines[0].startswith(head), lines[0]
    why = lines[0][len(head) :]
    named = any(f in why for f in flags) or why.startswith(("unrecognized", "ambiguous"))
    assert named, lines[0]


WORKSPACE_FILES = ["dir", "file.txt", "model", "results.jsonl"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A working directory with a file, a folder and a folder that looks like a model."""
    root = tmp_path_factory.mktemp("cli")
    (root / "file.txt").write_text("x")
    (root / "results.jsonl").write_text("")
    (root / "dir").mkdir()
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    before = os.getcwd()
    os.chdir(root)
    yield root
    os.chdir(before)


# -- one property per sub-command --------------------------------------------------------
NOTICE_FLAGS = ["--turns", "--turn", "--tool-calls", "--format", "--all"]


@SETTINGS
@given(
    pairs=flag_values(
        NOTICE_FLAGS,
        {"--format": st.sampled_from(["v1", "v1-compact"]), "--turns": SMALL, "--turn": SMALL},
    )
)
def test_notice_parsing(workspace: Path, pairs: list[tuple[str, str]]) -> None:
    code, err = outcome("budgetmix notice", parse_notice_args, argv_of(pairs, []))
    check("budgetmix notice", NOTICE_FLAGS, code, err, workspace)


DEMO_FLAGS = ["--quick", "--full", "--out", "--stages", "--notice", "--exhaustion"]
DEMO_FLAGS += ["--early-stop", "--policy"]
DEMO_GOOD = {
    "--notice": st.sampled_from(["every_turn", "final_turn", "off"]),
    "--early-stop": st.sampled_from(["no_progress", "off"]),
    "--stages": st.sampled_from(["controller", "grid,train"]),
    "--policy": st.sampled_from(['{"notice": {"kind": "at_most", "turns": 2}}', "{}"]),
    "--out": PATHS,
}


@SETTINGS
@given(pairs=flag_values(DEMO_FLAGS, DEMO_GOOD))
def test_demo_parsing(workspace: Path, pairs: list[tuple[str, str]]) -> None:
    code, err = outcome("budgetmix demo", parse_demo_args, argv_of(pairs, []))
    check("budgetmix demo", DEMO_FLAGS, code, err, workspace)


EVAL_FLAGS = [
    "--config", "--env", "--env-kwargs", "--seeds", "--tasks", "--budgets", "-k", "--samples",
    "--concurrency", "--agent", "--noise", "--blind", "--model", "--base-url", "--model-name",
    "--api-key-env", "--temperature", "--max-new-tokens", "--notice", "--seed",
    "--env-seed-mode", "--training-ceiling", "--fault-step", "--policy", "--no-prefix-sharing",
    "--on-error", "--out", "--overwrite", "--no-plots", "--no-progress", "--n-boot",
]  # fmt: skip
EVAL_GOOD = {
    "--env": st.sampled_from(["frozenlake", "faulty_tools"]),
    "--agent": st.sampled_from(["oracle", "random", "local", "checkpoint", "openai"]),
    "--env-kwargs": st.sampled_from(['{"map_name": "4x4"}', '{"hops": 2}', "{}"]),
    "--budgets": st.sampled_from(["4", "2,4,8"]),
    "--model": PATHS,
    "--base-url": st.sampled_from(["http://127.0.0.1:1/v1", "ftp://x", "https://"]),
    "--config": PATHS,
    **{f: SMALL for f in ("--tasks", "-k", "--concurrency", "--seed", "--fault-step")},
    "--seeds": st.sampled_from(["0", "0,1,2"]),
    "--noise": st.sampled_from(["0", "0.3", "1"]),
    "--notice": st.sampled_from(["v1", "none"]),
}


@SETTINGS
@given(pairs=flag_values(EVAL_FLAGS, EVAL_GOOD), base=st.booleans())
def test_eval_parsing(workspace: Path, pairs: list[tuple[str, str]], base: bool) -> None:
    extra = ["--env", "frozenlake", "--budgets", "4"] if base else []
    code, err = outcome("budgetmix eval", parse_eval_args, argv_of(pairs, extra))
    check("budgetmix eval", EVAL_FLAGS, code, err, workspace)


REPORT_FLAGS = ["results", "--compare", "--labels", "-k", "--out", "--no-plots", "--n-boot"]


@SETTINGS
@given(
    pairs=flag_values(REPORT_FLAGS[1:], {"--compare": PATHS, "--out": PATHS}),
    results=PATHS | st.just("results.jsonl"),
)
def test_report_parsing(workspace: Path, pairs: list[tuple[str, str]], results: str) -> None:
    code, err = outcome("budgetmix report", parse_report_args, argv_of(pairs, [results]))
    check("budgetmix report", REPORT_FLAGS, code, err, workspace)


TRAIN_FLAGS = ["--config", "--preset", "--output-dir", "--resume", "--set", "--no-progress"]
FIELDS = ["steps", "env", "env_kwargs", "sampler", "model_path", "lr", "output_dir", "nosuch"]
TRAIN_GOOD = {
    "--preset": st.sampled_from(["echo-tiny", "frozenlake-tiny", "bogus"]),
    "--set": st.tuples(st.sampled_from(FIELDS), VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
    "--output-dir": PATHS,
    "--config": PATHS,
}


@SETTINGS
@given(pairs=flag_values(TRAIN_FLAGS, TRAIN_GOOD))
def test_train_parsing(workspace: Path, pairs: list[tuple[str, str]]) -> None:
    from budgetmix.cli.train import parse_train_args

    code, err = outcome("budgetmix train", parse_train_args, argv_of(pairs, []))
    check("budgetmix train", TRAIN_FLAGS, code, err, workspace)


DIAGNOSE_FLAGS = ["--a", "--b", "--desc", "--success-rate", "--budgets", "--episodes"]
DIAGNOSE_FLAGS += ["--inject-at", "--out"]
POLICIES = st.sampled_from(["oracle", "blind", "model", "dir", "missing"])
DIAGNOSE_GOOD = {
    "--a": POLICIES,
    "--b": POLICIES,
    "--desc": st.sampled_from(["SFF,HFF,HHG", "SG", "S" + "F" * 2000 + "G"]),
    "--out": PATHS,
    "--episodes": SMALL,
    "--inject-at": SMALL,
    "--budgets": st.sampled_from(["4", "4,7"]),
    "--success-rate": st.sampled_from(["0.8", "1"]),
}


@SETTINGS
@given(pairs=flag_values(DIAGNOSE_FLAGS, DIAGNOSE_GOOD), base=st.booleans())
def test_diagnose_parsing(workspace: Path, pairs: list[tuple[str, str]], base: bool) -> None:
    from budgetmix.cli.diagnose import parse_diagnose_args

    extra = ["--a", "oracle", "--b", "blind"] if base else []
    code, err = outcome("budgetmix diagnose", parse_diagnose_args, argv_of(pairs, extra))
    check("budgetmix diagnose", DIAGNOSE_FLAGS, code, err, workspace)
