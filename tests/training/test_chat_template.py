"""ChatTemplate and ChatCodec with real templates and a real BPE (issue 17 items 2 and 3):
tool-call parsing, stop ids, Qwen3's non-prefix-stable template, drift classification."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from _layout_fixtures import TEMPLATES, LookupEnv, build_bpe_tokenizer, save_tiny_checkpoint
from budgetmix.adapters import ChatMessage, ChatTemplate, LocalChatModel
from budgetmix.environment import Task
from budgetmix.exceptions import ConfigError
from budgetmix.policies.samplers import FixedBudget
from budgetmix.training.data.models import load_pretrained
from budgetmix.training.rollouts.chat import ChatCodec, TemplateStabilityError, TokenDriftError
from budgetmix.training.rollouts.generation import Generation, GenerationRequest, ScriptedGenerator
from budgetmix.training.rollouts.rollout import EpisodeSpec, RolloutSettings, run_rollouts
from budgetmix.training.toy import EchoEnv

QWEN3 = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
QWEN3_TRAINING = (TEMPLATES / "Qwen-Qwen3-training-trl.jinja").read_text()
STRICT = RolloutSettings(token_check="strict", max_new_tokens=64, max_total_tokens=4096)


@pytest.fixture(scope="module")
def qwen() -> Any:
    return build_bpe_tokenizer("qwen")


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llama")
    save_tiny_checkpoint("llama", build_bpe_tokenizer("llama"), path)
    return path


def _spec(make_env: Any, turns: int = 4) -> EpisodeSpec:
    task = Task(task_id="t-0", seed=0, make_env=make_env)
    return EpisodeSpec(task=task, budget=FixedBudget(turns).sample(random.Random(0)))


def _echo3() -> EchoEnv:
    return EchoEnv(min_len=3, max_len=3)


def _echo_agent(req: GenerationRequest) -> str:
    return req.message.split("\n")[0].split()[-1]  # the letter after "echo"


# -- parsing ------------------------------------------------------------------------------
def test_the_parser_follows_the_template_and_can_be_overridden(qwen: Any) -> None:
    hermes = ChatTemplate(qwen)
    assert hermes.tool_call_format == "hermes" and hermes.end_of_turn == "<|im_end|>"
    text = 'Let me see.\n<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call>'
    content, (call,) = hermes.parse(text)
    assert (content, call.name, call.arguments) == ("Let me see.", "lookup", '{"key": "a"}')
    llama = ChatTemplate(qwen, (TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text())
    assert llama.tool_call_format == "llama_json"
    content, (call,) = llama.parse('<|python_tag|>{"name": "lookup", "parameters": {"key": "b"}}')
    assert (content, call.name, call.arguments) == ("", "lookup", '{"key": "b"}')
    assert llama.parse("The answer is 18.") == ("The answer is 18.", ())
    _, (cut,) = llama.parse('{"name": "lookup", "parameters": {"ke')  # cut off: still a call
    assert cut.name == "lookup" and cut.arguments == '{"name": "lookup", "parameters": {"ke'
    forced = ChatTemplate(qwen, tool_call_format="llama_json")
    assert forced.parse(text)[1] == ()
    with pytest.raises(ConfigError, match="tool_call_format"):
        ChatTemplate(qwen, tool_call_format="xml")  # type: ignore[arg-type]


def test_a_reply_round_trips_through_the_template(qwen: Any) -> None:
    template = ChatTemplate(qwen)
    tools = LookupEnv().tool_specs()
    history = [{"role": "user", "content": "task"}]
    reply = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c",
                "type": "function",
                "function": {"name": "lookup", "arguments": {"key": "a"}},
            }
        ],
    }
    text = template.assistant_text(history, reply, tools)
    assert text.endswith("</tool_call><|im_end|>")
    parsed = template.reply_row(qwen.decode(template.encode(text), skip_special_tokens=True))
    assert template.assistant_text(history, parsed, tools) == text


# -- stop ids ---------------------------------------------------------------------------
def test_llama3_with_end_of_text_as_eos_works_and_stops_on_every_stop_id(llama_dir: Path) -> None:
    import torch

    model, tokenizer = load_pretrained(llama_dir)
    ids = tokenizer.convert_tokens_to_ids
    codec = ChatCodec.for_model(model, tokenizer)  # refused before: eos is not <|eot_id|>
    assert tokenizer.eos_token == "<|end_of_text|>" and codec.template.end_of_turn == "<|eot_id|>"
    stops = {ids("<|end_of_text|>"), ids("<|eom_id|>"), ids("<|eot_id|>")}
    assert set(codec.stop_token_ids) == stops and codec.eos_token_id == ids("<|eot_id|>")
    chat = LocalChatModel(model, tokenizer, max_new_tokens=8)
    assert set(chat.template.stop_token_ids) == stops
    for stop in sorted(stops):
        head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
        with torch.no_grad():
            head.weight.zero_()
            head.bias.fill_(-10.0)
            head.bias[stop] = 10.0  # greedy decoding writes this stop id first
        model.lm_head = head
        reply = chat.complete([ChatMessage(role="user", content="hi")], [], notice=None)
        assert reply.finish_reason == "stop", tokenizer.convert_ids_to_tokens(stop)
        assert reply.usage is not None and reply.usage.output_tokens == 1


# -- Qwen3: not prefix-stable in general, stable on the tool-role layout -----------------
def _qwen3_codec(qwen: Any, template: str = QWEN3) -> ChatCodec:
    return ChatCodec(qwen, chat_template=template)


def test_qwen3_official_template_is_refused_where_it_rewrites_turns(qwen: Any) -> None:
    codec = _qwen3_codec(qwen)
    gen = ScriptedGenerator(_echo_agent, codec)
    # user-role observations: Qwen3 drops the <think> block of the earlier reply
    with pytest.raises(TemplateStabilityError, match=r"not prefix-stable.*qwen3_training") as e:
        run_rollouts([_spec(_echo3)], gen, codec, STRICT)
    assert "or tool-role observations (a ToolEnv)" in str(e.value)  # not in use here


def _thinking_lookup(req: GenerationRequest) -> dict[str, Any]:
    done = sum(m["role"] == "assistant" for m in req.messages)
    if done == 2:
        return {"role": "assistant", "content": "<think>\nadd them\n</think>\n\nThe answer is 18."}
    key = ("alpha", "beta")[done]
    return {
        "role": "assistant",
        "content": f"<think>\nlook up {key}\n</think>\n\n",
        "tool_calls": [
            {
                "id": "c",
                "type": "function",
                "function": {"name": "lookup", "arguments": {"key": key}},
            }
        ],
    }


def test_qwen3_official_template_works_on_the_tool_role_layout(qwen: Any) -> None:
    codec = _qwen3_codec(qwen)
    (r,) = run_rollouts(
        [_spec(LookupEnv)], ScriptedGenerator(_thinking_lookup, codec), codec, STRICT
    )
    assert r.termination == "success" and r.num_turns == 3 and r.drifts == ()
    text = codec.decode(r.prompt_ids + r.response_ids)
    assert text.count("<think>\nlook up") == 2  # later turns keep their reasoning


def test_qwen3_empty_reasoning_is_detected_on_the_real_episode(qwen: Any) -> None:
    codec = _qwen3_codec(qwen)

    def no_reasoning(req: GenerationRequest) -> dict[str, Any]:
        reply = _thinking_lookup(req)
        return {**reply, "content": ""} if reply.get("tool_calls") else reply

    gen = ScriptedGenerator(no_reasoning, codec)
    with pytest.raises(TemplateStabilityError, match="re-renders earlier turns") as refused:
        run_rollouts([_spec(LookupEnv)], gen, codec, STRICT)
    # the hint names what is left on this layout, not the tool-role observations it uses
    hint = str(refused.value).split("; ", 1)[1]
    assert "already in use" in hint and "or tool-role observations" not in hint
    assert "--chat-template" in hint and "non-empty <think>" in hint


def test_a_prefix_stable_training_variant_is_the_documented_path(qwen: Any) -> None:
    codec = _qwen3_codec(qwen, QWEN3_TRAINING)
    (r,) = run_rollouts([_spec(_echo3)], ScriptedGenerator(_echo_agent, codec), codec, STRICT)
    # every turn renders (echo reads the think block as a wrong answer: all 4 turns used)
    assert r.num_turns == 4 and r.termination == "budget_exhausted" and r.drifts == ()
    assert LocalChatModel(object(), qwen, chat_template=QWEN3_TRAINING).template.template == (
        QWEN3_TRAINING
    )


# -- drift classification -----------------------------------------------------------------
def _split_word(codec: ChatCodec, word: str) -> list[int]:
    """A non-canonical tokenization of ``word``: its sub-tokens encoded apart."""
    for cut in range(1, len(word)):
        ids = codec.encode(word[:cut]) + codec.encode(word[cut:])
        if ids != codec.encode(word) and codec.decode(ids) == word:
            return ids
    raise AssertionError(f"no non-canonical split of {word!r}")


class NonCanonical:
    """Replies 'value' tokenized non-canonically, then the canonical end-of-turn."""

    def __init__(self, codec: ChatCodec) -> None:
        self.ids = (*_split_word(codec, "value"), codec.eos_token_id)
        assert codec.encode("value") != list(self.ids[:-1])

    def generate(self, requests: Any, max_new_tokens: int) -> list[Generation]:
        return [Generation(self.ids, (0.0,) * len(self.ids), True) for _ in requests]


def test_non_canonical_sampled_tokens_are_counted_not_fatal(qwen: Any) -> None:
    codec = ChatCodec(qwen)
    rollouts = run_rollouts([_spec(_echo3)], NonCanonical(codec), codec, STRICT)  # no raise
    (r,) = rollouts
    assert r.num_turns == 4 and r.noncanonical_spans == 4  # one per sampled reply
    assert {d.kind for d in r.drifts} == {"tokenization"} and not r.drift.fatal  # type: ignore[union-attr]


def test_template_errors_in_environment_spans_are_fatal(
    qwen: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    codec = ChatCodec(qwen)
    real = codec.continuation

    def wrong_glue(*args: Any) -> tuple[str, list[int]]:
        text, ids = real(*args)
        return text, codec.encode(codec.decode(ids).replace("<|im_start|>user", "<|im_start|>usr"))

    monkeypatch.setattr(codec, "continuation", wrong_glue)
    with pytest.raises(TokenDriftError, match=r"\(template\)") as caught:
        run_rollouts([_spec(_echo3)], NonCanonical(codec), codec, STRICT)
    assert caught.value.drift.fatal


def test_a_span_boundary_inside_a_word_is_a_boundary_error(qwen: Any) -> None:
    codec = ChatCodec(qwen)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "value"}]
    text = codec.render(messages, generation_prompt=False)
    start, end = text.rindex("value"), text.rindex("<|im_end|>")
    for cut in range(start + 1, end):  # a prompt that ends inside the word
        head, tail = codec.encode(text[:cut]), codec.encode(text[cut:end])
        ids = [*head, *tail, codec.eos_token_id]
        if codec.encode(text)[: len(ids)] != ids:
            break
    else:
        raise AssertionError("every split of 'value' tokenizes like the whole")
    drifts = codec.drifts(messages, ids, sampled_mask=[0] * len(head) + [1] * (len(tail) + 1))
    assert [d.kind for d in drifts] == ["boundary"] and drifts[0].fatal
    assert drifts[0].position < len(head) + 1


def test_training_reads_the_notice_placement() -> None:
    assert RolloutSettings().notice_placement == "observation"
    with pytest.raises(ConfigError, match="one training row per turn"):
        RolloutSettings(notice_placement="ephemeral")
    with pytest.raises(ConfigError, match=r"RolloutSettings\.notice_placement must be one of"):
        RolloutSettings(notice_placement="inline")  # type: ignore[arg-type]


def test_the_end_of_turn_token_is_found_or_the_template_refused(qwen: Any) -> None:
    glued = "{% for m in messages %}{{ m['content'] }}\n{{ eos_token }}{% endfor %}"
    assert ChatTemplate(qwen, glued).end_of_turn == "<|im_end|>"  # the EOS after some glue
    with pytest.raises(ConfigError, match="cannot find the token that ends an assistant turn"):
        ChatTemplate(qwen, "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(ConfigError, match="has no chat_template"):
        ChatTemplate(object())
