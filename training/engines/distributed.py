"""Check how ``accelerate launch`` started this process, before any ``Accelerator`` exists.

``accelerate launch --num_processes N`` starts N processes only through its
multi-process launcher (torchrun), which it picks with ``--multi_gpu`` or when it
sees several GPUs. On a CPU machine ``--cpu --num_processes 2`` (or a plain
``--num_processes 2``) goes to the simple launcher and runs ONE process, which then
trains alone as if it were the whole world. And under torchrun on a machine
without CUDA, accelerate's state picks no backend unless ``ACCELERATE_USE_CPU`` is
set, so each rank would again train alone. :func:`prepare_launch` fixes the second
case (it sets ``ACCELERATE_USE_CPU``, so the ranks join one gloo group) and refuses
the first with the command that works on both machines::

    accelerate launch --multi_gpu --num_processes 2 -m budgetmix.cli train ...
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from budgetmix.exceptions import ConfigError

__all__ = ["LAUNCH_COMMAND", "launch_world_size", "prepare_launch"]

#: The multi-process launch that works on a CPU and on a GPU machine.
LAUNCH_COMMAND = "accelerate launch --multi_gpu --num_processes N -m budgetmix.cli train ..."

#: Variables a multi-process launcher sets in every rank (torchrun, mpirun flavours).
_WORLD_VARS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launch_world_size(environ: MutableMapping[str, str] | None = None) -> int:
    """The number of processes the launcher says this run has (1 without a launcher).

    Raises:
        ConfigError: a world-size variable that is not a positive integer (named).
    """
    env = os.environ if environ is None else environ
    for name in _WORLD_VARS:
        if name in env:
            value = env[name]
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"{name}={value!r} is not a positive process count")
            return int(value)
    return 1


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def prepare_launch(
    environ: MutableMapping[str, str] | None = None, *, cuda_available: bool | None = None
) -> int:
    """Make the launched ranks one process group, or refuse a launch that cannot be; returns
    the world size.

    Under a multi-process launcher on a machine without CUDA, sets
    ``ACCELERATE_USE_CPU=true`` so accelerate joins the ranks in a gloo group
    (``MULTI_CPU``) instead of leaving each one alone. Call it before the first
    ``Accelerator`` (or ``PartialState``) of the process. ``cuda_available`` defaults
    to ``torch.cuda.is_available()``.

    Raises:
        ConfigError: accelerate's simple launcher was asked for several processes
            (``MASTER_ADDR`` set, no rank variables): it started this one only; the
            message gives :data:`LAUNCH_COMMAND`.
    """
    env = os.environ if environ is None else environ
    world = launch_world_size(env)
    if world == 1 and "ACCELERATE_USE_CPU" in env and "MASTER_ADDR" in env:
        # accelerate's simple launcher sets MASTER_ADDR only when more than one process
        # (or machine) was asked for, and never starts more than this one.
        raise ConfigError(
            "accelerate launch started 1 process although more were asked for: on a "
            "machine without several GPUs, --num_processes (with or without --cpu) "
            f"needs --multi_gpu to start them; run `{LAUNCH_COMMAND}`"
        )
    torchrun = world > 1 and "LOCAL_RANK" in env and "ACCELERATE_USE_CPU" not in env
    if torchrun and not (_cuda_available() if cuda_available is None else cuda_available):
        env["ACCELERATE_USE_CPU"] = "true"
    return world
