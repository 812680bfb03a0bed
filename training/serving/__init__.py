"""Serving: a checkpoint behind an OpenAI-compatible server, and rollouts through one.

``budgetmix serve`` (the served chat, batched decoding, per-row caches and prefix
reuse) and the server rollouts that train through a server with token-exact
accounting. May import ``training.config``, ``training.data``, ``training.algorithms``,
``training.rollouts`` and below; never engines, the trainer or experiments.
"""
