"""Engines: the outside training and rollout engines budgetmix plugs into.

accelerate/torch distributed set-up, TRL's GRPO trainer (and its vLLM rollouts)
and verl's agent loop, each fed by the same rollouts, notice and accounting. May
import ``training.config``, ``training.data``, ``training.algorithms``,
``training.rollouts`` and below; never serving, the trainer or experiments.
"""
