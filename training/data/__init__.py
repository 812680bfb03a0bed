"""Data: what training reads and writes to disk.

Checkpoints (safetensors, verified manifests), recorded episodes for SFT, a run's
fingerprint and its thread and kernel settings, building and loading models, and the
metrics log. May import ``training.algorithms`` (LoRA), ``training.rollouts`` and
below, and ``training.config`` for types only; never diagnostics, serving, engines,
the trainer or experiments.
"""
