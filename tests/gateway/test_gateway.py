"""The gateway budgets unmodified SDK clients through base_url alone (uvicorn, loopback)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from _gateway import GatewayThread
from budgetmix import Budget
from budgetmix.adapters.testing import FakeLLMServer, Reply
from budgetmix.gateway import GatewayConfig
from budgetmix.gateway.scopes import conversation_key, tenant_key, tenant_of
from budgetmix.stores import MemoryStore

ADMIN = "admin-token-0123456789"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def gateway(fake: FakeLLMServer, store: MemoryStore | None = None, **kw: Any) -> GatewayThread:
    kw.setdefault("conversation", Budget(turns=2))
    config = GatewayConfig(upstream=fake.root_url, admin_token=ADMIN, **kw)
    return GatewayThread(config, store=store if store is not None else MemoryStore())


def conv(name: str) -> dict[str, str]:
    return {"x-budgetmix-conversation": name}


def chat(gw: GatewayThread, key: str = "sk-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)


def test_openai_chat_is_budgeted_per_conversation_with_the_notice(fake: FakeLLMServer) -> None:
    with gateway(fake) as gw:
        client = chat(gw)
        texts = [
            client.chat.completions.create(model="m", messages=USER, extra_headers=conv("a"))
            .choices[0].message.content
            for _ in range(3)
        ]
        other = client.chat.completions.create(model="m", messages=USER, extra_headers=conv("b"))
    assert texts[:2] == ["done", "done"]
    assert texts[2] is not None and "budget exhausted on turns" in texts[2]
    assert other.choices[0].message.content == "done"  # conversation b has its own budget
    sent = fake.model_requests()
    assert len(sent) == 3  # the refused turn never went upstream
    assert sent[1].json["messages"][-1]["content"] == "Budget (v1): turn 2 of 2, the final turn."
    assert "x-budgetmix-conversation" not in sent[0].headers  # budgetmix's own header


def test_a_stream_is_passed_on_and_its_usage_charged(fake: FakeLLMServer) -> None:
    store = MemoryStore()
    fake.push(Reply.say("streamed words", input_tokens=7, output_tokens=5))
    with gateway(fake, store) as gw:
        stream = chat(gw).chat.completions.create(
            model="m", messages=USER, stream=True, extra_headers=conv("s")
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "streamed words"
    record = store.read(conversation_key(tenant_of({"authorization": "Bearer sk-a"}, None), "s"))
    assert record is not None
    assert record.used["turns"] == 1 and record.used["total_tokens"] == 12


def test_responses_previous_response_id_continues_its_conversation(fake: FakeLLMServer) -> None:
    with gateway(fake, unattributed="refuse") as gw:
        client = chat(gw)
        first = client.responses.create(model="m", input="hi", extra_headers=conv("chain"))
        stream = client.responses.create(
            model="m", input="again", previous_response_id=first.id, stream=True
        )
        events = list(stream)
        second_id = next(e.response.id for e in events if e.type == "response.completed")
        third = client.responses.create(model="m", input="more", previous_response_id=second_id)
        with pytest.raises(openai.BadRequestError, match="name the conversation"):
            client.responses.create(model="m", input="unattributed")
    assert "budget exhausted on turns" in third.output_text  # 2 turns: the chain's third
    assert len(fake.model_requests()) == 2


def test_anthropic_messages_exhaustion_as_an_error(fake: FakeLLMServer) -> None:
    with gateway(fake, on_exhausted="error") as gw:
        client = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant", max_retries=3)
        for _ in range(2):
            client.messages.create(model="c", max_tokens=8, messages=USER, extra_headers=conv("x"))
        with pytest.raises(anthropic.RateLimitError, match="budget exhausted on turns"):
            client.messages.create(model="c", max_tokens=8, messages=USER, extra_headers=conv("x"))
    assert len(fake.model_requests()) == 2  # x-should-retry: false: the SDK did not retry


def test_a_tenant_budget_binds_across_conversations_and_not_other_tenants(
    fake: FakeLLMServer,
) -> None:
    with gateway(fake, conversation=Budget(turns=10), tenant=Budget(turns=3)) as gw:
        a, b = chat(gw, "sk-tenant-a"), chat(gw, "sk-tenant-b")
        for name in ("1", "2", "3"):
            a.chat.completions.create(model="m", messages=USER, extra_headers=conv(name))
        refused = a.chat.completions.create(model="m", messages=USER, extra_headers=conv("4"))
        fine = b.chat.completions.create(model="m", messages=USER, extra_headers=conv("1"))
        own_b = httpx.get(gw.url + "/budgetmix/budget",
                          headers={"authorization": "Bearer sk-tenant-b", **conv("1")}).json()
    assert "budget exhausted on turns" in (refused.choices[0].message.content or "")
    assert fine.choices[0].message.content == "done"
    assert own_b["window"]["used"]["turns"] == 1  # b reads its own window: not a's three
    assert own_b["conversation"]["used"]["turns"] == 1


def test_admin_api_needs_its_token_and_grants_an_extension(fake: FakeLLMServer) -> None:
    store = MemoryStore()
    with gateway(fake, store) as gw:
        client = chat(gw)
        for _ in range(3):
            client.chat.completions.create(model="m", messages=USER, extra_headers=conv("g"))
        tenant = tenant_of({"authorization": "Bearer sk-a"}, None)
        path = f"{gw.url}/budgetmix/admin/tenants/{tenant}/conversations/g"
        assert httpx.get(path).status_code == 401
        assert httpx.get(path, headers={"authorization": "Bearer sk-a"}).status_code == 401
        admin = {"authorization": f"Bearer {ADMIN}"}
        assert httpx.get(path, headers=admin).json()["used"]["turns"] == 2
        assert httpx.post(path + "/grant", headers={"authorization": "Bearer x"},
                          json={"turns": 1}).status_code == 401
        bad = httpx.post(path + "/grant", headers=admin, json={"turns": -1})
        assert bad.status_code == 400 and "grant.turns" in bad.json()["error"]
        assert httpx.post(path + "/grant", headers=admin, json={"turns": 1}).status_code == 200
        after = client.chat.completions.create(model="m", messages=USER, extra_headers=conv("g"))
    assert after.choices[0].message.content == "done"
    assert len(fake.model_requests()) == 3


def test_bad_requests_are_clear_4xx_and_charge_nothing(fake: FakeLLMServer) -> None:
    store = MemoryStore()
    with gateway(fake, store, max_header_bytes=4096, max_body_bytes=4096) as gw:
        url = gw.url + "/v1/chat/completions"
        auth = {"authorization": "Bearer sk-a", **conv("bad")}
        cases = {
            "not json": (httpx.post(url, content=b"{nope", headers=auth), 400, "JSON object"),
            "a list": (httpx.post(url, json=[1], headers=auth), 400, "JSON object"),
            "messages": (httpx.post(url, json={"model": "m", "messages": 3}, headers=auth),
                         400, "messages"),
            "huge header": (httpx.post(url, json={}, headers={**auth, "x-big": "y" * 5000}),
                            431, "max_header_bytes"),
            "huge body": (httpx.post(url, content=b"x" * 5000, headers=auth), 413, "max_body"),
            "bad name": (httpx.post(url, json={"model": "m", "messages": USER},
                                    headers={**auth, "x-budgetmix-conversation": "a\tb"}),
                         400, "printable"),
        }
    for name, (response, status, words) in cases.items():
        assert response.status_code == status, name
        assert words in response.json()["error"]["message"], name
    assert fake.model_requests() == []
    tenant = tenant_of({"authorization": "Bearer sk-a"}, None)
    record = store.read(conversation_key(tenant, "bad"))
    assert record is None or record.used["turns"] == 0


def test_credentials_pass_through_and_never_reach_a_span_or_log(
    fake: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    secret = "sk-live-SECRET-0123456789abcdef"
    caplog.set_level(logging.DEBUG)
    config = GatewayConfig(upstream=fake.root_url, conversation=Budget(turns=1))
    with GatewayThread(config, store=MemoryStore(), tracer_provider=provider) as gw:
        client = chat(gw, secret)
        client.chat.completions.create(model="m", messages=USER, extra_headers=conv("t"))
        client.chat.completions.create(model="m", messages=USER, extra_headers=conv("t"))
    assert fake.model_requests()[0].headers["authorization"] == f"Bearer {secret}"
    spans = exporter.get_finished_spans()
    assert {s.name for s in spans} >= {"invoke_agent budgetmix-gateway"}
    dumped = "".join(s.to_json() for s in spans) + caplog.text
    assert secret not in dumped and "SECRET" not in dumped


def test_an_idempotency_key_charges_a_retried_request_once(fake: FakeLLMServer) -> None:
    store = MemoryStore()
    with gateway(fake, store) as gw:
        client = chat(gw)
        for _ in range(2):
            client.chat.completions.create(
                model="m", messages=USER, extra_headers={**conv("i"), "idempotency-key": "r-1"}
            )
    tenant = tenant_of({"authorization": "Bearer sk-a"}, None)
    assert store.read(conversation_key(tenant, "i")).used["turns"] == 1  # type: ignore[union-attr]
    assert store.read(tenant_key(tenant, 86400)) is None  # no tenant budget configured


@pytest.mark.parametrize("fail_open", [False, True])
def test_the_store_down_fails_closed_unless_fail_open(
    fake: FakeLLMServer, fail_open: bool, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("redis", reason="the redis client is the budgetmix[redis] extra")
    from _servers import free_port
    from budgetmix.stores.redis import RedisStore

    down = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout=1.0)  # nothing listens
    config = GatewayConfig(upstream=fake.root_url, fail_open=fail_open)
    with GatewayThread(config, store=down) as gw:
        client = anthropic.Anthropic(base_url=gw.url, api_key="sk-ant", max_retries=0)
        if fail_open:
            reply = client.messages.create(model="c", max_tokens=8, messages=USER)
            assert reply.content[0].text == "done"
        else:
            with pytest.raises(anthropic.APIStatusError, match="budget store is unavailable") as e:
                client.messages.create(model="c", max_tokens=8, messages=USER)
            assert e.value.status_code == 503
    assert len(fake.model_requests()) == (1 if fail_open else 0)
    assert ("forwarding unbudgeted (fail_open)" in caplog.text) is fail_open


def test_a_responses_conversation_names_the_budget(fake: FakeLLMServer) -> None:
    store = MemoryStore()
    with gateway(fake, store) as gw:
        client = chat(gw)
        client.responses.create(model="m", input="hi", extra_body={"conversation": "conv_1"})
        client.responses.create(model="m", input="hi",
                                extra_body={"conversation": {"id": "conv_1"}})
    tenant = tenant_of({"authorization": "Bearer sk-a"}, None)
    assert store.read(conversation_key(tenant, "conv_1")).used["turns"] == 2  # type: ignore[union-attr]
    assert store.read(conversation_key(tenant, "default")) is None
