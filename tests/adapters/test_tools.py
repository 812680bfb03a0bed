"""Tools from typed functions: derived JSON schemas and validation of the model's arguments."""

from __future__ import annotations

import enum
from typing import Literal

import pytest
from budgetmix import MistakeKind
from budgetmix.adapters import Tool, Toolbox, ToolCallRequest, tool
from budgetmix.adapters.tools import PreparedCall, ToolArgumentError, render_tool_result
from budgetmix.exceptions import ConfigError


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


def weather(
    city: str,
    days: int = 1,
    unit: Unit = Unit.CELSIUS,
    detail: Literal["short", "long"] = "short",
    hours: list[int] | None = None,
    limits: dict[str, float] | None = None,
    metric: bool = True,
) -> dict[str, object]:
    """Forecast for a city.

    More prose that is not part of the description.

    Args:
        city: the city name,
            as the user wrote it.
        days: how many days ahead.
    """
    return {"city": city, "days": days, "unit": unit.value}


def _call(name: str, arguments: str) -> ToolCallRequest:
    return ToolCallRequest(id="c1", name=name, arguments=arguments)


def test_schema_from_type_hints_and_docstring() -> None:
    spec = Tool.from_function(weather).spec
    assert spec.name == "weather"
    assert spec.description == "Forecast for a city."
    schema = spec.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["city"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["city"] == {
        "type": "string",
        "description": "the city name, as the user wrote it.",
    }
    assert props["days"] == {"type": "integer", "default": 1, "description": "how many days ahead."}
    assert props["detail"]["enum"] == ["short", "long"]
    assert props["metric"] == {"type": "boolean", "default": True}
    assert {"type": "array", "items": {"type": "integer"}} in props["hours"]["anyOf"]
    assert {"type": "null"} in props["hours"]["anyOf"]
    assert props["unit"]["$ref"] == "#/$defs/Unit"
    assert schema["$defs"]["Unit"]["enum"] == ["celsius", "fahrenheit"]
    assert "title" not in schema and "title" not in props["city"]


def test_a_parameter_named_title_is_kept() -> None:
    def post(title: str) -> str:
        """Post."""
        return title

    assert "title" in Tool.from_function(post).spec.parameters["properties"]


def test_validation_converts_enums_and_fills_defaults() -> None:
    prepared = Toolbox([weather]).prepare(
        _call("weather", '{"city": "Oslo", "unit": "fahrenheit"}')
    )
    assert isinstance(prepared, PreparedCall)
    assert prepared.arguments["unit"] is Unit.FAHRENHEIT
    assert prepared.arguments["days"] == 1
    assert prepared.invoke() == {"city": "Oslo", "days": 1, "unit": "fahrenheit"}


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ('{"city": "Oslo"', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"days": 2}', "city: Field required"),
        ('{"city": "Oslo", "days": "2"}', "days: Input should be a valid integer"),
        ('{"city": "Oslo", "detail": "medium"}', "detail: Input should be 'short' or 'long'"),
        ('{"city": "Oslo", "colour": "red"}', "colour: Extra inputs are not permitted"),
    ],
)
def test_bad_arguments_are_invalid_tool_arguments(arguments: str, fragment: str) -> None:
    outcome = Toolbox([weather]).prepare(_call("weather", arguments))
    assert isinstance(outcome, ToolArgumentError)
    assert outcome.kind is MistakeKind.INVALID_TOOL_ARGUMENTS
    assert fragment in outcome.message


def test_lenient_tools_coerce() -> None:
    lenient = Tool.from_function(weather, strict=False)
    prepared = lenient.validate(_call("weather", '{"city": "Oslo", "days": "2"}'))
    assert isinstance(prepared, PreparedCall) and prepared.arguments["days"] == 2


def test_empty_arguments_mean_none() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    assert isinstance(Toolbox([ping]).prepare(_call("ping", "")), PreparedCall)


def test_unknown_tool() -> None:
    outcome = Toolbox([weather]).prepare(_call("forecast", "{}"))
    assert isinstance(outcome, ToolArgumentError)
    assert outcome.kind is MistakeKind.UNKNOWN_TOOL
    assert "Available tools: weather" in outcome.message


def test_decorator_forms_and_async_tools() -> None:
    @tool
    def plain(x: int) -> int:
        """Plain."""
        return x

    @tool(name="renamed", description="Custom.")
    async def fancy(x: int) -> int:
        return x

    assert isinstance(plain, Tool) and not plain.is_async
    assert fancy.name == "renamed" and fancy.spec.description == "Custom." and fancy.is_async
    assert Toolbox([plain, fancy]).specs == (plain.spec, fancy.spec)


def test_untyped_parameters_accept_anything() -> None:
    def echo(value):  # type: ignore[no-untyped-def]
        """Echo."""
        return value

    prepared = Toolbox([echo]).prepare(_call("echo", '{"value": [1, "a"]}'))
    assert isinstance(prepared, PreparedCall) and prepared.arguments["value"] == [1, "a"]


def test_functions_that_cannot_be_described_are_refused() -> None:
    def variadic(*args: int) -> int:
        return 0

    def positional(a: int, /) -> int:
        return a

    with pytest.raises(ConfigError, match=r"\*args"):
        Tool.from_function(variadic)
    with pytest.raises(ConfigError, match="positional-only"):
        Tool.from_function(positional)
    with pytest.raises(ConfigError, match="tool name"):
        Tool.from_function(weather, name="has space")
    with pytest.raises(ConfigError, match="two tools"):
        Toolbox([weather, weather])


def test_results_are_rendered_for_the_model() -> None:
    assert render_tool_result("text") == "text"
    assert render_tool_result({"a": [1, 2]}) == '{"a":[1,2]}'
    assert render_tool_result(Unit.CELSIUS) == '"celsius"'
    assert render_tool_result(object()).startswith("<object object")
