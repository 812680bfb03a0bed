"""LMPolicy keeps per-row KV caches across calls without changing what it samples."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
from budgetmix.training.diagnostics.episodes import pointwise, run_episodes
from budgetmix.training.envs.frozenlake_compact import COMPACT_ENV_NAME
from budgetmix.training.envs.registry import env_tasks
from budgetmix.training.experiment.lm import LMPolicy
from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

KW = {"desc": ["SFF", "HFF", "HHG"], "success_rate": 0.8}


def _points() -> list[Any]:
    tasks = env_tasks(COMPACT_ENV_NAME, range(6), KW)
    moves = "ululru"
    traces = run_episodes(tasks, pointwise(lambda p: moves[p.turn % 6]), 5)
    return [p for tr in traces for p in tr.points]


@pytest.fixture(scope="module")
def model_and_tokenizer() -> tuple[Any, Any]:
    tokenizer = build_char_tokenizer()
    spec = TinyModelSpec(arch="llama", hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2)
    model = build_tiny_model(spec, tokenizer, seed=3)
    model.eval()
    return model, tokenizer


def _counting(model: Any) -> list[int]:
    fed: list[int] = []
    inner = model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        fed.append(int(ids.numel()) if mask is None else int(ids.shape[0] * ids.shape[1]))
        return inner(*args, **kwargs)

    model.forward = forward
    return fed


def test_cached_rows_sample_what_a_fresh_policy_samples(model_and_tokenizer: Any) -> None:
    model, tokenizer = model_and_tokenizer
    points = _points()
    assert len(points) > 12
    kept = LMPolicy(model, tokenizer, temperature=0.0, batch_size=8)
    first = kept(points)
    # the same points again, then another set (other contexts in the same rows)
    assert kept(points) == first
    shuffled = points[5:] + points[:5]
    fresh = LMPolicy(model, tokenizer, temperature=0.0, batch_size=8)
    assert kept(shuffled) == fresh(shuffled)


def test_asking_the_same_points_again_feeds_only_the_sampled_ids(model_and_tokenizer: Any) -> None:
    model, tokenizer = model_and_tokenizer
    points = _points()[:8]
    policy = LMPolicy(model, tokenizer, temperature=1.0, batch_size=8, seed=1)
    fed = _counting(model)
    try:
        policy(points)
        first = sum(fed)
        fed.clear()
        policy(points)
        again = sum(fed)
    finally:
        del model.forward
    assert first > 8 * 50  # every context read once: instructions, map, notices
    assert again <= 8 * 3 * 4  # per row: at most a few re-fed sampled ids per step


def test_next_token_probabilities_are_the_models_softmax(model_and_tokenizer: Any) -> None:
    import torch
    from budgetmix.exceptions import ConfigError
    from budgetmix.training.diagnostics.budget_sensitivity import start_points
    from budgetmix.training.experiment.lm import next_token_probabilities

    model, tokenizer = model_and_tokenizer
    policy = LMPolicy(model, tokenizer)
    points = start_points(env_tasks(COMPACT_ENV_NAME, [0], KW), [3, 9, 10])
    probs = next_token_probabilities(policy, model, points, ["l", "d", "r", "u"])
    assert len(probs) == 3 and all(0 < sum(p.values()) <= 1 for p in probs)
    # against a hand-made forward pass of the same context
    ctx = policy.codec.encode(policy.codec.render(list(points[0].messages), generation_prompt=True))
    with torch.no_grad():
        ref = torch.softmax(model(torch.tensor([ctx])).logits[0, -1], -1)
    r_id = tokenizer.encode("r", add_special_tokens=False)[0]
    assert probs[0]["r"] == pytest.approx(float(ref[r_id]), rel=1e-6)
    # the notices differ, so a random model gives different distributions
    assert probs[0] != probs[2]
    with pytest.raises(ConfigError, match="tokens"):
        next_token_probabilities(policy, model, points, ["right"])
