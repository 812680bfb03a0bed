"""The built-in agent loop on a local transformers model, under a turn budget.

    python examples/local_model_loop.py                      # offline, a tiny model built here
    python examples/local_model_loop.py --model PATH         # any local chat model directory

With ``--model`` it loads a local Hugging Face chat model (for example a
downloaded ``Qwen2.5-0.5B-Instruct``; its chat template's tool support is used
when it has one) with ``LocalChatModel.from_pretrained`` and never downloads.
Without it, it builds a tiny char-level model from a config, teaches it one
demonstration in a few seconds on the CPU (call ``add``, read the result,
answer), saves it with ``save_pretrained`` and loads it back the way you
would load your own. Network access is blocked for the whole run.

``run_agent`` charges every model call as a turn, shows the model its budget
in an ephemeral notice, validates tool calls against the schema derived from
``add``'s type hints, and, with ``--grace``, gives a run that runs out of turns
one tool-less wrap-up call for a best-effort answer.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from budgetmix import Budget, render_notice
from budgetmix.adapters import (
    AgentRun,
    ChatMessage,
    LocalChatModel,
    Toolbox,
    ToolCallRequest,
    block_network,
    run_agent,
)
from budgetmix.ledger import Ledger

TASK = "What is 19+23?"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _notice(turn: int, turns: int) -> str:
    """The notice the loop will show on ``turn`` (the same renderer the controller uses)."""
    ledger = Ledger(Budget(turns=turns))
    for _ in range(turn):
        ledger.try_charge_turn()
    return render_notice(ledger.state(in_turn=True))


def teach_tiny_model(directory: Path, turns: int) -> None:
    """Build a tiny model, teach it one tool-using demonstration, save it to ``directory``."""
    import torch
    from budgetmix.training.data.models import TinyModelSpec, build_tiny_model
    from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    spec = TinyModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    net = build_tiny_model(spec, tokenizer, seed=0)
    chat = LocalChatModel(net, tokenizer)
    specs = Toolbox([add]).specs
    call = ToolCallRequest(id="call_0_0", name="add", arguments=json.dumps({"a": 19, "b": 23}))
    task = [ChatMessage(role="user", content=TASK)]
    after = [
        *task,
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="tool", content="42", tool_call_id=call.id, name="add"),
    ]
    demo = [
        (chat.render(task, specs, _notice(1, turns)), f"<tool_call>{_call_json(call)}</tool_call>"),
        (chat.render(after, specs, _notice(2, turns)), "19 + 23 = 42."),
    ]
    rows = []
    for prompt, reply in demo:
        p = tokenizer.encode(prompt, add_special_tokens=False)
        r = [*tokenizer.encode(reply, add_special_tokens=False), tokenizer.eos_token_id]
        rows.append((torch.tensor([p + r]), torch.tensor([[-100] * len(p) + r])))
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
    net.train()
    for _ in range(600):
        outputs = [net(input_ids=ids, labels=labels) for ids, labels in rows]
        # Stop once greedy decoding reproduces every reply token.
        if all(
            bool((out.logits[0, :-1].argmax(-1) == lab[0, 1:])[lab[0, 1:] != -100].all())
            for out, (_, lab) in zip(outputs, rows, strict=True)
        ):
            break
        optimizer.zero_grad()
        sum(out.loss for out in outputs).backward()
        optimizer.step()
    net.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def _call_json(call: ToolCallRequest) -> str:
    return json.dumps({"name": call.name, "arguments": json.loads(call.arguments)})


def main(argv: Sequence[str] | None = None) -> AgentRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a local chat model directory")
    parser.add_argument("--turns", type=int, default=4, help="turn budget (default 4)")
    parser.add_argument("--grace", action="store_true", help="a wrap-up turn at exhaustion")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args(argv)

    with block_network(), tempfile.TemporaryDirectory() as tmp:
        path: Path = args.model
        if path is None:
            print("No --model given: teaching a tiny char-level model one demonstration.")
            path = Path(tmp)
            teach_tiny_model(path, args.turns)
        model = LocalChatModel.from_pretrained(
            path, local_files_only=True, max_new_tokens=args.max_new_tokens
        )
        run = run_agent(
            model,
            [add],
            TASK,
            Budget(turns=args.turns),
            exhaustion="grace" if args.grace else "end",
            judge=lambda text: "42" in text,
            conversation_id="local-loop-1",  # the chat session: a backend groups traces by it
        )

    for message in run.messages:
        shown = message.content or ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        print(f"{message.role:>9}: {shown}")
    result = run.result
    print(
        f"\nstatus={result.status} turns={result.turns_used}/{args.turns} "
        f"mistakes={len(result.mistakes)} recoveries={len(result.recoveries)} "
        f"grace_turn={result.grace_turn}\noutput={run.output!r}"
    )
    return run


if __name__ == "__main__":
    main()
