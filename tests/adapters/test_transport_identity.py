"""Which episode a request through the HTTP transport charges (the rule in
:mod:`budgetmix.adapters._attribution`), against what frameworks do: rewrite their first
user message every turn (smolagents), run agents with the same prompt concurrently (in
asyncio tasks and in threads), send from a worker thread that lost the context
(LiteLLM-style), or send with nothing to attribute the request by."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from _provider_fakes import make_rig
from budgetmix import BudgetExhausted, ConfigError
from budgetmix.adapters.http import (
    CONVERSATION_HEADER,
    DEFAULT_CONVERSATION,
    AsyncBudgetTransport,
    BudgetTransport,
)
from budgetmix.adapters.testing import Reply

openai = pytest.importorskip("openai")

PROMPT = [{"role": "system", "content": "agent"}, {"role": "user", "content": "solve it"}]


def sync_client(t: Any) -> Any:
    return openai.OpenAI(
        api_key="t", base_url="http://f.test/v1", http_client=httpx.Client(transport=t)
    )


def async_client(t: Any) -> Any:
    return openai.AsyncOpenAI(
        api_key="t", base_url="http://f.test/v1", http_client=httpx.AsyncClient(transport=t)
    )


def rewritten(turn: int) -> list[dict[str, Any]]:
    """The history smolagents sends on ``turn``: each error appended to the first user
    message, so its opening changes every turn."""
    errors = "".join(f"\nError {i}: bad code" for i in range(turn))
    return [PROMPT[0], {"role": "user", "content": "solve it" + errors}]


def run_rewriting(client: Any, turns: int) -> int:
    """Send until refused; how many requests were answered."""
    for turn in range(turns):
        try:
            client.chat.completions.create(model="gpt-4o", messages=rewritten(turn))
        except BudgetExhausted:
            return turn
    return turns


@pytest.mark.parametrize("bound", [True, False], ids=["bound", "unbound"])
def test_rewriting_the_first_message_keeps_one_budget(bound: bool) -> None:
    rig = make_rig(turns=3)
    t = BudgetTransport(rig.net, rig.controller)
    client = sync_client(t)
    if bound:
        with rig.controller.episode() as ep:
            assert run_rewriting(client, 10) == 3
        assert t.episodes == {}
    else:
        assert run_rewriting(client, 10) == 3
        ep = t.episodes[DEFAULT_CONVERSATION]
    assert rig.net.count == 3  # 3 turns reached the server, not one per rewritten opening
    assert ep.state.used["turns"] == 3


async def test_concurrent_same_prompt_runs_in_asyncio_tasks_keep_their_own_budgets() -> None:
    rig = make_rig(turns=2)
    t = AsyncBudgetTransport(rig.net, rig.controller)
    client = async_client(t)

    async def run() -> tuple[Any, int]:
        sent = 0
        async with rig.controller.episode() as ep:

            async def step() -> None:  # the framework's own task: it inherits the context
                await client.chat.completions.create(model="gpt-4o", messages=PROMPT)

            for _ in range(4):
                try:
                    await asyncio.create_task(step())
                except BudgetExhausted:
                    break
                sent += 1
                await asyncio.sleep(0)  # interleave the two runs
        return ep, sent

    (a, sent_a), (b, sent_b) = await asyncio.gather(run(), run())
    assert (sent_a, sent_b) == (2, 2) and rig.net.count == 4
    assert a.id != b.id and a.state.used["turns"] == b.state.used["turns"] == 2
    assert t.episodes == {}


def test_concurrent_same_prompt_runs_in_threads_keep_their_own_budgets() -> None:
    rig = make_rig(turns=2)
    t = BudgetTransport(rig.net, rig.controller)
    client = sync_client(t)
    barrier = threading.Barrier(2)
    sent: dict[str, int] = {}

    def run(name: str) -> None:
        with rig.controller.episode(name=name):
            barrier.wait()  # both episodes open at once
            count = 0
            for _ in range(4):
                try:
                    client.chat.completions.create(model="gpt-4o", messages=PROMPT)
                except BudgetExhausted:
                    break
                count += 1
            sent[name] = count
            barrier.wait()

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert sent == {"a": 2, "b": 2} and rig.net.count == 4
    assert t.episodes == {}


def test_a_worker_thread_with_the_copied_context_charges_its_episode() -> None:
    rig = make_rig(turns=3)
    t = BudgetTransport(rig.net, rig.controller)
    client = sync_client(t)

    def call() -> Any:
        return client.chat.completions.create(model="gpt-4o", messages=PROMPT)

    with rig.controller.episode() as a, rig.controller.episode() as b:
        with ThreadPoolExecutor(1) as pool:
            pool.submit(contextvars.copy_context().run, call).result()
        assert (a.state.used["turns"], b.state.used["turns"]) == (0, 1)  # the innermost


def test_a_worker_thread_that_lost_the_context_charges_the_one_open_episode() -> None:
    # LiteLLM-style: the request is sent from a pool thread without the caller's context
    rig = make_rig(turns=2)
    t = BudgetTransport(rig.net, rig.controller)
    client = sync_client(t)

    def call() -> Any:
        return client.chat.completions.create(model="gpt-4o", messages=PROMPT)

    with rig.controller.episode() as ep, ThreadPoolExecutor(1) as pool:
        call()  # seen bound once, here
        pool.submit(call).result()  # no context there: the one open episode it has seen
        with pytest.raises(BudgetExhausted):
            pool.submit(call).result()
    assert ep.state.used["turns"] == 2 and rig.net.count == 2
    assert t.episodes == {}  # no budget of its own for the pool thread


def test_a_lost_context_with_several_open_episodes_is_refused_unsent() -> None:
    rig = make_rig(turns=5)
    t = BudgetTransport(rig.net, rig.controller)
    client = sync_client(t)

    def call() -> Any:
        return client.chat.completions.create(model="gpt-4o", messages=PROMPT)

    with rig.controller.episode() as a, ThreadPoolExecutor(1) as pool:
        call()
        with rig.controller.episode() as b:
            call()
            with pytest.raises(ConfigError, match="which of 2 open episodes"):
                pool.submit(call).result()
            named = client.with_options(default_headers={CONVERSATION_HEADER: a.id})
            pool.submit(named.chat.completions.create, model="gpt-4o", messages=PROMPT).result()
        assert (a.state.used["turns"], b.state.used["turns"]) == (2, 1)
    assert rig.net.count == 3  # the refused one was not sent


def test_unattributable_requests_are_shared_with_a_warning_or_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = make_rig([Reply.say("x")] * 3, turns=5)
    shared = sync_client(BudgetTransport(rig.net, rig.controller))
    shared.chat.completions.create(model="gpt-4o", messages=PROMPT)
    assert "outside any episode" in caplog.text and DEFAULT_CONVERSATION in caplog.text
    refusing = sync_client(BudgetTransport(rig.net, rig.controller, unattributed="refuse"))
    with pytest.raises(ConfigError, match="cannot attribute this request"):
        refusing.chat.completions.create(model="gpt-4o", messages=PROMPT)
    unbudgeted = sync_client(BudgetTransport(rig.net, None))  # None: current episode only
    unbudgeted.chat.completions.create(model="gpt-4o", messages=PROMPT)
    assert rig.net.count == 2
    assert rig.fake.requests[-1].json["messages"] == PROMPT  # no notice: not budgeted
    with pytest.raises(ConfigError, match="unattributed"):
        BudgetTransport(None, rig.controller, unattributed="fresh")  # type: ignore[arg-type]


def test_responses_chained_by_previous_response_id_find_their_episode() -> None:
    rig = make_rig(turns=5)
    client = sync_client(BudgetTransport(rig.net, rig.controller))
    with rig.controller.episode() as a, ThreadPoolExecutor(1) as pool:
        first = client.responses.create(model="gpt-4o", input="start")
        with rig.controller.episode() as b:
            client.responses.create(model="gpt-4o", input="other")
            # from a thread without the context, two episodes open: the chain tells
            pool.submit(
                client.responses.create, model="gpt-4o", input="go", previous_response_id=first.id
            ).result()
        assert (a.state.used["turns"], b.state.used["turns"]) == (2, 1)


def test_a_streamed_responses_response_is_chained_too() -> None:
    rig = make_rig(turns=5)
    client = sync_client(BudgetTransport(rig.net, rig.controller))
    with rig.controller.episode() as a, ThreadPoolExecutor(1) as pool:
        events = list(client.responses.create(model="gpt-4o", input="start", stream=True))
        first_id = events[-1].response.id
        with rig.controller.episode() as b:
            client.responses.create(model="gpt-4o", input="other")
            pool.submit(
                client.responses.create, model="gpt-4o", input="go", previous_response_id=first_id
            ).result()
        assert (a.state.used["turns"], b.state.used["turns"]) == (2, 1)
