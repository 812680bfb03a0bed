"""The set-up of run.sh's two commands: what each installs, and that it says so step by step.

The installs themselves are checked on a fresh clone by tests/test_setup_fresh_clone.py
(the demo's virtualenv holds no agent framework and no backend, the demo runs on it, the
suite's set-up would replace nothing); here scripts/bootstrap.sh runs against a stub
interpreter that records what pip is asked to do.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"


def _profiles() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "setup_profiles", ROOT / "scripts/setup_profiles.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_demo_installs_no_framework_and_no_backend() -> None:
    p = _profiles()
    demo = {p.normalized(r) for r in p.requirements("demo")}
    suite = {p.normalized(r) for r in p.requirements("test")}
    frameworks = {"openai-agents", "pydantic-ai-slim", "smolagents", "litellm", "langgraph"}
    assert frameworks <= p.left_out("demo") and {"arize-phoenix", "mlflow"} <= p.left_out("demo")
    assert not demo & p.left_out("demo")
    assert {"torch", "transformers", "peft", "gymnasium", "matplotlib", "tenacity"} <= demo
    assert demo < suite and frameworks <= suite and {"pytest", "mypy", "ruff"} <= suite


STUB = """\
#!/usr/bin/env bash
# a venv's python: "-m pip ..." is recorded (and faked); anything else runs for real
if [ "$1" = -m ] && [ "$2" = pip ]; then
  shift 2
  echo "pip $*" >> "$STATE/calls"
  case "$1" in
    show) [ -f "$STATE/$2" ] && echo "Version: $(cat "$STATE/$2")" || exit 1 ;;
    list) cat "$STATE/installed" 2>/dev/null ;;
    install)
      prev=
      for a in "$@"; do
        case "$prev $a" in
          "-c /dev/fd/"*) cat "$a" >> "$STATE/constraints" ;;
          "-r /dev/fd/"*) cat "$a" >> "$STATE/requirements"; echo new==1 >> "$STATE/installed" ;;
          *" torch=="*) echo "${a#torch==}+cpu" > "$STATE/torch" ;;
          *" -e") echo 0.1.0 > "$STATE/budgetmix" ;;
        esac
        prev=$a
      done ;;
  esac
  exit 0
fi
exec python3 "$@"
"""


def _bootstrap(venv: Path, state: Path, profile: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BOOTSTRAP), str(venv), profile],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "STATE": str(state)},
    )


def _steps(stderr: str) -> list[tuple[str, str]]:
    steps = []
    for line in stderr.splitlines():
        match = re.fullmatch(r"setup: (.+?) +\d+\.\d s(?:  (.*))?", line)
        assert match, f"not a step line: {line!r}"
        steps.append((match.group(1), match.group(2) or ""))
    return steps


def test_each_step_is_a_line_with_its_time_and_a_rerun_installs_nothing(tmp_path: Path) -> None:
    venv, state = tmp_path / "venv", tmp_path / "state"
    (venv / "bin").mkdir(parents=True)
    state.mkdir()
    (venv / "bin" / "python").write_text(textwrap.dedent(STUB))
    (venv / "bin" / "python").chmod(0o755)

    first = _bootstrap(venv, state, "demo")
    assert first.returncode == 0, first.stderr
    assert _steps(first.stderr) == [
        ("virtualenv " + str(venv), "already there"),
        ("torch 2.13.0, CPU wheel", "installed 2.13.0+cpu"),
        ("requirements of budgetmix[train,envs,plots]", "1 new distributions, 1 in all"),
        ("budgetmix (editable)", "installed (editable)"),
        ("total (demo)", ""),
    ]
    # pip got the demo's requirements and nothing that would replace what is there
    asked = (state / "requirements").read_text().splitlines()
    assert asked == _profiles().requirements("demo")
    assert (state / "constraints").read_text().splitlines() == list(_profiles().CONSTRAINTS)
    installs = [
        c for c in (state / "calls").read_text().splitlines() if c.startswith("pip install")
    ]
    assert not [c for c in installs if "--upgrade" in c or "--force-reinstall" in c]
    assert any("torch==2.13.0" in c and "-r" in c for c in installs)  # torch held at its pin

    (state / "calls").unlink()
    again = _bootstrap(venv, state, "demo")
    assert again.returncode == 0, again.stderr
    notes = dict(_steps(again.stderr))
    assert notes["torch 2.13.0, CPU wheel"] == notes["budgetmix (editable)"] == "already there"
    again_installs = [c for c in (state / "calls").read_text().splitlines() if "install" in c]
    assert len(again_installs) == 1 and " -r " in again_installs[0]  # only pip's own check


def test_an_unknown_command_is_refused(tmp_path: Path) -> None:
    proc = _bootstrap(tmp_path / "venv", tmp_path, "everything")
    assert proc.returncode == 2 and "demo|test" in proc.stderr
    assert not (tmp_path / "venv").exists()
