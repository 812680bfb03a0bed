"""LocalChatModel over a tiny transformers model built here (no downloads)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from budgetmix import Budget, EpisodeStatus, render_notice
from budgetmix.adapters import (
    ChatMessage,
    LocalChatModel,
    Toolbox,
    ToolCallRequest,
    parse_tool_calls,
    run_agent,
)
from budgetmix.exceptions import ConfigError, MissingExtraError
from budgetmix.ledger import Ledger
from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

SPEC = TinyModelSpec(
    hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64
)
HELLO = [ChatMessage(role="user", content="hello")]


pytestmark = pytest.mark.usefixtures("no_network")


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    # A model this small runs fastest on one thread, and does not fight parallel jobs.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def tiny(tokenizer: Any) -> Any:
    """Shared by the read-only tests; the training test builds its own."""
    return build_tiny_model(SPEC, tokenizer, seed=0).eval()


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_greedy_generation_is_deterministic(tiny: Any, tokenizer: Any) -> None:
    model = LocalChatModel(tiny, tokenizer, max_new_tokens=12)
    first = model.complete(HELLO, [], notice="N")
    second = model.complete(HELLO, [], notice="N")
    assert first.raw == second.raw
    assert first.usage is not None and first.usage.output_tokens == 12
    assert first.finish_reason == "length"


def test_sampling_is_seeded(tiny: Any, tokenizer: Any) -> None:
    def samples(seed: int) -> list[str]:
        model = LocalChatModel(tiny, tokenizer, max_new_tokens=8, temperature=1.0, seed=seed)
        return [str(model.complete(HELLO, [], notice=None).raw) for _ in range(2)]

    assert samples(1) == samples(1)
    assert samples(1) != samples(2)


def test_from_pretrained_round_trip(tiny: Any, tokenizer: Any, tmp_path: Path) -> None:
    tiny.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded = LocalChatModel.from_pretrained(tmp_path, local_files_only=True, max_new_tokens=16)
    in_memory = LocalChatModel(tiny, tokenizer, max_new_tokens=16)
    assert loaded.model_name == tmp_path.name
    assert (
        loaded.complete(HELLO, [], notice="N").raw == in_memory.complete(HELLO, [], notice="N").raw
    )


def test_notice_is_a_final_user_message_of_the_prompt_only(tiny: Any, tokenizer: Any) -> None:
    model = LocalChatModel(tiny, tokenizer)
    tools = Toolbox([add]).specs
    prompt = model.render(HELLO, tools, "Budget (v1): turn 1 of 2.")
    assert prompt.endswith(
        "<|im_start|>user\nBudget (v1): turn 1 of 2.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert '"name": "add"' in prompt  # tools described in a system message
    assert "Budget" not in model.render(HELLO, tools, None)


TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_with_tool_support_renders_tools_and_tool_messages(tiny: Any) -> None:
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = TOOLS_TEMPLATE
    model = LocalChatModel(tiny, tokenizer)
    call = ToolCallRequest(id="c", name="add", arguments='{"a": 1, "b": 2}')
    history = [
        *HELLO,
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="tool", content="3", tool_call_id="c", name="add"),
    ]
    prompt = model.render(history, Toolbox([add]).specs, "N")
    assert prompt.startswith('<|im_start|>system\nTOOLS [{"type": "function", "function": {')
    assert '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>' in prompt
    assert "<|im_start|>tool\n3<|im_end|>" in prompt
    assert "You may call tools" not in prompt


def test_parse_tool_calls() -> None:
    text = (
        'Let me add. <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
        '<tool_call>{"name": "add", "arguments": {"a": 3</tool_call><tool_call>{"name": "x"'
    )
    content, calls = parse_tool_calls(text)
    assert content == "Let me add."
    assert [(c.name, c.arguments) for c in calls] == [
        ("add", '{"a": 1, "b": 2}'),
        ("add", '{"name": "add", "arguments": {"a": 3'),  # kept raw: invalid_tool_arguments
        ("x", '{"name": "x"'),  # cut off by the length limit
    ]
    assert len({c.id for c in calls}) == 3


def test_missing_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError, match=r"budgetmix\[train\]"):
        LocalChatModel.from_pretrained(tmp_path)


def test_a_tokenizer_without_chat_template_is_refused(tiny: Any) -> None:
    class Bare:
        chat_template = None

    with pytest.raises(ConfigError, match="chat_template"):
        LocalChatModel(tiny, Bare())


def _notice(turn: int, turns: int) -> str:
    ledger = Ledger(Budget(turns=turns))
    for _ in range(turn):
        ledger.try_charge_turn()
    return render_notice(ledger.state(in_turn=True))


def _teach(model: LocalChatModel, examples: list[tuple[str, str]]) -> None:
    """Overfit the tiny model on (prompt, reply) pairs until greedy decoding reproduces
    every reply (teacher-forced argmax exact on all reply tokens); loss on replies only."""
    tok, lm = model.tokenizer, model.model
    batch = []
    for prompt, reply in examples:
        p = tok.encode(prompt, add_special_tokens=False)
        r = [*tok.encode(reply, add_special_tokens=False), tok.eos_token_id]
        batch.append((torch.tensor([p + r]), torch.tensor([[-100] * len(p) + r])))
    torch.manual_seed(0)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-2)
    lm.train()
    for _ in range(600):
        outputs = [lm(input_ids=ids, labels=labels) for ids, labels in batch]
        exact = all(
            bool((out.logits[0, :-1].argmax(-1) == labels[0, 1:])[labels[0, 1:] != -100].all())
            for out, (_, labels) in zip(outputs, batch, strict=True)
        )
        if exact:
            break
        loss = sum(out.loss for out in outputs)
        opt.zero_grad()
        loss.backward()
        opt.step()
    lm.eval()
    assert exact, "the tiny model did not learn the demonstration"


def test_run_agent_over_a_local_model(tokenizer: Any) -> None:
    model = LocalChatModel(build_tiny_model(SPEC, tokenizer, seed=1), tokenizer, max_new_tokens=80)
    toolbox = Toolbox([add])
    call = ToolCallRequest(id="call_0_0", name="add", arguments=json.dumps({"a": 1, "b": 2}))
    task = [ChatMessage(role="user", content="What is 1+2?")]
    after_tool = [
        *task,
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="tool", content="3", tool_call_id="call_0_0", name="add"),
    ]
    wanted_call = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    _teach(
        model,
        [
            (model.render(task, toolbox.specs, _notice(1, 3)), wanted_call),
            (model.render(after_tool, toolbox.specs, _notice(2, 3)), "The answer is 3."),
        ],
    )
    run = run_agent(model, toolbox, task, Budget(turns=3))
    assert run.status is EpisodeStatus.SUCCESS, run.messages
    assert run.output == "The answer is 3."
    assert [m.role for m in run.messages] == ["user", "assistant", "tool", "assistant"]
    assert run.messages[2].content == "3"
    assert run.result.used["input_tokens"] > 0 and run.result.used["output_tokens"] > 0
