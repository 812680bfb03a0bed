"""Contract test: BudgetmixAgentLoop inside verl's agent loop, as verl's AgentLoopWorker drives it.

verl's own classes are used where ``import verl`` works; otherwise (this project's
stack: verl 0.9.1 needs transformers<5.11) the pinned copy of verl 0.9.1's interface
in tests/training/verl_interface/ (README there: files, sha256, what is copied). The
agent loop is built with the keyword arguments ``AgentLoopWorker._run_agent_loop``
passes (plus the config file's keys, as hydra does) and ``run`` is awaited with a
dataset row's fields; the server manager implements verl's
``LLMServerClient.generate`` over a local Hugging Face model and logs every request.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from budgetmix.exceptions import ConfigError
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import ModelGenerator

PINNED = Path(__file__).with_name("verl_interface")
HERE_MODULE = "budgetmix.training.engines.verl_agent_loop"


def _verl_is_installed() -> bool:
    try:
        importlib.import_module("verl.experimental.agent_loop.agent_loop")
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def verl() -> Iterator[SimpleNamespace]:
    """verl's classes (installed, or the pinned copy on sys.path for this module only)."""
    pinned = not _verl_is_installed()
    if pinned:
        sys.path.insert(0, str(PINNED))
    try:
        agent_loop = importlib.import_module("verl.experimental.agent_loop.agent_loop")
        replica = importlib.import_module("verl.workers.rollout.replica")
        ours = importlib.import_module(HERE_MODULE)
        yield SimpleNamespace(
            agent_loop=agent_loop, TokenOutput=replica.TokenOutput, ours=ours, pinned=pinned
        )
    finally:
        if pinned:
            sys.path.remove(str(PINNED))
            for name in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
                del sys.modules[name]
            sys.modules.pop(HERE_MODULE, None)


class LocalServerManager:
    """verl's ``LLMServerClient.generate`` signature over a local model (token ids in/out)."""

    def __init__(self, model: Any, pad: int, token_output: type) -> None:
        import torch

        self.model, self.pad, self.token_output = model, pad, token_output
        self.gen = torch.Generator().manual_seed(0)
        self.log: list[dict[str, Any]] = []

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        audio_data: list[Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        sampler = ModelGenerator(
            self.model,
            pad_token_id=self.pad,
            stop_token_ids=sampling_params["stop_token_ids"],
            temperature=sampling_params["temperature"],
            generator=self.gen,
        )
        (g,) = sampler.generate_ids([prompt_ids], sampling_params["max_tokens"])
        entry = {"request_id": request_id, "prompt": list(prompt_ids), "ids": list(g.ids)}
        self.log.append({**entry, "logprobs": list(g.logprobs)})
        lps = list(g.logprobs) if sampling_params.get("logprobs") else None
        return self.token_output(token_ids=list(g.ids), log_probs=lps, stop_reason="completed")


def _ends_turns_often(model: Any, end_of_turn: int) -> None:
    """A +3 bias on the untrained policy's end-of-turn logit: episodes of several turns."""
    import torch

    head = model.get_output_embeddings()
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    biased.weight = head.weight
    with torch.no_grad():
        biased.bias.zero_()
        biased.bias[end_of_turn] = 3.0
    model.set_output_embeddings(biased)


def _make_loop(verl: SimpleNamespace, server: Any, tokenizer: Any, **options: Any) -> Any:
    """The agent loop as ``AgentLoopWorker._run_agent_loop`` instantiates it (verl 0.9.1)."""
    rollout = SimpleNamespace(prompt_length=options.pop("prompt_length", 512), response_length=256)
    config = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout))
    al = verl.agent_loop
    return verl.ours.BudgetmixAgentLoop(
        trainer_config=al.DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen2",
        dataset_cls=object,
        data_config=al.DictConfigWrap({}),
        tools=al.ToolListWrap([]),
        **{"env": "echo", "sampler": {"kind": "budgetmix", "ceiling": 4}, "max_new_tokens": 4}
        | options,
    )


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}


def _row(seed: int, uid: str) -> dict[str, Any]:
    return {"raw_prompt": [], "extra_info": {"seed": seed}, "uid": uid, "agent_name": "budgetmix"}


