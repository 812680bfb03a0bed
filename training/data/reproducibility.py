"""Bit-reproducible CPU training: what a run's numbers depend on, pinned in one place.

The same seed, config and package versions give byte-identical checkpoints on any
x86-64 machine with AVX2, whatever its core count or load, because three things
that change float summation order are fixed here (docs/training.md, Reproducibility):

* **kernels** (:func:`pin_kernels`): ATen's vectorised kernels at the AVX2 level
  (``ATEN_CPU_CAPABILITY=avx2``; an AVX-512 machine otherwise sums softmax and
  reductions in another order), MKL's GEMM in its compatible conditional-numerical-
  reproducibility branch (``MKL_CBWR=COMPATIBLE``: the one branch MKL honours on
  every x86 vendor; on an AMD CPU it silently replaces any other branch, ``AVX2``
  included, by ``AUTO``, so Intel and AMD machines summed in other orders) and
  oneDNN capped at AVX2. They are environment defaults (a value already set wins)
  read when torch runs its first kernel, so they must be set before that;
  :func:`kernel_settings` records what is actually in force, MKL's branch as MKL
  itself reports it (:func:`mkl_branch_in_force`).
* **threads** (:func:`reproducible`): torch's intra-op thread count is the config's
  ``threads`` for the run, not the machine's core count or ``OMP_NUM_THREADS``
  (ATen splits a reduction per thread), and ``torch.use_deterministic_algorithms``
  is on (an op without a deterministic kernel raises).
* **random streams** (:func:`stream_seed`, :func:`keyed_random`,
  :func:`keyed_generator`): each step draws from a stream keyed by
  ``(seed, phase, step, ...)``, not from one stream consumed in call order, so a
  step's draws do not depend on how many numbers earlier steps took.

Nothing here reads a clock: a token budget counts tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "PINNED_KERNELS",
    "cpu_identity",
    "kernel_settings",
    "keyed_generator",
    "keyed_random",
    "mkl_branch_in_force",
    "pin_kernels",
    "reproducible",
    "stream_seed",
    "thread_settings",
]

#: Environment defaults that fix the CPU kernels torch, MKL and oneDNN pick.
PINNED_KERNELS: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}

#: Thread variables recorded (informational: the run's own count is pinned).
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_DYNAMIC", "MKL_DYNAMIC")


def pin_kernels(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set :data:`PINNED_KERNELS` as environment defaults (a value already set is kept);
    returns the values in force. Call it before torch's first kernel of the process."""
    env = os.environ if environ is None else environ
    return {name: env.setdefault(name, value) for name, value in PINNED_KERNELS.items()}


def kernel_settings() -> dict[str, Any]:
    """The kernels in force: ATen's capability as torch reports it (``AVX2`` when the pin
    took effect), the MKL and oneDNN variables, and the branch MKL runs
    (:func:`mkl_branch_in_force`: it can differ from ``MKL_CBWR``)."""
    import torch

    return {
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **{
            name.lower(): os.environ.get(name)
            for name in PINNED_KERNELS
            if name != "ATEN_CPU_CAPABILITY"
        },
        "mkl_cbwr_in_force": mkl_branch_in_force(),
    }


#: MKL's conditional-numerical-reproducibility codes (``mkl_cbwr.h``).
_MKL_BRANCHES = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1",
                 8: "SSE4_2", 9: "AVX", 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}  # fmt: skip
_MKL_STRICT = 0x10000
_MKL_CBWR_ALL = -1


def mkl_branch_in_force() -> str | None:
    """The branch MKL's GEMM runs, as MKL reports it (``"COMPATIBLE"``, ``"AUTO,STRICT"``,
    ...), read from the MKL inside torch's CPU library; ``None`` where torch carries no
    MKL (an ARM build) or the library cannot be opened.

    MKL reads ``MKL_CBWR`` at its first call and falls back to ``AUTO`` for a branch this
    CPU's vendor does not get (every branch but ``COMPATIBLE`` on AMD), without a word.
    """
    import ctypes
    from pathlib import Path

    import torch

    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.argtypes, get.restype = [ctypes.c_int], ctypes.c_int
    code = get(_MKL_CBWR_ALL)
    name = _MKL_BRANCHES.get(code & ~_MKL_STRICT, str(code & ~_MKL_STRICT))
    return f"{name},STRICT" if code & _MKL_STRICT else name


#: The instruction-set flags that can change which code a pinned kernel runs, or its bits.
_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
              "avx512_vnni", "avx512_bf16", "amx_tile")  # fmt: skip


def cpu_identity() -> dict[str, Any]:
    """The CPU a run computed on: architecture, vendor, model name and its ISA flags among
    :data:`_ISA_FLAGS` (Linux's ``/proc/cpuinfo``; ``None`` where it cannot be read).

    Informational: two machines with the same pins gave other bits (docs/training.md,
    *Reproducibility*), so a fingerprint that differs names the machine beside the rest.
    """
    import platform

    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    if info:
                        break  # the first processor's block is enough
                    continue
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    return {
        "arch": platform.machine(),
        "vendor": info.get("vendor_id"),
        "model": info.get("model name"),
        "isa": [f for f in _ISA_FLAGS if f in flags] if flags else None,
    }


def thread_settings() -> dict[str, Any]:
    """torch's intra-op and inter-op thread counts now, and the thread variables as set."""
    import torch

    return {
        "intra_op": torch.get_num_threads(),
        "inter_op": torch.get_num_interop_threads(),
        **{name: os.environ.get(name) for name in _THREAD_VARS},
    }


@contextmanager
def reproducible(threads: int, seed: int | None = None) -> Iterator[None]:
    """Pin the kernels, ``threads`` intra-op threads and deterministic algorithms for the
    block; the thread count and the deterministic flag are restored after it.

    With a ``seed``, torch's global CPU generator is seeded from it for the block (a
    process starts it from the operating system's entropy, and a checkpoint saves it)
    and restored after it.
    """
    import torch

    pin_kernels()
    before = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(stream_seed(seed, "torch"))
            yield
    finally:
        torch.set_num_threads(before)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def stream_seed(*key: Any) -> int:
    """A 63-bit seed derived from ``key`` (ints and strings; JSON-encoded, SHA-256):
    the same key gives the same stream in any process, a different key an unrelated one."""
    text = json.dumps(list(key), separators=(",", ":"), sort_keys=True)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def keyed_random(*key: Any) -> random.Random:
    """A Python RNG for the stream ``key`` (:func:`stream_seed`)."""
    return random.Random(stream_seed(*key))


def keyed_generator(*key: Any, generator: torch.Generator | None = None) -> torch.Generator:
    """A torch CPU generator for the stream ``key``; ``generator`` is reseeded in place
    when given (a sampler that holds it sees the new stream)."""
    import torch

    gen = torch.Generator() if generator is None else generator
    return gen.manual_seed(stream_seed(*key))
