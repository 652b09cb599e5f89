"""Tests of the research agent in virtual time: mocks for the model, the real search
tool (it is deterministic), exact traces. Run with ``pytest examples/python``."""

from __future__ import annotations

import pytest

import research
import spool
from spool.testing import TestScheduler, check_determinism

PLAN = {"content": "tide tables\nthe moon"}


def scheduler() -> TestScheduler:
    """A test scheduler of this example's agent and tool, whatever else is registered."""
    return TestScheduler(agents=[research.research], tools=[research.search])


def test_research_plans_searches_and_publishes_once_confirmed() -> None:
    s = scheduler()
    s.mock("llm", [PLAN], latency=1.5)
    task = s.submit("research", topic="tides")

    assert s.run_until_quiet() == 1.5
    (question,) = s.confirmations()
    assert (question.task, question.request, question.question) == (1, 4, "Publish 2 findings?")
    s.answer(question, True)
    s.run_until_quiet()

    assert s.result(task) == {
        "plan": "tide tables\nthe moon",
        "findings": [
            "The Moon's gravity pulls the ocean into two bulges, one on each side of Earth.",
            "Tides are the rise and fall of sea levels caused by the Moon and the Sun.",
        ],
        "published": True,
    }
    assert s.sent() == [(1, 1, "llm"), (1, 2, "tool:search"), (1, 3, "tool:search"), (1, 4, "confirm")]
    assert s.trace() == """\
#1 0.000s task 1: New -> Ready (submitted)
#2 0.000s task 1: Ready -> Running (scheduled)
#3 0.000s task 1: Running -> Waiting(llm) (1 request)
#4 1.500s task 1: Waiting(llm) -> Ready (answer to request 1)
#5 1.500s task 1: Ready -> Running (scheduled)
#6 1.500s task 1: Running -> Waiting(2 requests) (2 requests)
#7 1.500s task 1: Waiting(2 requests) -> Waiting(tool:search) (answer to request 2)
#8 1.500s task 1: Waiting(tool:search) -> Ready (answer to request 3)
#9 1.500s task 1: Ready -> Running (scheduled)
#10 1.500s task 1: Running -> Waiting(confirm) (1 request)
#11 1.500s task 1: Waiting(confirm) -> Ready (answer to request 4)
#12 1.500s task 1: Ready -> Running (scheduled)
#13 1.500s task 1: Running -> Completed(ok) (returned)
"""


def test_a_no_from_the_person_is_not_published() -> None:
    s = scheduler()
    s.mock_llm([PLAN])
    task = s.submit("research", topic="tides")
    s.run_until_quiet()
    (question,) = s.confirmations()
    s.answer(question, False)
    s.run_until_quiet()
    assert s.result(task)["published"] is False


def test_a_failed_search_fails_the_task_with_the_request_error() -> None:
    s = scheduler()
    s.mock_llm([PLAN])
    s.mock_tool("search", [["a hit"], RuntimeError("the index is offline")])
    task = s.submit("research", topic="tides")
    s.run_until_quiet()

    assert s.state(task).state == "failed"
    with pytest.raises(spool.TaskError) as raised:
        s.result(task)
    assert raised.value.kind == "request_failed"
    assert raised.value.request_error is not None
    assert raised.value.request_error.kind == "failed"
    assert str(raised.value.request_error) == "the executor failed: RuntimeError: the index is offline"
    assert s.confirmations() == []


def test_the_agent_is_deterministic() -> None:
    def workload(s: TestScheduler) -> None:
        s.mock("llm", [PLAN], latency=0.25)
        s.submit("research", topic="tides")
        s.run_until_quiet()
        for question in s.confirmations():
            s.answer(question, True)
        s.run_until_quiet()

    check_determinism(workload, runs=3, agents=[research.research], tools=[research.search])


def test_a_task_restored_at_its_question_asks_it_again_and_goes_on() -> None:
    s = scheduler()
    s.mock_llm([PLAN])
    task = s.submit("research", topic="tides")
    s.run_until_quiet()

    # The snapshot holds the task's input and answers; restored, the generator is run
    # again from them to the question it had asked, which goes out again (same number):
    # the model and the searches are not asked twice.
    restored = TestScheduler.restore(s.snapshot(), agents=[research.research], tools=[research.search])
    restored.run_until_quiet()
    (question,) = restored.confirmations()
    assert (question.task, question.request) == (task, 4)
    assert restored.sent() == [(1, 4, "confirm")]
    restored.answer(question, True)
    restored.run_until_quiet()
    assert restored.result(task)["published"] is True
