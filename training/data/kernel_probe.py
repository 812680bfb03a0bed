"""A probe of the float kernels training runs: the bits each gives on this machine.

Two machines with the same pins, packages and config can still train other bits (an
Intel and an AMD VM did under ``MKL_CBWR=COMPATIBLE``: docs/training.md,
*Reproducibility*). :func:`kernel_probe` runs each kind of kernel the tiny models'
training runs (MKL's GEMMs in the shapes the attention and the MLP give, batched GEMMs, MKL's
vector math behind ``exp``/``log``/``tanh``/``erf``/``sqrt``, softmax, norms,
activations, reductions, torch's fused attention and Python's ``math``)
on fixed inputs and hashes the result. A run's fingerprint records it beside the
machine, outside its digest, so a run whose bits differ from a reference names the
kernels that differ, not only the machine.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["PROBE_GEMMS", "kernel_probe", "probe_differences"]

#: (BLAS transposes, m, n, k) of GEMMs MKL ran in the demo's training (``MKL_VERBOSE=1``):
#: attention scores and values at head size 8 for several lengths, the MLP, the LM head
PROBE_GEMMS: tuple[tuple[str, int, int, int], ...] = (
    ("TN", 512, 2, 8),
    ("NN", 8, 2, 512),
    ("TN", 512, 32, 8),
    ("NN", 8, 32, 512),
    ("TN", 362, 256, 8),
    ("NN", 8, 256, 362),
    ("TN", 143, 64, 8),
    ("NT", 8, 512, 64),
    ("NN", 8, 64, 512),
    ("TN", 32, 5808, 32),
    ("NN", 65, 33, 513),
)


def _mat(rows: int, cols: int, salt: int) -> torch.Tensor:
    """A fixed float32 matrix whose sums round (so another summation order shows)."""
    import torch

    i = torch.arange(rows * cols, dtype=torch.float64)
    return ((((i * 7919 + salt) % 1999) - 999) / 997.0).to(torch.float32).reshape(rows, cols)


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


def _gemm(op: str, m: int, n: int, k: int, batch: int) -> str:
    import torch

    a = _mat(k, m, 1).t() if op[0] == "T" else _mat(m, k, 1)
    b = _mat(n, k, 2).t() if op[1] == "T" else _mat(k, n, 2)
    c = a @ b if batch == 1 else torch.stack([a] * batch) @ torch.stack([b] * batch)
    return _digest(c)


def _elementwise() -> dict[str, Callable[[], torch.Tensor]]:
    import torch
    import torch.nn.functional as F

    x = _mat(64, 512, 3)
    q, k, v = (_mat(32, 8, s).reshape(1, 4, 8, 8) for s in (4, 5, 6))
    return {
        "softmax": lambda: torch.softmax(x, -1),
        "log_softmax": lambda: torch.log_softmax(x, -1),
        # exp, log, tanh, erf and sqrt run MKL's VML (their bits follow MKL_CBWR), which
        # MKL_VERBOSE does not report
        "exp": lambda: torch.exp(x),
        "log": lambda: torch.log(x.abs() + 0.01),
        "tanh": lambda: torch.tanh(x / 10),
        "erf": lambda: torch.erf(x / 10),
        "sqrt": lambda: torch.sqrt(x.abs()),
        "layer_norm": lambda: F.layer_norm(x, (512,)),
        "rms_norm": lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
        "gelu": lambda: F.gelu(x),
        "silu": lambda: F.silu(x),
        "sum": lambda: x.sum(-1),
        "cross_entropy": lambda: F.cross_entropy(x, torch.arange(64) % 512, reduction="none"),
        "sdpa_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }


def _python_math() -> str:
    values = [((i * 7919) % 1999 - 999) / 97.0 for i in range(2000)]
    out = [f(v) for v in values for f in (math.exp, math.tanh)]
    out += [math.log(abs(v) + 1e-3) for v in values]
    return hashlib.sha256(struct.pack(f"{len(out)}d", *out)).hexdigest()[:16]


def kernel_probe() -> dict[str, str]:
    """The 16-hex-digit SHA-256 of each probed kernel's output under the settings now in
    force (call it inside :func:`~budgetmix.training.data.reproducibility.reproducible`
    to probe what training runs). The same machine, packages and settings give the same
    dict; keys name the kernel (``"gemm TN 512x2x8"``, ``"bmm4 ..."``, ``"softmax"``)."""
    import torch

    out: dict[str, str] = {}
    with torch.no_grad():
        for op, m, n, k in PROBE_GEMMS:
            out[f"gemm {op} {m}x{n}x{k}"] = _gemm(op, m, n, k, 1)
            out[f"bmm4 {op} {m}x{n}x{k}"] = _gemm(op, m, n, k, 4)
        for name, fn in _elementwise().items():
            out[name] = _digest(fn())
    out["python math"] = _python_math()
    return out


def probe_differences(mine: Any, reference: Any) -> str | None:
    """``"kernel_probe: 3 of 34 kernels differ (softmax, ...)"``, or ``None`` when the two
    probes agree or either was not recorded."""
    if not isinstance(mine, dict) or not isinstance(reference, dict):
        return None
    names = sorted({*mine, *reference})
    differ = [n for n in names if mine.get(n) != reference.get(n)]
    if not differ:
        return None
    shown = ", ".join(differ[:6]) + (", ..." if len(differ) > 6 else "")
    return f"kernel_probe: {len(differ)} of {len(names)} kernels differ ({shown})"
