"""The trainer's AdamW takes a correctly rounded square root: bits that depend on the
input alone, not on the CPU's ``rsqrtps`` estimate that MKL's vector-math root starts
from (issue 28: the one vendor-defined instruction in the kernels training runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from budgetmix.training.data.portable_sqrt import (  # noqa: E402
    PortableAdamW,
    PortableSqrt,
    portable_sqrt,
)
from budgetmix.training.data.reproducibility import reproducible  # noqa: E402


def _positive_floats(n: int, seed: int = 0) -> np.ndarray:
    """``n`` float32 values drawn uniformly over the bit patterns of the positive finite
    floats (subnormals, tiny and huge ones included), plus zero and infinity."""
    bits = np.random.default_rng(seed).integers(0, 0x7F800000, size=n, dtype=np.uint32)
    bits[:2] = [0, 0x7F800000]
    return bits.view(np.float32)


def _correct(x: np.ndarray) -> np.ndarray:
    """The correctly rounded float32 root (numpy's float64 root is exact enough)."""
    return np.sqrt(x.astype(np.float64)).astype(np.float32)


def test_the_portable_root_is_the_correctly_rounded_one_where_torchs_is_not() -> None:
    x = _positive_floats(2_000_000)
    with reproducible(2):  # the trainer's pins: MKL's COMPATIBLE branch
        ours = portable_sqrt(torch.from_numpy(x)).numpy()
        torchs = torch.sqrt(torch.from_numpy(x)).numpy()
    assert np.array_equal(ours.view(np.uint32), _correct(x).view(np.uint32))
    if "BLAS_INFO=mkl" in torch.__config__.show():  # MKL's vector math: one unit off often
        off = int((torchs.view(np.uint32) != _correct(x).view(np.uint32)).sum())
        assert off > 0.05 * x.size, off


def test_every_half_precision_root_is_correctly_rounded() -> None:
    halves = np.arange(0, 0x7C01, dtype=np.uint16).view(np.float16)  # +0 .. +inf, all
    ours = portable_sqrt(torch.from_numpy(halves)).numpy()
    assert np.array_equal(ours, np.sqrt(halves.astype(np.float64)).astype(np.float16))
    negative = portable_sqrt(torch.tensor([-1.0, float("nan")], dtype=torch.float32))
    assert torch.isnan(negative).all()


def test_the_mode_replaces_every_form_of_torchs_root_and_nothing_else() -> None:
    x = torch.from_numpy(_positive_floats(10_000, seed=1))
    want = torch.from_numpy(_correct(x.numpy()))
    with PortableSqrt():
        in_place = x.clone()
        in_place.sqrt_()
        listed = [x.clone(), x.clone()]
        torch._foreach_sqrt_(listed)
        got = [torch.sqrt(x), x.sqrt(), in_place, *torch._foreach_sqrt([x]), *listed]
        doubles = torch.sqrt(x.double())  # float64: torch's own root
        others = torch.exp(x[:10].clamp(max=10))
    for found in got:
        assert torch.equal(found, want)
    assert torch.equal(doubles, torch.sqrt(x.double()))
    assert torch.equal(others, torch.exp(x[:10].clamp(max=10)))


def _steps(optimizer_type: type, grads: list[Any], **options: Any) -> tuple[Any, Any]:
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(512, 16))
    optimizer = optimizer_type([param], lr=1e-3, weight_decay=0.01, **options)
    for grad in grads:
        param.grad = grad.clone()
        optimizer.step()
    return param.detach(), optimizer


def _by_hand(grads: list[Any], lr: float = 1e-3, wd: float = 0.01) -> Any:
    """torch's single-tensor AdamW step (torch/optim/adam.py), its root the portable one."""
    torch.manual_seed(0)
    param = torch.randn(512, 16)
    exp_avg, exp_avg_sq = torch.zeros_like(param), torch.zeros_like(param)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    step_t = torch.tensor(0.0)
    for grad in grads:
        step_t += 1
        param.mul_(1 - lr * wd)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = step_t.item()
        step_size = lr / (1 - beta1**step)
        bias_correction2_sqrt = (1 - beta2**step) ** 0.5
        denom = (portable_sqrt(exp_avg_sq) / bias_correction2_sqrt).add_(eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)
    return param


def test_portable_adamw_is_torchs_adamw_but_for_the_root() -> None:
    torch.manual_seed(1)
    grads = [torch.randn(512, 16) * 10.0 ** -(k % 4) for k in range(12)]
    with reproducible(2):
        ours, optimizer = _steps(PortableAdamW, grads)
        torchs, reference = _steps(torch.optim.AdamW, grads)
        by_hand = _by_hand(grads)
    assert torch.equal(ours, by_hand)  # torch's update, bit for bit, with the portable root
    assert torch.allclose(ours, torchs, rtol=1e-4, atol=1e-7)
    mine, theirs = optimizer.state_dict(), reference.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    assert (
        sorted(mine["state"][0])
        == sorted(theirs["state"][0])
        == [
            "exp_avg",
            "exp_avg_sq",
            "step",
        ]
    )
    # a torch AdamW checkpoint resumes in PortableAdamW, and back
    _, resumed = _steps(PortableAdamW, [])
    resumed.load_state_dict(theirs)
    assert torch.equal(resumed.state_dict()["state"][0]["exp_avg"], theirs["state"][0]["exp_avg"])


def test_a_fused_portable_adamw_is_refused() -> None:
    with pytest.raises(ValueError, match="fused"):
        PortableAdamW([torch.nn.Parameter(torch.zeros(2))], fused=True)


def test_the_trainer_steps_with_the_portable_adamw(tmp_path: Path) -> None:
    from budgetmix.training.config import preset
    from budgetmix.training.trainer import Trainer

    small = {"env_kwargs": {"letters": "a", "min_len": 1, "max_len": 3}, "sft_steps": 1}
    trainer = Trainer(preset("echo-tiny", output_dir=str(tmp_path), **small))
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate's wrapper
    assert type(inner) is PortableAdamW
