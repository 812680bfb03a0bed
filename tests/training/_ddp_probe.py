"""``python _ddp_probe.py REPORT_DIR train ...``: the ``budgetmix`` CLI, recording this rank.

Run by tests/training/test_distributed.py under ``accelerate launch`` as a script in
place of ``-m budgetmix.cli``: it calls the same ``budgetmix.cli.main`` with the same
arguments, and wraps (without changing) ``Trainer.rl_step`` and the trainer's
``group_advantages`` to write ``REPORT_DIR/rank<r>.json`` at the end: this process's
pid, rank and world size as accelerate and torch.distributed see them, the backend,
and for every RL step the advantages it computed and a digest of its parameters
before and after the step.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from budgetmix.cli import main
from budgetmix.training import trainer as trainer_module


def param_digest(model: Any) -> str:
    """sha256 over every parameter's name and bytes, in name order."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda item: item[0]):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def probe(report_dir: Path, argv: list[str]) -> int:
    """Run the CLI with the recording wrappers; write this rank's report."""
    steps: list[dict[str, Any]] = []
    seen: list[float] = []
    ranks: dict[str, Any] = {}
    real_advantages = vars(trainer_module)["group_advantages"]
    real_rl_step = trainer_module.Trainer.rl_step

    def advantages(*args: Any, **kwargs: Any) -> list[float]:
        out: list[float] = real_advantages(*args, **kwargs)
        seen.extend(float(a) for a in out)
        return out

    def rl_step(self: Any) -> dict[str, Any]:
        before = param_digest(self.policy)
        seen.clear()
        record = real_rl_step(self)
        steps.append(
            {
                "step": self.step,
                "advantages": list(seen),
                "before": before,
                "after": param_digest(self.policy),
            }
        )
        ranks.update(
            rank=self.acc.process_index,
            world=self.acc.num_processes,
            distributed_type=self.acc.distributed_type.value,
            torch_rank=torch.distributed.get_rank(),
            torch_world=torch.distributed.get_world_size(),
            backend=torch.distributed.get_backend(),
        )
        return record

    vars(trainer_module)["group_advantages"] = advantages  # the name rl_step looks up
    trainer_module.Trainer.rl_step = rl_step  # type: ignore[method-assign]
    status = main(argv)
    report = {"pid": os.getpid(), "status": status, **ranks, "rl_steps": steps}
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / f"rank{ranks.get('rank', 'none')}.json").write_text(json.dumps(report))
    return status


if __name__ == "__main__":
    sys.exit(probe(Path(sys.argv[1]), sys.argv[2:]))
