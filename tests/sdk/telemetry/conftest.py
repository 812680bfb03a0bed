"""Fixtures shared by the telemetry tests: a clean OTLP environment and handles closed after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from budgetmix.telemetry import OTLPReceiver, TracingHandle

# What the OTLP exporters read from the environment; a developer's own settings must not
# redirect, authenticate, compress or slow down the loopback exports under test.
_OTLP_SETTINGS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_RESOURCE_ATTRIBUTES",
)


@pytest.fixture
def otlp_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No stray OTLP settings from the environment; loopback never through a proxy."""
    for name in _OTLP_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def receiver(otlp_env: None) -> Iterator[OTLPReceiver]:
    """A started loopback OTLP receiver."""
    with OTLPReceiver() as rx:
        yield rx


@pytest.fixture
def handles() -> Iterator[list[TracingHandle]]:
    """Handles to shut down after the test, whatever happens (shutdown is idempotent)."""
    made: list[TracingHandle] = []
    yield made
    for handle in made:
        handle.shutdown()
