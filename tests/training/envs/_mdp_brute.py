"""Brute force for the MDP core's tests: every deterministic policy, evaluated forward."""

from __future__ import annotations

import itertools

import numpy as np
from budgetmix.training.envs.mdp import TabularMDP


def success_within(mdp: TabularMDP, act: object, horizon: int) -> list[float]:
    """Forward propagation of the state distribution, independent of the core's solvers:
    ``act(t, s)`` is the action after ``t`` turns used; success[T] for T = 0..horizon."""
    dist = {mdp.start: 1.0}
    won = float(mdp.success[mdp.start])
    out = [won]
    for t in range(horizon):
        nxt: dict[int, float] = {}
        for s, mass in dist.items():
            if mdp.terminal[s]:
                continue
            a = act(t, s)  # type: ignore[operator]
            for s2 in range(mdp.n_states):
                pr = mdp.transitions[s, a, s2] * mass
                if pr == 0:
                    continue
                if mdp.success[s2]:
                    won += pr
                elif not mdp.terminal[s2]:
                    nxt[s2] = nxt.get(s2, 0.0) + pr
        dist = nxt
        out.append(won)
    return out


def all_tables(mdp: TabularMDP, horizon: int) -> list[np.ndarray]:
    live = [s for s in range(mdp.n_states) if not mdp.terminal[s]]
    tables = []
    for choice in itertools.product(range(mdp.n_actions), repeat=horizon * len(live)):
        table = np.zeros((horizon, mdp.n_states), dtype=np.intp)
        for i, a in enumerate(choice):
            table[i // len(live), live[i % len(live)]] = a
        tables.append(table)
    return tables
