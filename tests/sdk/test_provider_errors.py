"""The one error-mapping boundary: what a provider call's final failure becomes, and what
the turn records for it (nothing sent: no provider mistake, no charge)."""

from __future__ import annotations

import json

import pytest
from budgetmix import (
    Budget,
    BudgetController,
    BudgetmixError,
    ConfigError,
    MistakeKind,
    ProviderError,
    ResponseFormatError,
    RetryPolicy,
)
from budgetmix.accounting import AccountingPolicy
from budgetmix.provider_errors import map_provider_error, nothing_sent


class APIStatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status} for key sk-test-DEADBEEFdeadbeef0123456789abcdef")
        self.status_code = status


class ResponseValidationError(Exception):
    """Named like the SDKs' own validation error of a body."""


def _lone_surrogate_error() -> UnicodeEncodeError:
    try:
        "\ud800".encode()
    except UnicodeEncodeError as exc:
        return exc
    raise AssertionError("unreachable")


def _json_error() -> ValueError:
    try:
        json.loads("<html>gateway</html>")
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("exc", "kind", "status", "retryable", "text"),
    [
        (APIStatusError(503), ProviderError, 503, True, "provider call failed"),
        (APIStatusError(400), ProviderError, 400, False, "provider call failed"),
        (TimeoutError(), ProviderError, None, True, "provider call failed"),
        (_json_error(), ResponseFormatError, None, False, "could not be read"),
        (RecursionError(), ResponseFormatError, None, False, "nests too deep"),
        (ResponseValidationError(), ResponseFormatError, None, False, "could not be read"),
        (_lone_surrogate_error(), ConfigError, None, False, "nothing was sent"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else repr(v),
)
def test_each_failure_maps_to_one_budgetmix_error(
    exc: BaseException, kind: type, status: int | None, retryable: bool, text: str
) -> None:
    error = map_provider_error(exc)
    assert type(error) is kind and text in str(error)
    assert str(error).startswith(type(exc).__name__)
    assert "sk-test" not in str(error)  # the provider's message is never quoted
    if isinstance(error, ProviderError):
        assert error.status_code == status and error.retryable is retryable
    assert nothing_sent(error) is (kind is ConfigError)


def test_a_budgetmix_error_passes_unchanged() -> None:
    for error in (ProviderError("x"), ResponseFormatError("y"), ConfigError("z")):
        assert map_provider_error(error) is error


def test_a_request_that_cannot_be_encoded_is_no_provider_mistake_and_no_charge() -> None:
    c = BudgetController(Budget(turns=3), retry=RetryPolicy(max_attempts=1))
    with c.episode() as ep:
        turn = ep.begin_turn()
        with pytest.raises(ConfigError, match="nothing was sent") as info:
            turn.call(lambda: "\ud800".encode())
        assert isinstance(info.value.__cause__, UnicodeEncodeError)
        assert ep.mistakes == [] and ep.state.used["turns"] == 0
        assert turn.call(lambda: "ok") == "ok"  # charged again before it is sent
        assert ep.state.used["turns"] == 1


def test_nothing_sent_is_given_back_even_when_failed_requests_count() -> None:
    counting = AccountingPolicy(count_failed_requests=True)
    c = BudgetController(Budget(turns=3), accounting=counting)
    with c.episode() as ep:
        turn = ep.begin_turn()
        with pytest.raises(ConfigError):
            turn.call(lambda: "\ud800".encode())
        assert ep.state.used["turns"] == 0
        with pytest.raises(ProviderError):
            turn.call(lambda: json.loads("not json"))
        assert ep.state.used["turns"] == 1  # sent and failed: counted
        assert [m.kind for m in ep.mistakes] == [MistakeKind.PROVIDER_ERROR]


def test_an_unreadable_body_is_a_response_format_error_recorded_as_provider_error() -> None:
    c = BudgetController(Budget(turns=3), retry=RetryPolicy(max_attempts=1))
    with c.episode() as ep, pytest.raises(ResponseFormatError) as info:
        ep.begin_turn().call(lambda: json.loads("<html>gateway</html>"))
    assert isinstance(info.value, BudgetmixError)
    assert isinstance(info.value.__cause__, ValueError)
    assert [(m.kind, m.detail) for m in ep.mistakes] == [
        (MistakeKind.PROVIDER_ERROR, "JSONDecodeError")
    ]
    assert ep.state.used["turns"] == 0


async def test_the_async_call_maps_the_same_way() -> None:
    c = BudgetController(Budget(turns=3), retry=RetryPolicy(max_attempts=1))

    async def unencodable() -> bytes:
        return "\ud800".encode()

    with c.episode() as ep, pytest.raises(ConfigError, match="nothing was sent"):
        await ep.begin_turn().acall(unencodable)
    assert ep.mistakes == [] and ep.state.used["turns"] == 0