def _served_spans(out: Any, log: list[dict[str, Any]]) -> set[str]:
    """Every sampled span is the server's answer to the context before it; returns the
    request ids those answers carried."""
    prompt, ids, mask = out.prompt_ids, out.response_ids, out.response_mask
    lps, used, i = out.response_logprobs, set(), 0
    while i < len(ids):
        if not mask[i]:
            i += 1
            continue
        ctx = prompt + ids[:i]
        match = [e for e in log if e["prompt"] == ctx and ids[i : i + len(e["ids"])] == e["ids"]]
        assert match, f"no server answer for position {i}"
        n = len(match[0]["ids"])
        assert all(mask[i : i + n]) and lps[i : i + n] == pytest.approx(match[0]["logprobs"])
        used.add(match[0]["request_id"])
        i += n
    return used


def test_runs_return_verls_output_with_the_servers_ids(
    verl: SimpleNamespace, tokenizer: Any, tiny_model: Any
) -> None:
    _ends_turns_often(tiny_model, ChatCodec(tokenizer).eos_token_id)
    server = LocalServerManager(tiny_model, int(tokenizer.pad_token_id), verl.TokenOutput)
    rows = [_row(3, "group-a"), _row(3, "group-a"), _row(5, "group-b"), _row(5, "group-b")]

    async def worker() -> list[Any]:  # one agent loop per trajectory, gathered, as verl does
        loops = [_make_loop(verl, server, tokenizer) for _ in rows]
        runs = [
            lp.run({**SAMPLING, "logprobs": True}, **row)
            for lp, row in zip(loops, rows, strict=True)
        ]
        return list(await asyncio.gather(*runs))

    outs = asyncio.run(worker())
    assert all(isinstance(o, verl.agent_loop.AgentLoopOutput) for o in outs)
    assert verl.agent_loop._agent_loop_registry["budgetmix"] == {
        "_target_": f"{HERE_MODULE}.BudgetmixAgentLoop"
    }
    request_ids = [_served_spans(o, server.log) for o in outs]
    assert all(len(r) == 1 for r in request_ids)  # every turn of an episode: one request id
    assert len(set().union(*request_ids)) == 4  # and one per episode
    turns = [sum(1 for e in server.log if e["request_id"] in r) for r in request_ids]
    assert max(turns) >= 2 and sum(turns) == len(server.log)
    budgets = [o.extra_fields["budget_turns"] for o in outs]
    assert budgets[0] == budgets[1] and budgets[2] == budgets[3]  # shared within a group
    for o in outs:
        d = o.as_dict()  # what verl's postprocess reads
        assert d["responses"].shape == d["response_mask"].shape == d["rollout_log_probs"].shape
        assert d["rm_scores"][-1].item() == pytest.approx(o.reward_score)
        assert o.extra_fields["termination"] in (
            "success",
            "failure",
            "format_error",
            "budget_exhausted",
            "length",
        )
        assert 0 in o.response_mask or o.extra_fields["termination"] == "length"


def test_no_logprobs_asked_none_returned(
    verl: SimpleNamespace, tokenizer: Any, tiny_model: Any
) -> None:
    server = LocalServerManager(tiny_model, int(tokenizer.pad_token_id), verl.TokenOutput)

    async def one() -> Any:
        return await _make_loop(verl, server, tokenizer).run(
            {**SAMPLING, "logprobs": False}, **_row(1, "g")
        )

    out = asyncio.run(one())
    assert out.response_logprobs is None and "rollout_log_probs" not in out.as_dict()
    assert server.log and all(e["request_id"].startswith("budgetmix-g-") for e in server.log)


def test_bad_rows_and_limits_are_clear_errors(
    verl: SimpleNamespace, tokenizer: Any, tiny_model: Any
) -> None:
    server = LocalServerManager(tiny_model, int(tokenizer.pad_token_id), verl.TokenOutput)

    async def run(row: dict[str, Any], **options: Any) -> Any:
        return await _make_loop(verl, server, tokenizer, **options).run(SAMPLING, **row)

    with pytest.raises(ConfigError, match=r"extra_info\.seed"):
        asyncio.run(run({"raw_prompt": [], "uid": "g"}))
    with pytest.raises(ConfigError, match=r"rollout\.prompt_length=8"):
        asyncio.run(run(_row(1, "g"), prompt_length=8))
    with pytest.raises(ConfigError, match="group_budgets"):
        asyncio.run(run(_row(1, "g"), group_budgets="per-turn"))
