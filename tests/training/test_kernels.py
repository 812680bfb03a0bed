"""The pinned kernels are the ones that run, and they give the same bits on any x86 CPU.

MKL reads ``MKL_CBWR`` once and, on a CPU of a vendor a branch is not offered to, runs
``AUTO`` instead without a word: on AMD every branch but ``COMPATIBLE`` falls back. The
``AVX2,STRICT`` pin that came before issue 28's fix was therefore honoured on Intel and
ignored on AMD, and the two trained other bits. Each check runs in a fresh process,
because the first MKL call of a process fixes the branch.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from budgetmix.training.data.reproducibility import PINNED_KERNELS

torch = pytest.importorskip("torch")

#: A 65x513 by 513x33 float32 GEMM of integer-built inputs under the pins, one thread; two
#: threads (as training runs MKL) must give the same bits (they do on an Intel Xeon).
#: Computed on torch 2.13.0 (its MKL 2024.0), AMD EPYC; ``AUTO`` there gives ``ba538a30...``.
REFERENCE_GEMM = "23179ac396beab808a972bd36fb1bd882311a0989bb38f453de33c3e5368ceb4"
REFERENCE_TORCH = "2.13.0"

_SCRIPT = """
import hashlib, os, torch
from budgetmix.training.data.reproducibility import mkl_branch_in_force, pin_kernels
pin_kernels()
def mat(rows, cols, salt):
    vals = [((i * 7919 + salt) % 1999 - 999) / 997.0 for i in range(rows * cols)]
    return torch.tensor(vals, dtype=torch.float32).reshape(rows, cols)
torch.set_num_threads(int(os.environ.get("GEMM_THREADS", "1")))  # training: 2
c = mat(65, 513, 1) @ mat(513, 33, 2)
print(mkl_branch_in_force(), hashlib.sha256(c.numpy().tobytes()).hexdigest())
"""


def _python(script: str, env: dict[str, str]) -> str:
    """``script``'s output in a fresh process, the pins left to the trainer's defaults."""
    clean = {k: v for k, v in os.environ.items() if k not in PINNED_KERNELS}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _fresh(env: dict[str, str]) -> tuple[str, str]:
    branch, digest = _python(_SCRIPT, env).split()
    return branch, digest


def _needs_mkl() -> None:
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"MKL is x86 only; this is {platform.machine()}")
    if "BLAS_INFO=mkl" not in torch.__config__.show():
        pytest.skip("this torch build carries no MKL")


def _needs_reference_torch() -> None:
    """The reference bits are one MKL build's: torch 2.13.0's (MKL 2024.0)."""
    _needs_mkl()
    if torch.__version__.split("+")[0] != REFERENCE_TORCH:
        pytest.skip(f"the reference is torch {REFERENCE_TORCH}'s MKL; this is {torch.__version__}")


def test_mkl_runs_the_branch_the_trainer_pins() -> None:
    _needs_mkl()
    branch, _ = _fresh({})
    assert branch == PINNED_KERNELS["MKL_CBWR"]


def test_a_branch_mkl_replaces_is_reported_as_the_one_that_runs() -> None:
    _needs_mkl()
    assert _fresh({"MKL_CBWR": "AUTO,STRICT"})[0] == "AUTO,STRICT"
    assert _fresh({"MKL_CBWR": "COMPATIBLE"})[0] == "COMPATIBLE"


def test_the_pinned_gemm_gives_the_reference_bits_on_this_cpu() -> None:
    _needs_reference_torch()
    assert _fresh({"GEMM_THREADS": "1"})[1] == REFERENCE_GEMM
    assert _fresh({"GEMM_THREADS": "2"})[1] == REFERENCE_GEMM  # MKL splits it in two


def test_the_kernel_probe_gives_the_reference_gemm_bits_under_the_pins() -> None:
    """The fingerprint's probe runs the same GEMM as the reference above (one of its 37
    kernels), so a probe recorded on one machine is comparable with this test's bits."""
    _needs_reference_torch()
    script = (
        "from budgetmix.training.data.kernel_probe import kernel_probe\n"
        "from budgetmix.training.data.reproducibility import reproducible\n"
        "with reproducible(2):\n    print(kernel_probe()['gemm NN 65x33x513'])\n"
    )
    assert _python(script, {}).strip() == REFERENCE_GEMM[:16]


#: What MKL's ``AUTO`` branch gives for the GEMM above on an AMD EPYC (recorded there).
AMD_AUTO_GEMM = "ba538a305e61b3b1"
_PERSONA_SOURCE = Path(__file__).resolve().parents[2] / "scripts" / "cpu_persona.c"


@pytest.fixture(scope="module")
def persona(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``scripts/cpu_persona.c`` built here: an LD_PRELOAD library under which a process
    sees an AMD EPYC's CPUID (vendor, family, features, caches) on this Intel CPU."""
    _needs_mkl()
    if "GenuineIntel" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("the persona turns an Intel CPU into an AMD one; this CPU is not Intel")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build scripts/cpu_persona.c")
    lib = tmp_path_factory.mktemp("persona") / "libcpu_persona.so"
    cmd = ["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(_PERSONA_SOURCE)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    probe = subprocess.run(
        [sys.executable, "-c", "pass"],
        env={**os.environ, "LD_PRELOAD": str(lib), "CPU_PERSONA": "zen3"},
        capture_output=True,
        timeout=60,
    )
    if probe.returncode == 97:  # the library's own exit: no CPUID faulting here
        pytest.skip(f"this kernel or CPU cannot fault CPUID: {probe.stderr.decode()[-200:]}")
    assert probe.returncode == 0, probe.stderr.decode()[-2000:]
    return lib


def _as(persona: Path, name: str, env: dict[str, str]) -> dict[str, str]:
    return {"LD_PRELOAD": str(persona), "CPU_PERSONA": name, **env}


@pytest.mark.parametrize("name", ["zen3", "zen4"])
def test_the_persona_makes_mkl_run_as_on_an_amd_epyc(persona: Path, name: str) -> None:
    """MKL's unpinned ``AUTO`` gives the AMD EPYC's bits under the persona (Intel's
    without it), and its ``AVX2`` branch falls back to ``AUTO`` as on AMD: the persona
    reaches the code that chooses kernels."""
    _needs_reference_torch()
    assert _fresh(_as(persona, name, {"MKL_CBWR": "AUTO"}))[1][:16] == AMD_AUTO_GEMM
    assert _fresh({"MKL_CBWR": "AUTO"})[1][:16] != AMD_AUTO_GEMM
    assert _fresh(_as(persona, name, {"MKL_CBWR": "AVX2"}))[0] == "AUTO"
    assert _fresh(_as(persona, "intel", {"MKL_CBWR": "AVX2"}))[0] == "AVX2"  # the control


def test_every_pinned_kernel_gives_the_same_bits_as_on_an_amd_epyc(persona: Path) -> None:
    """The fingerprint's kernel probe (all 37 kernels, two threads as training runs them)
    under the pins: the same on this CPU and under the zen3 and zen4 personas."""
    _needs_mkl()
    script = (
        "import json\n"
        "from budgetmix.training.data.kernel_probe import kernel_probe\n"
        "from budgetmix.training.data.reproducibility import reproducible\n"
        "with reproducible(2):\n    print(json.dumps(kernel_probe()))\n"
    )
    native = json.loads(_python(script, {}))
    assert len(native) >= 30
    for name in ("zen3", "zen4"):
        assert json.loads(_python(script, _as(persona, name, {}))) == native, name
