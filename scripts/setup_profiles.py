"""What each of run.sh's commands installs into .venv, read from pyproject.toml.

    python scripts/setup_profiles.py extras demo         # its extras: train,envs,plots
    python scripts/setup_profiles.py requirements demo   # the requirements, one a line
    python scripts/setup_profiles.py constraints demo    # versions held (pip -c)
    python scripts/setup_profiles.py check demo          # .venv (this python) has them,
                                                         # and nothing the profile leaves out

``demo`` is the core plus the extras the demo uses (``train``, ``envs``, ``plots``);
``test`` is every extra and ``dev``. ``scripts/bootstrap.sh`` installs a profile's
requirements with pip, which keeps every one already satisfied, so going from demo
to test only adds. The check is what tests/test_setup_fresh_clone.py runs after
``bash run.sh demo --help`` on a fresh clone: no agent framework (the ``frameworks``
extra) and no observability backend in the demo's virtualenv. Standard library only: it
runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The extras each command installs.
PROFILES: dict[str, tuple[str, ...]] = {
    "demo": ("train", "envs", "plots"),
    "test": ("all", "dev"),
}
#: Held for every profile: versions the demo's set-up would otherwise pick and the suite's
#: would then replace (tests/test_setup_fresh_clone.py finds them): botocore, which the
#: frameworks bring, needs python-dateutil<3, and matplotlib alone would take 4.x.
CONSTRAINTS = ("python-dateutil<3",)
#: Observability backends: only tests/backends uses them, each in a virtualenv of its
#: own (scripts/install_*.sh); the demo's must hold none.
BACKENDS = ("arize-phoenix", "mlflow", "mlflow-skinny")

_ACTIONS = ("extras", "requirements", "constraints", "check")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_SELF = re.compile(r"^budgetmix\[(.+)\]$")


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]  # type: ignore[no-any-return]


def normalized(requirement: str) -> str:
    """The distribution name of a requirement string, normalised (PEP 503)."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _expand(extras: tuple[str, ...], optional: dict[str, list[str]], seen: set[str]) -> list[str]:
    out: list[str] = []
    for extra in extras:
        if extra in seen:
            continue
        if extra not in optional:
            raise KeyError(f"pyproject.toml has no extra {extra!r}")
        seen.add(extra)
        for req in optional[extra]:
            inner = _SELF.match(req)
            if inner:
                out += _expand(tuple(inner.group(1).split(",")), optional, seen)
            else:
                out.append(req)
    return out


def requirements(profile: str) -> list[str]:
    """The core's requirements and those of the profile's extras, without repeats."""
    project = _project()
    optional: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    core: list[str] = project["dependencies"]  # type: ignore[assignment]
    return list(dict.fromkeys([*core, *_expand(PROFILES[profile], optional, set())]))


def left_out(profile: str) -> set[str]:
    """Distributions the profile must not install: the backends, and every agent
    framework (the ``frameworks`` extra) that the profile's own requirements do not name."""
    project = _project()
    optional: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    frameworks = {normalized(r) for r in _expand(("frameworks",), optional, set())}
    wanted = {normalized(r) for r in requirements(profile)}
    return (frameworks | set(BACKENDS)) - wanted


def check(profile: str) -> list[str]:
    """What is wrong with this interpreter's environment for ``profile`` (empty: fine)."""
    installed = {normalized(d.metadata["Name"]) for d in metadata.distributions()}
    missing = sorted({normalized(r) for r in requirements(profile)} - installed)
    extra = sorted(left_out(profile) & installed)
    problems = [f"missing: {name}" for name in missing]
    problems += [f"installed but not needed by {profile}: {name}" for name in extra]
    return problems


def main(argv: list[str]) -> int:
    """The command line: print a profile's requirements, or check this environment."""
    if len(argv) != 2 or argv[0] not in _ACTIONS or argv[1] not in PROFILES:
        print(f"usage: {' | '.join(_ACTIONS)} {' | '.join(PROFILES)}", file=sys.stderr)
        return 2
    action, profile = argv
    if action == "extras":
        print(",".join(PROFILES[profile]))
        return 0
    if action == "constraints":
        print("\n".join(CONSTRAINTS))
        return 0
    if action == "requirements":
        print("\n".join(requirements(profile)))
        return 0
    problems = check(profile)
    for line in problems:
        print(f"setup check ({profile}): {line}", file=sys.stderr)
    if not problems:
        print(f"setup check ({profile}): {len(requirements(profile))} requirements present, "
              f"none of {len(left_out(profile))} left-out distributions installed")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
