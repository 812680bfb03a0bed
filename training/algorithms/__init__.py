"""Algorithms: what an update does with rollouts.

GRPO/RLOO advantages and the clipped policy loss and SFT's loss (``objectives``),
GRPO groups and their budgets, the learning-rate schedule and baselines
(``rl_groups``), the frozen reference model for the KL term, and LoRA applied to a
model. May import ``training.rollouts`` and below (and ``training.config`` for
types only); never data, diagnostics, serving, engines, the trainer or experiments.
"""
