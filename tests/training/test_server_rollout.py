"""Rollouts through the production path (issue 18 item 1): the controller, an OpenAI client,
an OpenAI-compatible server that returns token ids (the local one here, vLLM's field names).

The done-when test runs a BudgetMix RL step whose rollouts went through the local server and
the controller, and checks the trained ids against the server's own log of what it was fed
and what it sampled.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import httpx
import pytest
from _layout_fixtures import build_bpe_tokenizer, save_tiny_checkpoint
from _server_rollout_env import PickEnv
from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.policies.samplers import FixedBudget
from budgetmix.training.rollouts.rollout import EpisodeSpec
from budgetmix.training.serving.server_rollout import ServerRollouts
from budgetmix.training.serving.server_tokens import Exchange, exchange_of, stitch

TURNS = 4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt")
    save_tiny_checkpoint("qwen", build_bpe_tokenizer("qwen"), path)
    return path


def _specs(n: int, turns: int = TURNS) -> list[EpisodeSpec]:
    task = Task(task_id="pick-0", seed=0, make_env=PickEnv)
    budget = FixedBudget(turns).sample(random.Random(0))
    return [EpisodeSpec(task=task, budget=budget, group=i // 2) for i in range(n)]


def _vllm_body(prompt: list[int], ids: list[int], **choice: Any) -> dict[str, Any]:
    content = [{"token": f"token_id:{t}", "logprob": -0.5, "top_logprobs": []} for t in ids]
    return {
        "prompt_token_ids": prompt,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi"},
                "finish_reason": "stop",
                "token_ids": ids,
                "logprobs": {"content": content},
                **choice,
            }
        ],
    }


# -- reading ids and stitching turns -------------------------------------------------------
def test_exchange_of_reads_vllm_fields_and_names_a_missing_one() -> None:
    request = {"messages": [{"role": "user", "content": "x"}]}
    ex = exchange_of(request, _vllm_body([1, 2, 3], [7, 8]))
    assert (ex.prompt_ids, ex.completion_ids, ex.logprobs) == ((1, 2, 3), (7, 8), (-0.5, -0.5))
    assert ex.finish_reason == "stop" and ex.messages == tuple(request["messages"])
    # no token_ids: the ids of return_tokens_as_token_ids log-prob tokens
    older = _vllm_body([1], [7, 8])
    del older["choices"][0]["token_ids"]
    assert exchange_of(request, older).completion_ids == (7, 8)
    no_prompt = _vllm_body([1], [7])
    del no_prompt["prompt_token_ids"]
    with pytest.raises(ConfigError, match="prompt_token_ids"):
        exchange_of(request, no_prompt)
    no_ids = _vllm_body([1], [7])
    del no_ids["choices"][0]["token_ids"]
    no_ids["choices"][0]["logprobs"]["content"][0]["token"] = "hi"
    with pytest.raises(ConfigError, match=r"choices\[0\]\.token_ids"):
        exchange_of(request, no_ids)
    no_logprobs = _vllm_body([1], [7])
    del no_logprobs["choices"][0]["logprobs"]
    with pytest.raises(ConfigError, match="logprobs"):
        exchange_of(request, no_logprobs)


def _ex(prompt: list[int], completion: list[int]) -> Exchange:
    lps = tuple(-float(t) for t in completion)
    return Exchange(tuple(prompt), tuple(completion), lps, "stop")


def test_stitch_one_row_when_prompts_extend_else_one_row_per_turn() -> None:
    turns = [_ex([1, 2], [3, 4]), _ex([1, 2, 3, 4, 5], [6]), _ex([1, 2, 3, 4, 5, 6, 7, 8], [9])]
    (row,), broke = stitch(turns)
    assert broke is None
    assert row.prompt_ids == (1, 2)
    assert row.response_ids == (3, 4, 5, 6, 7, 8, 9)
    assert row.response_mask == (1, 1, 0, 1, 0, 0, 1)
    assert row.logprobs == (-3.0, -4.0, 0.0, -6.0, 0.0, 0.0, -9.0)
    # turn 2 re-tokenized the reply of turn 1: no common sequence, one row per turn
    rewritten = [turns[0], _ex([1, 2, 34, 5], [6]), _ex([1, 2, 34, 5, 6, 7], [9])]
    rows, broke = stitch(rewritten)
    assert broke == 2
    assert [(r.prompt_ids, r.response_ids, r.response_mask) for r in rows] == [
        ((1, 2), (3, 4), (1, 1)),
        ((1, 2, 34, 5), (6,), (1,)),
        ((1, 2, 34, 5, 6, 7), (9,), (1,)),
    ]


@pytest.mark.parametrize(
    "asks", [{}, {"logprobs": True}, {"extra_body": {"return_token_ids": True}}]
)
def test_the_client_is_handed_what_it_asked_for_and_the_log_keeps_every_id(
    asks: dict[str, Any],
) -> None:
    """TokenCapture asks for ids and log-probs; the SDK's response keeps only those the
    client's own request asked for (no model object per sampled token), the log all."""
    import openai
    from budgetmix.training.serving.server_tokens import TokenCapture, TokenLog, token_log

    def reply(request: httpx.Request) -> httpx.Response:
        body = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            **_vllm_body([1, 2, 3], [7, 8]),
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
        return httpx.Response(200, json=body)

    client = openai.OpenAI(
        api_key="k",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx.Client(transport=TokenCapture(httpx.MockTransport(reply))),
    )
    log = TokenLog()
    slot = token_log.set(log)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "x"}], **asks
        )
    finally:
        token_log.reset(slot)
    handed = json.loads(raw.http_response.content)
    choice = handed["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "hi"}
    assert ("prompt_token_ids" in handed) is ("extra_body" in asks)
    assert ("token_ids" in choice) is ("extra_body" in asks)
    assert (choice["logprobs"] is not None) is ("logprobs" in asks)
    parsed = raw.parse()
    assert (parsed.choices[0].logprobs is not None) is ("logprobs" in asks)
    assert log.error is None
    (ex,) = log.exchanges
    assert (ex.prompt_ids, ex.completion_ids, ex.logprobs) == ((1, 2, 3), (7, 8), (-0.5, -0.5))


def test_a_server_that_returns_no_ids_fails_the_batch_naming_the_field() -> None:
    sent: list[dict[str, Any]] = []

    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        body = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Done."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
        return httpx.Response(200, json=body)

    driver = ServerRollouts(
        "http://127.0.0.1:9/v1", "m", transport=httpx.MockTransport(reply), max_parallel=1
    )
    with pytest.raises(ConfigError, match="prompt_token_ids"):
        driver(_specs(1))
    # what the request asked for: vLLM's fields, the controller's notice in the observation
    assert sent and sent[0]["return_token_ids"] is True and sent[0]["logprobs"] is True
    assert sent[0]["messages"][-1]["content"].endswith(
        "Budget (v1): turn 1 of 4, 4 turns left including this one."
    )
    assert [t["function"]["name"] for t in sent[0]["tools"]] == ["pick"]


def test_a_text_environment_is_refused() -> None:
    from budgetmix.training.toy import EchoEnv

    driver = ServerRollouts("http://127.0.0.1:9/v1", "m", transport=httpx.MockTransport(print))
    task = Task(task_id="echo", seed=0, make_env=EchoEnv)
    spec = EpisodeSpec(task=task, budget=FixedBudget(2).sample(random.Random(0)))
    with pytest.raises(ConfigError, match="not a ToolEnv"):
        driver([spec])


def _vllm_server(request: httpx.Request) -> httpx.Response:
    """A vLLM-shaped server: one reply, ids and log-probs included (streamed when asked)."""
    body = json.loads(request.content)
    if body.get("stream"):
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": "Done."}, "finish_reason": "stop"}],
        }
        text = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
    reply = _vllm_body([1, 2, 3], [7, 8])
    reply |= {"id": "c", "object": "chat.completion", "created": 0, "model": "m"}
    reply["usage"] = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    return httpx.Response(200, json=reply)


def test_a_streamed_request_or_a_loop_without_a_result_is_refused() -> None:
    def streaming(ep: Any) -> Any:
        with ep.controller.episode() as episode:
            stream = ep.client.chat.completions.create(
                messages=[{"role": "user", "content": ep.task}], stream=True, **ep.request_options
            )
            for _ in stream:
                pass
        return episode.result

    transport = httpx.MockTransport(_vllm_server)
    driver = ServerRollouts("http://127.0.0.1:9/v1", "m", agent=streaming, transport=transport)
    with pytest.raises(ConfigError, match="stream=true"):
        driver(_specs(1))
    silent = ServerRollouts(
        "http://127.0.0.1:9/v1", "m", agent=lambda ep: None, transport=transport
    )
    with pytest.raises(ConfigError, match="must return"):
        silent(_specs(1))
    # the default loop over the same server: one turn, its ids, the env's verdict
    (row,) = ServerRollouts("http://127.0.0.1:9/v1", "m", transport=transport)(_specs(1))
    assert (row.prompt_ids, row.response_ids, row.response_mask) == ((1, 2, 3), (7, 8), (1, 1))
    assert row.termination == "failure" and row.num_turns == 1  # "hi" before any even pick
