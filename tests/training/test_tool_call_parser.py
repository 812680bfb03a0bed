"""The tool-call parser is recorded with the checkpoint, and an unknown one is refused
(issue 26 item 5).

A Mistral-v0.3-style template writes calls as ``[TOOL_CALLS] [{...}]``, a syntax budgetmix
has no parser for: training and deployment (``serve.chat_model`` under ``run_agent``, and
``TrainedPolicyAgent``) refuse it naming the known parsers and how to choose one, instead
of reading the call as a final answer. A checkpoint whose ``training_env.json`` records
the parser it was trained with is deployed with that parser.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _layout_fixtures import LookupEnv, build_bpe_tokenizer, save_tiny_checkpoint
from budgetmix import Budget, BudgetController
from budgetmix.adapters import run_agent
from budgetmix.adapters.chat_template import ChatTemplate
from budgetmix.exceptions import ConfigError
from budgetmix.policies import NotifyEveryTurn
from budgetmix.training.data.provenance import TRAINING_ENV_FILE, write_training_env
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.serving import serve

pytest.importorskip("transformers")

#: The shape of Mistral-v0.3's official template: tools in [AVAILABLE_TOOLS], calls as
#: [TOOL_CALLS] followed by a JSON list, results in [TOOL_RESULTS].
MISTRAL = (
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{ message.content }}\n"
    "{%- elif message.role == 'user' %}"
    "{%- if tools is defined and tools %}[AVAILABLE_TOOLS] {{ tools | tojson }}"
    "[/AVAILABLE_TOOLS]{% endif %}[INST] {{ message.content }}[/INST]"
    "{%- elif message.role == 'assistant' and message.tool_calls is defined "
    "and message.tool_calls %}[TOOL_CALLS] ["
    "{%- for c in message.tool_calls %}{{ c.function | tojson }}"
    "{% if not loop.last %}, {% endif %}{% endfor %}]{{ eos_token }}"
    "{%- elif message.role == 'assistant' %} {{ message.content }}{{ eos_token }}"
    "{%- elif message.role == 'tool' %}[TOOL_RESULTS] {{ message.content | tojson }}"
    "[/TOOL_RESULTS]{%- endif %}{%- endfor %}"
)
KNOWN = r"no parser.*'hermes', 'llama_json'.*tool_call_format="


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = build_bpe_tokenizer("qwen")
    tokenizer.chat_template = MISTRAL
    path = tmp_path_factory.mktemp("mistral")
    save_tiny_checkpoint("qwen", tokenizer, path)
    return path


def _deploy(chat: Any, call_text: str) -> Any:
    real_send = chat.send
    ids = [*chat.template.encode(call_text), chat.template.stop_token_ids[0]]

    def send(request: str) -> Any:
        return real_send(request)._replace(new_ids=ids)

    chat.send = send
    env = LookupEnv()
    controller = BudgetController(
        Budget(turns=2), notice=NotifyEveryTurn(placement="observation")
    )
    return run_agent(
        chat, env.controller_tools(), env.reset(0), controller, system=env.instructions()
    )


def test_a_template_without_a_known_parser_is_refused_in_training(mistral: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(mistral)
    template = ChatTemplate(tokenizer)
    assert template.tool_call_format is None
    tools = LookupEnv().tool_specs()
    user = [{"role": "user", "content": "hi"}]
    assert template.render(user, add_generation_prompt=True).startswith("[INST] hi")
    with pytest.raises(ConfigError, match=KNOWN):
        template.render(user, tools, add_generation_prompt=True)
    assert template.parse(" plain reply") == ("plain reply", ())  # no tools, no calls
    with pytest.raises(ConfigError, match=KNOWN):
        ChatCodec(tokenizer).render(user, generation_prompt=True, tools=tools)
    # the known families keep their parsers
    assert ChatTemplate(build_bpe_tokenizer("qwen")).tool_call_format == "hermes"
    assert ChatTemplate(build_bpe_tokenizer("llama")).tool_call_format == "llama_json"


def test_deployment_refuses_it_instead_of_reading_the_call_as_an_answer(mistral: Path) -> None:
    chat = serve.chat_model(mistral, max_new_tokens=8)
    call = '[TOOL_CALLS] [{"name": "lookup", "arguments": {"key": "alpha"}}]'
    with pytest.raises(ConfigError, match=KNOWN):
        _deploy(chat, call)
    agent = serve.TrainedPolicyAgent.from_pretrained(mistral)
    env = LookupEnv()
    env.reset(0)
    agent.start(env, 0)
    with pytest.raises(ConfigError, match=KNOWN):
        agent.act("What is alpha plus beta?", None, 2)


def test_the_recorded_parser_is_the_one_deployment_uses(mistral: Path, tmp_path: Path) -> None:
    import shutil

    recorded = tmp_path / "recorded"
    shutil.copytree(mistral, recorded)
    write_training_env(recorded, "lookup", {}, notice_format="v1", tool_call_format="hermes")
    written = json.loads((recorded / TRAINING_ENV_FILE).read_text())
    assert written["tool_call_format"] == "hermes" and written["grace_turn"] is False
    chat = serve.chat_model(recorded, max_new_tokens=8)
    assert chat.template.tool_call_format == "hermes"
    run = _deploy(chat, '<tool_call>{"name": "lookup", "arguments": {"key": "alpha"}}</tool_call>')
    assert run.result.mistakes == ()
    assert [c.name for m in run.messages for c in m.tool_calls][:1] == ["lookup"]
    agent = serve.TrainedPolicyAgent.from_pretrained(recorded)
    assert agent.codec.template.tool_call_format == "hermes"
    # an explicit choice wins over the record; a record of an unknown parser is refused
    chosen = serve.chat_model(recorded, tool_call_format="llama_json")
    assert chosen.template.tool_call_format == "llama_json"
    data = {**written, "tool_call_format": "mistral"}
    (recorded / TRAINING_ENV_FILE).write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="tool_call_format"):
        serve.chat_model(recorded)
