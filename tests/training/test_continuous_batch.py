"""Continuous batching: a request joins the running batch and samples what it samples alone."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from _layout_fixtures import build_bpe_tokenizer, save_tiny_checkpoint
from budgetmix.training.data.models import load_pretrained
from budgetmix.training.rollouts.sampler import Generation, KVCacheSampler, SamplingRule
from budgetmix.training.serving.continuous import ContinuousBatch, Request
from budgetmix.training.serving.openai_server import LocalOpenAIServer
from budgetmix.training.serving.prefix_cache import PrefixCache

NEVER = frozenset({10**6})  # a stop id no model samples: replies run to max_tokens


def _alone(model: Any, prompt: list[int], n: int, temperature: float, seed: int) -> Generation:
    rule = SamplingRule(
        stop_ids=NEVER,
        pad_id=0,
        temperature=temperature,
        generator=torch.Generator().manual_seed(seed),
    )
    return KVCacheSampler(model, rule).sample([prompt], [None], n)[0]


def _request(
    prompt: list[int], n: int, temperature: float, seed: int | None, out: list[Any]
) -> Request:
    own = None if seed is None else torch.Generator().manual_seed(seed)
    return Request(prompt, n, temperature, own, out.append)


def _run(batch: ContinuousBatch, arrivals: dict[int, list[Request]]) -> None:
    """Step until every request ended, ``arrivals[k]`` joining before step ``k``."""
    step = 0
    with torch.no_grad():
        while batch.running or any(k >= step for k in arrivals):
            batch.step(arrivals.get(step, []))
            step += 1


@pytest.mark.parametrize("cached", [False, True], ids=["uncached", "prefix cache"])
def test_a_request_joins_the_running_batch_and_samples_what_it_samples_alone(
    tiny_model: Any, cached: bool
) -> None:
    tiny_model.eval()
    rnd = random.Random(0)
    a, b, c = ([rnd.randrange(3, 60) for _ in range(n)] for n in (30, 17, 9))
    got: dict[str, list[Any]] = {"a": [], "b": [], "c": []}
    batch = ContinuousBatch(
        tiny_model,
        cache=PrefixCache(tiny_model) if cached else None,
        stop_ids=NEVER,
        shared=torch.Generator().manual_seed(0),
        max_rows=8,
    )
    arrivals = {
        0: [_request(a, 12, 0.0, None, got["a"])],  # greedy
        3: [_request(b, 5, 1.0, 7, got["b"])],  # seeded: its own generator
        4: [_request(c, 6, 0.0, None, got["c"])],
    }
    _run(batch, arrivals)
    # b and c ran beside a: no forward pass of their own (a's 12 draws are all there were)
    assert batch.forward_passes == 12 and batch.finished == 3 and not batch.running
    for name, prompt, n, temperature, seed in (
        ("a", a, 12, 0.0, 0),
        ("b", b, 5, 1.0, 7),
        ("c", c, 6, 0.0, 0),
    ):
        (gen,) = got[name]
        want = _alone(tiny_model, prompt, n, temperature, seed)
        assert gen.ids == want.ids and not gen.stopped
        assert gen.logprobs == pytest.approx(want.logprobs, abs=1e-5)


def test_a_finished_row_serves_its_conversations_next_request(tiny_model: Any) -> None:
    tiny_model.eval()
    cache = PrefixCache(tiny_model)
    batch = ContinuousBatch(
        tiny_model, cache=cache, stop_ids=NEVER, shared=torch.Generator(), max_rows=4
    )
    first: list[Any] = []
    prompt = [5, 9, 13, 17] * 10
    _run(batch, {0: [_request(prompt, 4, 0.0, None, first)]})
    assert cache.entries == 1
    follow = [*prompt, *first[0].ids, 21, 22]
    second: list[Any] = []
    other: list[Any] = []
    fresh = [7] * 25
    _run(
        batch,
        {0: [_request(follow, 3, 0.0, None, second)], 1: [_request(fresh, 3, 0.0, None, other)]},
    )
    assert cache.hits >= len(prompt) + 3  # the conversation's row was taken, not re-read
    for got, want_prompt in ((second, follow), (other, fresh)):
        want = _alone(tiny_model, want_prompt, 3, 0.0, 0)
        assert got[0].ids == want.ids
        assert got[0].logprobs == pytest.approx(want.logprobs, abs=1e-5)
    assert cache.entries == 2


def test_a_failing_forward_pass_fails_its_requests_and_the_next_ones_are_served(
    tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_model.eval()
    cache = PrefixCache(tiny_model)
    batch = ContinuousBatch(
        tiny_model, cache=cache, stop_ids=NEVER, shared=torch.Generator(), max_rows=4
    )
    out: list[Any] = []
    _run(batch, {0: [_request([4] * 20, 2, 0.0, None, out)]})
    assert cache.entries == 1
    forward = type(tiny_model).forward
    calls = {"n": 0}

    def flaky(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("device lost")
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(tiny_model), "forward", flaky)
    failed: list[Any] = []
    _run(
        batch,
        {
            0: [_request([6] * 20, 5, 0.0, None, failed)],
            1: [_request([8] * 9, 5, 0.0, None, failed)],
        },
    )
    assert [type(x) for x in failed] == [RuntimeError, RuntimeError]  # both, once each
    assert not batch.running and cache.entries == 0  # rows fed halfway are not kept
    after: list[Any] = []
    _run(batch, {0: [_request([6] * 20, 3, 0.0, None, after)]})
    assert after[0].ids == _alone(tiny_model, [6] * 20, 3, 0.0, 0).ids


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("continuous") / "base"
    save_tiny_checkpoint("qwen", build_bpe_tokenizer("qwen"), path)
    return path


@pytest.mark.parametrize("cached", [True, False], ids=["prefix cache", "uncached"])
def test_concurrent_conversations_through_the_server_are_all_answered(
    checkpoint: Path, cached: bool
) -> None:
    """24 conversations of 5 turns at once (each request's own length, temperature and
    seed), more than ``max_batch``: requests join and leave the running batch, take and
    return their conversations' rows, and every one is answered and logged."""
    model, tokenizer = load_pretrained(checkpoint)
    errors: list[str] = []

    def conversation(server: LocalOpenAIServer, number: int) -> None:
        rnd = random.Random(number)
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You pick numbers."}]
        for _ in range(5):
            words = " ".join(str(rnd.randrange(100)) for _ in range(rnd.randrange(1, 12)))
            messages.append({"role": "user", "content": f"Pick {words}"})
            body: dict[str, Any] = {
                "messages": messages,
                "max_tokens": rnd.randrange(1, 20),
                "temperature": rnd.choice([0, 1.0]),
            }
            if rnd.random() < 0.3:
                body["seed"] = number
            try:
                reply = server.chat_completion(body)
            except Exception as exc:  # collected: a thread's assertion would be lost
                errors.append(repr(exc))
                return
            messages.append(
                {"role": "assistant", "content": reply["choices"][0]["message"]["content"] or "0"}
            )

    with LocalOpenAIServer(model, tokenizer, prefix_cache=cached, max_batch=8) as server:
        threads = [threading.Thread(target=conversation, args=(server, n)) for n in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(server.log) == 24 * 5
        if cached:
            assert server.cache is not None and server.cache.hits > 0


def test_a_conversation_in_flight_is_not_matched_by_another_request(tiny_model: Any) -> None:
    """A row taken by a running request is out of the cache until it ends: a request
    sharing its prefix meanwhile reads its prompt itself (a match would find no row)."""
    tiny_model.eval()
    cache = PrefixCache(tiny_model)
    batch = ContinuousBatch(
        tiny_model, cache=cache, stop_ids=NEVER, shared=torch.Generator(), max_rows=4
    )
    prompt = [5, 9, 13, 17] * 10
    first: list[Any] = []
    _run(batch, {0: [_request(prompt, 3, 0.0, None, first)]})
    follow, twin = [*prompt, *first[0].ids, 30], [*prompt, 31, 32]
    got: list[Any] = []
    other: list[Any] = []
    _run(
        batch,
        {0: [_request(follow, 6, 0.0, None, got)], 2: [_request(twin, 2, 0.0, None, other)]},
    )
    assert other[0].ids == _alone(tiny_model, twin, 2, 0.0, 0).ids
    assert got[0].ids == _alone(tiny_model, follow, 6, 0.0, 0).ids
    assert cache.entries == 2
