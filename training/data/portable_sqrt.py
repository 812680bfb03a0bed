"""A square root whose bits are the same on every x86 CPU, and AdamW built on it.

torch's ``sqrt`` runs MKL's vector math on an MKL build, and under the trainer's pin
(``MKL_CBWR=COMPATIBLE``) that is ``mkl_vml_kernel_sSqrt_EXHAynn``. It starts from the
CPU's ``rsqrtps`` estimate, an instruction whose bits Intel and AMD define differently,
and it is not correctly rounded: 3,359,732 of 20,000,000 random positive floats come out
one unit off the correctly rounded root on an Intel Xeon. Its result is therefore a
function of the CPU's estimate, not of the input alone. Of the seven vector-math kernels
training runs (``exp``, ``ln``, ``tanh``, ``erf``, ``sin``, ``cos``, ``sqrt``, read with
breakpoints on every MKL kernel over ``budgetmix experiment --preset quick``), it is the
only one with an estimate instruction in it, and no other library training loads holds
one (``objdump -d``: libm, numpy, libgomp, libc10: none). AdamW takes this root of its
second moment at every step (docs/training.md, *Reproducibility*).

:func:`portable_sqrt` computes the root in float64 and rounds it once: the correctly
rounded root of a float32, bfloat16 or float16 value, which depends on the input alone
(a double root within a unit of its last place cannot round to another float: a float's
root lies at least 2**-50 of itself away from the midpoint between two floats).
:class:`PortableAdamW` is torch's ``AdamW``, every option and its state dict unchanged,
with that root in place of torch's inside ``step``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["PortableAdamW", "PortableSqrt", "portable_sqrt"]

#: The dtypes whose root :func:`portable_sqrt` rounds once from float64.
_ROUNDED_ONCE = (torch.float32, torch.bfloat16, torch.float16)


def portable_sqrt(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded square root of ``x`` (float32, bfloat16 or float16): the same
    bits on any CPU. Other dtypes get torch's ``sqrt``."""
    if x.dtype not in _ROUNDED_ONCE:
        return torch.sqrt(x)
    return x.to(torch.float64).sqrt_().to(x.dtype)


class PortableSqrt(TorchFunctionMode):
    """Inside it, torch's ``sqrt`` (function, method, in place, ``_foreach``) of a
    float32, bfloat16 or float16 tensor is :func:`portable_sqrt`; every other call runs
    as it would. A call with ``out=`` runs as it would too."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if not kwargs and args:
            first = args[0]
            if func in (torch.sqrt, torch.Tensor.sqrt) and _portable(first):
                return portable_sqrt(first)
            if func is torch.Tensor.sqrt_ and _portable(first):
                return first.copy_(portable_sqrt(first))
            if func is torch._foreach_sqrt and all(_portable(t) for t in first):
                return [portable_sqrt(t) for t in first]
            if func is torch._foreach_sqrt_ and all(_portable(t) for t in first):
                for t in first:
                    t.copy_(portable_sqrt(t))
                return None
        return func(*args, **kwargs)


def _portable(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in _ROUNDED_ONCE


class PortableAdamW(torch.optim.AdamW):
    """torch's ``AdamW`` whose step takes :func:`portable_sqrt` of the second moment, so
    a step gives the same bits on any x86 CPU (torch's root follows the CPU's
    ``rsqrtps``). The same arguments, options, state dict and LR-scheduler behaviour as
    ``AdamW``, except ``fused=True``, whose root is inside one C++ kernel.

    Raises:
        ValueError: ``fused=True``, or what ``AdamW`` refuses.
    """

    def __init__(self, params: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("fused"):
            raise ValueError(
                "PortableAdamW cannot be fused: the fused kernel takes its own square root"
            )
        super().__init__(params, *args, **kwargs)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One AdamW step, the root of the second moment correctly rounded."""
        with PortableSqrt():
            loss: float | None = super().step(closure)
        return loss
