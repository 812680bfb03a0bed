"""Diagnostics: how good a policy's choices are, graded against exact or Monte Carlo values.

Decision points and episodes under a real ledger (``episodes``), step-level action
quality and error rates, budget sensitivity, Monte Carlo Q, recovery by injected
mistakes, and the statistics the experiments report (``stats``). May import
``training.algorithms``, ``training.rollouts`` and below; never data, serving,
engines, the trainer or experiments.
"""
