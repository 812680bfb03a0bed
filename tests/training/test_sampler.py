"""KV cache across turns: the cached path samples exactly what re-reading the context samples.

Each test runs the same multi-turn batch twice, once with every episode keyed
(cache kept, only new ids fed) and once unkeyed (every context re-read from
scratch), and compares ids (exactly) and log-probs (1e-4). The batch has
uneven prompts, uneven environment replies, responses that stop at different
tokens, episodes that end at different turns, and an ephemeral notice that is
dropped from the history every turn (the context is then not an extension of
the cache, which must be rewound).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from budgetmix.exceptions import ConfigError
from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
from budgetmix.training.rollouts import sampler as sampler_module
from budgetmix.training.rollouts.generation import Generation, ModelGenerator

EPISODES = 7
MAX_NEW = 6


def _ids(rng: random.Random, low: int, high: int) -> list[int]:
    return [rng.randrange(4, 90) for _ in range(rng.randint(low, high))]


def _episode_script(seed: int) -> dict[str, Any]:
    """Prompts, per-turn replies and notices, and last turns, all independent of sampling."""
    rng = random.Random(seed)
    return {
        "prompts": [_ids(rng, 2, 17) for _ in range(EPISODES)],
        "replies": [[_ids(rng, 1, 9) for _ in range(8)] for _ in range(EPISODES)],
        "notices": [[_ids(rng, 1, 4) for _ in range(8)] for _ in range(EPISODES)],
        "last_turn": [rng.randint(1, 5) for _ in range(EPISODES)],
    }


def _roll(gen: ModelGenerator, keyed: bool, script: dict[str, Any]) -> list[Generation]:
    """Play the script; episodes 0, 3, 6 carry an ephemeral notice (shown once, then dropped).
    Returns every generation, in order."""
    history = [list(p) for p in script["prompts"]]
    notice: list[list[int]] = [[] for _ in range(EPISODES)]
    out: list[Generation] = []
    for turn in range(6):
        alive = [e for e in range(EPISODES) if turn <= script["last_turn"][e]]
        if not alive:
            break
        contexts = [history[e] + notice[e] for e in alive]
        keys = [e if keyed else None for e in alive]
        gens = gen.generate_ids(contexts, MAX_NEW, keys)
        out.extend(gens)
        for e, g in zip(alive, gens, strict=True):
            history[e] += [*notice[e], *g.ids] if e % 3 else list(g.ids)
            history[e] += script["replies"][e][turn]
            notice[e] = script["notices"][e][turn] if e % 3 == 0 else []
    return out


def _generator(model: Any, temperature: float) -> ModelGenerator:
    return ModelGenerator(
        model,
        pad_token_id=0,
        # several stop ids, so that responses end at different lengths
        stop_token_ids=(1, 7, 11, 23, 42, 57),
        temperature=temperature,
        batch_size=16,
        generator=torch.Generator().manual_seed(11),
    )


@pytest.fixture(params=["qwen2", "llama"])
def model(request: pytest.FixtureRequest, tokenizer: Any) -> Any:
    return build_tiny_model(TinyModelSpec(arch=request.param), tokenizer, seed=0)


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "seeded"])
@pytest.mark.parametrize("compact", [False, True], ids=["grow", "compact"])
def test_cached_turns_equal_rereading(
    model: Any, temperature: float, compact: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compact:  # gather live columns as soon as any are masked
        monkeypatch.setattr(sampler_module, "_COMPACT_SLACK", 0)
    script = _episode_script(5)
    reread_gen, cached_gen = _generator(model, temperature), _generator(model, temperature)
    reread = _roll(reread_gen, False, script)
    cached = _roll(cached_gen, True, script)
    assert [g.ids for g in cached] == [g.ids for g in reread]
    assert [g.stopped for g in cached] == [g.stopped for g in reread]
    assert {g.stopped for g in cached} == {True, False}, "some stopped early, some were cut"
    for a, b in zip(cached, reread, strict=True):
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
        )
    # the cached path fed each id about once; re-reading fed every context again
    assert cached_gen.sampler.ids_fed < reread_gen.sampler.ids_fed / 2
    assert cached_gen.sampler.cached_episodes > 0
    assert reread_gen.sampler.cached_episodes == 0


def test_cache_feeds_only_new_ids_and_drops_absent_episodes(tokenizer: Any) -> None:
    model = build_tiny_model(TinyModelSpec(), tokenizer, seed=0)
    gen = _generator(model, 0.0)
    first = gen.generate_ids([[5, 6, 7], [8, 9]], 4, [0, 1])
    assert gen.sampler.ids_fed == 5 + sum(len(g.ids) - 1 for g in first)
    before = gen.sampler.ids_fed
    ctx = [5, 6, 7, *first[0].ids, 30, 31]
    gen.generate_ids([ctx], 1, [0])  # episode 1 is absent: its cache is dropped
    assert gen.sampler.ids_fed - before == 1 + 2  # the last sampled id and the reply
    assert gen.sampler.cached_episodes == 1
    gen.reset()
    assert gen.sampler.cached_episodes == 0


def test_any_stop_id_ends_a_response(tokenizer: Any) -> None:
    model = build_tiny_model(TinyModelSpec(), tokenizer, seed=0)
    free = ModelGenerator(model, pad_token_id=0, eos_token_id=2, temperature=0.0)
    (greedy,) = free.generate_ids([[5, 6, 7]], 5)
    stop_at = greedy.ids[2]
    bounded = ModelGenerator(
        model, pad_token_id=0, eos_token_id=2, stop_token_ids=[stop_at], temperature=0.0
    )
    (stopped,) = bounded.generate_ids([[5, 6, 7]], 5)
    first = greedy.ids.index(stop_at)
    assert stopped.ids == greedy.ids[: first + 1]
    assert stopped.stopped
    assert bounded.stop_ids == (2, stop_at) and bounded.eos == 2


def test_bad_calls_are_config_errors(tokenizer: Any) -> None:
    model = build_tiny_model(TinyModelSpec(), tokenizer, seed=0)
    gen = _generator(model, 0.0)
    with pytest.raises(ConfigError, match=r"episode key.*twice"):
        gen.generate_ids([[5], [6]], 2, [3, 3])
    with pytest.raises(ConfigError, match="context 1 is empty"):
        gen.generate_ids([[5], []], 2)
    with pytest.raises(ConfigError, match="stop_token_ids or eos_token_id"):
        ModelGenerator(model, pad_token_id=0)


def test_rollouts_use_the_cache_and_sample_what_rereading_samples(
    tokenizer: Any, tiny_model: Any
) -> None:
    from budgetmix.policies.samplers import BudgetMix
    from budgetmix.training.envs import env_tasks
    from budgetmix.training.rollouts.chat import ChatCodec
    from budgetmix.training.rollouts.generation import GenerationRequest
    from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts

    class Rereading:
        """The same generator with the episode keys taken away."""

        def __init__(self, gen: ModelGenerator) -> None:
            self.gen = gen

        def generate(self, requests: list[GenerationRequest], n: int) -> list[Generation]:
            return self.gen.generate_ids([r.context_ids for r in requests], n)

    rng = random.Random(3)
    specs = [
        EpisodeSpec(task=t, budget=BudgetMix(ceiling=5).sample(rng), group=i)
        for i, t in enumerate(env_tasks("echo", range(8), {"max_len": 3}))
    ]
    codec = ChatCodec(tokenizer)
    settings = RolloutSettings(max_new_tokens=5, notice_format="v1")

    def generator() -> ModelGenerator:
        return ModelGenerator(
            tiny_model,
            eos_token_id=tokenizer.eos_token_id,
            stop_token_ids=range(10, 40),  # an untrained model: stop often, play many turns
            pad_token_id=tokenizer.pad_token_id,
            generator=torch.Generator().manual_seed(0),
        )

    cached_gen, reread_gen = generator(), generator()
    cached = run_rollouts(specs, cached_gen, codec, settings)
    reread = run_rollouts(specs, Rereading(reread_gen), codec, settings)
    assert max(r.num_turns for r in cached) > 1
    assert [r.response_ids for r in cached] == [r.response_ids for r in reread]
    for a, b in zip(cached, reread, strict=True):
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
        )
    assert cached_gen.sampler.ids_fed < reread_gen.sampler.ids_fed


@pytest.mark.slow
def test_the_rollout_bench_runs_in_quick_mode(tmp_path: Any) -> None:
    """bench/rollout_kv.py --quick writes its table (nothing about speed is asserted)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "table.md"
    subprocess.run(
        [sys.executable, str(root / "bench" / "rollout_kv.py"), "--quick", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    table = out.read_text()
    assert "| 2 |" in table and "| 4 |" in table
    assert "cost exponent 2..4 turns: cached" in table
    assert "re-read / cached =" in table


def test_a_failed_call_drops_the_caches(tokenizer: Any) -> None:
    model = build_tiny_model(TinyModelSpec(), tokenizer, seed=0).train()
    gen = _generator(model, 0.0)
    gen.generate_ids([[5, 6, 7]], 3, [0])
    assert gen.sampler.cached_episodes == 1
    with pytest.raises(IndexError):  # an id outside the vocabulary fails inside the model
        gen.generate_ids([[5, 6, 7, 10_000]], 3, [0])
    assert gen.sampler.cached_episodes == 0
    assert model.training  # the caller's mode is restored


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_unpadded_batches_cached_equal_rereading(arch: str, tokenizer: Any) -> None:
    """Every row fed the same number of ids (no stop id in reach): no padding mask at all, the
    grouped-query layers attend without one."""
    model = build_tiny_model(TinyModelSpec(arch=arch), tokenizer, seed=0)
    rng = random.Random(4)
    outs = []
    for keyed in (True, False):
        gen = ModelGenerator(
            model,
            pad_token_id=0,
            stop_token_ids=[10_000],
            temperature=1.0,
            batch_size=4,
            generator=torch.Generator().manual_seed(2),
        )
        rng = random.Random(4)
        contexts = [_ids(rng, 6, 6) for _ in range(4)]
        out = []
        for _ in range(4):
            gens = gen.generate_ids(contexts, 5, list(range(4)) if keyed else None)
            for context, g in zip(contexts, gens, strict=True):
                context += [*g.ids, *_ids(rng, 3, 3)]
            out += gens
        outs.append(out)
    cached, reread = outs
    assert [g.ids for g in cached] == [g.ids for g in reread]
    assert all(len(g.ids) == 5 and not g.stopped for g in cached)
    for a, b in zip(cached, reread, strict=True):
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
        )


def test_only_the_last_position_gets_logits(tokenizer: Any) -> None:
    """A feed of several ids asks the model for the logits after the last one only."""
    model = build_tiny_model(TinyModelSpec(), tokenizer, seed=0)
    widths: list[int] = []
    model.get_output_embeddings().register_forward_hook(
        lambda _module, _inputs, logits: widths.append(int(logits.shape[1]))
    )
    gen = _generator(model, 0.0)
    first = gen.generate_ids([[5, 6, 7, 8, 9], [10, 11]], 3, [0, 1])
    gen.generate_ids(
        [[5, 6, 7, 8, 9, *first[0].ids, 12], [10, 11, *first[1].ids, 13, 14]], 2, [0, 1]
    )
    assert widths and set(widths) == {1}
