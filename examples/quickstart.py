import json

import httpx
from budgetmix import Budget, BudgetController
from budgetmix.adapters.testing import FakeLLMServer, Reply

# The model: a local fake of an OpenAI-compatible server that asks for two searches,
# then answers. For a real one: httpx.Client(base_url=..., headers={"Authorization": ...})
fake = FakeLLMServer(
    [Reply.call("search", {"q": "answer"}), Reply.call("search", {"q": "proof"}), Reply.say("42")]
)
http = httpx.Client(base_url="http://fake-llm/v1", transport=fake.transport())


def search(q: str) -> str:
    return f"results for {q}"


controller = BudgetController(Budget(turns=5, tool_calls=8))
messages = [{"role": "user", "content": "What is the answer?"}]
with controller.episode(name="qa") as ep:
    for turn in ep.turns(model="my-model"):  # refused before sending once spent
        body = {"model": "my-model", "messages": turn.openai_chat(messages)}  # + the notice
        reply = http.post("/chat/completions", json=body).json()
        usage, message = reply["usage"], reply["choices"][0]["message"]
        turn.usage(input_tokens=usage["prompt_tokens"], output_tokens=usage["completion_tokens"])
        messages.append(message)  # your history never holds the notice
        if not message.get("tool_calls"):
            ep.finish(success=True, output=message["content"])
            break
        requests = message["tool_calls"]
        calls = ep.tool_batch([r["function"]["name"] for r in requests])  # pre-checked whole
        for call, request in zip(calls, requests, strict=True):
            result = call.run(search, **json.loads(request["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": request["id"], "content": result})
print(ep.result.status, ep.result.used["turns"], ep.result.final_output)
