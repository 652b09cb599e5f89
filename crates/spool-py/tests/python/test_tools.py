"""Python tools: a raising tool is the task's typed error, schemas from type hints, and
arguments that do not fit thrown into the agent as InvalidArguments."""

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Literal, Optional

import pytest

import spool
from spool.testing import TestScheduler


@spool.tool
def weather(city: str, days: int = 1) -> dict:
    """The weather in a city.

    Days ahead, from today."""
    if city == "Atlantis":
        raise ValueError("no such city")
    return {"city": city, "days": days}


# The line the tool raises on, as the error's message names it.
RAISE_LINE = next(
    n for n, line in enumerate(Path(__file__).read_text().splitlines(), 1)
    if 'raise ValueError("no such city")' in line and "RAISE_LINE" not in line
)
WHERE = f"ValueError: no such city (test_tools.py:{RAISE_LINE} in weather)"


@spool.agent
def forecast(cx, city: str):
    return (yield cx.tool("weather", {"city": city}))


@spool.agent
def careful(cx):
    try:
        yield cx.tool("weather", {"town": "Paris"})
    except spool.InvalidArguments as e:
        return {"caught": type(e).__name__, "kind": e.kind, "message": str(e)}
    return "not thrown"


@spool.agent
def careless(cx):
    return (yield cx.tool("weather", {"city": "Paris", "days": "two"}))


def check_raising_tool(state):
    assert state.state == "failed"
    error = state.detail
    assert type(error) is spool.TaskError
    assert isinstance(error, spool.SpoolError)
    assert error.kind == "request_failed"
    assert str(error) == f"a request failed: the executor failed: {WHERE}"
    assert error.details == {"error": {"Failed": {"message": WHERE}}}
    assert type(error.request_error) is spool.RequestError
    assert error.request_error.kind == "failed"
    # The same words as when it was thrown into the agent at its yield.
    assert str(error.request_error) == f"the executor failed: {WHERE}"


def test_a_raising_tool_fails_the_task_with_a_typed_error_in_the_test_scheduler():
    s = TestScheduler(agents=[forecast], tools=[weather])
    bad = s.submit("forecast", city="Atlantis")
    good = s.submit("forecast", city="Paris")
    s.run_until_quiet()
    check_raising_tool(s.state(bad))
    with pytest.raises(spool.TaskError) as raised:
        s.result(bad)
    assert raised.value.kind == "request_failed"
    assert s.result(good) == {"city": "Paris", "days": 1}


def test_a_raising_tool_fails_the_task_with_a_typed_error_in_the_runtime():
    with spool.Runtime(agents=[forecast], tools=[weather]) as rt:
        bad = rt.submit("forecast", city="Atlantis")
        good = rt.submit("forecast", city="Paris")
        rt.run_until_idle()
        check_raising_tool(rt.state(bad))
        assert rt.result(good) == {"city": "Paris", "days": 1}


def test_an_agent_that_catches_the_tool_error_goes_on():
    @spool.agent("forgiving")
    def forgiving(cx):
        try:
            yield cx.tool("weather", {"city": "Atlantis"})
        except spool.RequestError as e:
            return {"kind": e.kind, "message": str(e)}

    s = TestScheduler(agents=[forgiving], tools=[weather])
    task = s.submit("forgiving")
    s.run_until_quiet()
    assert s.result(task) == {"kind": "failed", "message": f"the executor failed: {WHERE}"}


def test_arguments_that_do_not_fit_are_thrown_into_the_agent():
    s = TestScheduler(agents=[careful, careless], tools=[weather])
    caught = s.submit("careful")
    uncaught = s.submit("careless")
    s.run_until_quiet()
    why = ("arguments of `weather` do not fit its schema: /city: required property is missing; "
           "/town: property is not allowed")
    assert s.result(caught) == {
        "caught": "InvalidArguments",
        "kind": "invalid_arguments",
        "message": f"invalid arguments: {why}",
    }
    error = s.state(uncaught).detail
    assert error.kind == "request_failed"
    assert type(error.request_error) is spool.InvalidArguments
    assert error.request_error.kind == "invalid_arguments"
    assert str(error.request_error) == (
        'invalid arguments: arguments of `weather` do not fit its schema: /days: expected an integer, got "two"')


def test_the_schema_comes_from_the_type_hints():
    assert weather.schema == {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1}},
        "required": ["city"],
        "additionalProperties": False,
        "description": "The weather in a city.",
    }
    assert weather.definition() == {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }


class Units(enum.Enum):
    C = "c"
    F = "f"


@dataclass
class Place:
    name: str
    lat: float


def test_the_schema_of_richer_hints():
    @spool.tool("plan")
    def plan(stops: List[Place], units: Units, mode: Literal["walk", "ride"] = "walk",
             notes: Optional[Dict[str, str]] = None, strict: bool = False) -> None:
        """Plans a trip."""

    assert plan.name == "plan"
    assert plan.schema == {
        "type": "object",
        "properties": {
            "stops": {"type": "array", "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "lat": {"type": "number"}},
                "required": ["name", "lat"],
                "additionalProperties": False,
            }},
            "units": {"enum": ["c", "f"]},
            "mode": {"enum": ["walk", "ride"], "default": "walk"},
            "notes": {"anyOf": [{"type": "object", "additionalProperties": {"type": "string"}},
                                {"type": "null"}], "default": None},
            "strict": {"type": "boolean", "default": False},
        },
        "required": ["stops", "units"],
        "additionalProperties": False,
        "description": "Plans a trip.",
    }
