"""The loopback server's prefix cache: the ids of reading every prompt whole, bounded memory."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from _layout_fixtures import build_bpe_tokenizer, save_tiny_checkpoint
from budgetmix.training.data.models import load_pretrained
from budgetmix.training.rollouts.sampler import KVCacheSampler, SamplingRule
from budgetmix.training.serving.openai_server import LocalOpenAIServer
from budgetmix.training.serving.prefix_cache import PrefixCache


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prefix") / "base"
    save_tiny_checkpoint("qwen", build_bpe_tokenizer("qwen"), path)
    return path


def _rule(temperature: float, seed: int) -> SamplingRule:
    return SamplingRule(
        stop_ids=frozenset({0}),
        pad_id=0,
        temperature=temperature,
        generator=torch.Generator().manual_seed(seed),
    )


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "seeded"])
def test_cached_batches_sample_what_whole_prompts_sample(
    tiny_model: Any, temperature: float
) -> None:
    rnd = random.Random(0)
    head = [rnd.randrange(3, 60) for _ in range(40)]  # a system prompt two conversations share
    a, b = head + [5, 6, 7] * 7, head + [9, 9] * 10
    c = [rnd.randrange(3, 60) for _ in range(37)]
    cache = PrefixCache(tiny_model)
    uncached_fed = 0

    def call(prompts: list[list[int]], seed: int) -> list[list[int]]:
        nonlocal uncached_fed
        got = cache.sample(prompts, 6, _rule(temperature, seed))
        sampler = KVCacheSampler(tiny_model, _rule(temperature, seed), batch_size=len(prompts))
        want = sampler.sample(prompts, [None] * len(prompts), 6)
        uncached_fed += sampler.ids_fed
        assert [g.ids for g in got] == [w.ids for w in want]
        for g, w in zip(got, want, strict=True):
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5)
        return [[*p, *g.ids, 11, 12] for p, g in zip(prompts, got, strict=True)]

    a, b, c = call([a, b, c], 1)  # three fresh rows
    d = [*head, 4, 4, 4]  # shares only the head: copied from a or b, which stay cached
    b, d, a = call([b, d, a], 2)  # the same conversations in another order, plus a copy
    a, _e = call([a, [7] * 20], 3)  # one row out of a group, and a fresh one
    call([[*c[:-6], 8], b, d], 4)  # c rewound by a few ids
    assert cache.hits > 0 and cache.ids_fed < uncached_fed
    assert cache.entries == 5 and cache.copied == 1  # a, b, c, d (copied from a or b), e


def test_the_cache_evicts_the_least_recently_used(tiny_model: Any) -> None:
    cache = PrefixCache(tiny_model, max_entries=2, max_columns=10_000)
    first = [[3 + i] * 20 for i in range(3)]
    cache.sample(first[:1], 2, _rule(0.0, 0))
    cache.sample(first[1:], 2, _rule(0.0, 0))
    assert cache.entries == 2
    hits = cache.hits
    cache.sample(first[:1], 2, _rule(0.0, 0))  # evicted: read whole again
    assert cache.hits == hits and cache.entries == 2
    small = PrefixCache(tiny_model, max_entries=100, max_columns=50)
    small.sample(first, 2, _rule(0.0, 0))
    assert small.columns <= 50 and small.entries < 3


def test_a_changed_model_drops_the_cache(tiny_model: Any) -> None:
    cache = PrefixCache(tiny_model)
    prompt = [5] * 40
    cache.sample([prompt], 3, _rule(0.0, 0))
    with torch.no_grad():
        next(tiny_model.parameters()).add_(0.5)  # an optimiser step, in place
    got = cache.sample([prompt], 3, _rule(0.0, 0))
    want = KVCacheSampler(tiny_model, _rule(0.0, 0)).sample([prompt], [None], 3)
    assert got[0].logprobs == pytest.approx(want[0].logprobs, abs=1e-5)


def _conversation(server: LocalOpenAIServer, turns: int, **fields: Any) -> list[Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You pick numbers."}]
    out = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Pick a number above {turn}."})
        body = {"messages": messages, "max_tokens": 8, "logprobs": True, "return_token_ids": True}
        reply = server.chat_completion({**body, **fields})
        choice = reply["choices"][0]
        out.append((choice["token_ids"], [c["logprob"] for c in choice["logprobs"]["content"]]))
        messages.append({"role": "assistant", "content": choice["message"]["content"] or "0"})
    return out


@pytest.mark.parametrize(
    "fields", [{"temperature": 0}, {"temperature": 1.0, "seed": 7}], ids=["greedy", "seeded"]
)
def test_the_server_returns_the_same_ids_with_and_without_its_cache(
    checkpoint: Path, fields: dict[str, Any]
) -> None:
    model, tokenizer = load_pretrained(checkpoint)
    runs = []
    for cached in (True, False):
        with LocalOpenAIServer(model, tokenizer, prefix_cache=cached) as server:
            runs.append(_conversation(server, 4, **fields))
            if cached:
                assert server.cache is not None and server.cache.hits > 0
    for (ids, lps), (want_ids, want_lps) in zip(*runs, strict=True):
        assert ids == want_ids
        assert lps == pytest.approx(want_lps, abs=1e-5)


@pytest.mark.slow
def test_the_servers_memory_stays_flat_over_1000_requests(checkpoint: Path) -> None:
    model, tokenizer = load_pretrained(checkpoint)
    sizes = []
    with LocalOpenAIServer(
        model, tokenizer, batch_window_s=0.0, max_cached_conversations=8, log_size=32
    ) as server:
        assert server.cache is not None
        for request in range(1000):
            conversation, turn = divmod(request, 4)  # 250 conversations of 4 turns
            messages = [{"role": "system", "content": f"Conversation {conversation}."}]
            for t in range(turn + 1):
                messages.append({"role": "user", "content": f"Turn {t}."})
                if t < turn:
                    messages.append({"role": "assistant", "content": "ok"})
            server.chat_completion({"messages": messages, "max_tokens": 1, "temperature": 0})
            if request in (499, 999):
                sizes.append(
                    (len(server.log), server.cache.entries, len(server.cache._index))
                )
        assert server.cache.hits > 0
    assert sizes[0] == sizes[1]  # flat between request 500 and request 1000
    log, entries, blocks = sizes[1]
    assert log == 32 and entries <= 8 and blocks <= 8 * 64
