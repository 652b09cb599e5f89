"""The issue's example agent against scripted mocks: its exact trace and result."""

import spool
from spool.testing import TestScheduler


@spool.agent("research")
def research(cx, topic: str):
    plan = yield cx.llm(messages=[{"role": "user", "content": f"Plan: {topic}"}])
    hits = yield cx.all([cx.tool("search", {"q": q}) for q in plan.queries])
    ok = yield cx.confirm(f"Publish {len(hits)} findings?")
    return {"plan": plan.text, "published": ok}


# Every scheduling decision of one run, as `TestScheduler.trace()` says it: the plan,
# both searches sent at once and answered one after the other, the confirmation held
# for the test and answered, and the return.
EXPECTED_TRACE = """\
#1 0.000s task 1: New -> Ready (submitted)
#2 0.000s task 1: Ready -> Running (scheduled)
#3 0.000s task 1: Running -> Waiting(llm) (1 request)
#4 0.000s task 1: Waiting(llm) -> Ready (answer to request 1)
#5 0.000s task 1: Ready -> Running (scheduled)
#6 0.000s task 1: Running -> Waiting(2 requests) (2 requests)
#7 0.000s task 1: Waiting(2 requests) -> Waiting(tool:search) (answer to request 2)
#8 0.000s task 1: Waiting(tool:search) -> Ready (answer to request 3)
#9 0.000s task 1: Ready -> Running (scheduled)
#10 0.000s task 1: Running -> Waiting(confirm) (1 request)
#11 0.000s task 1: Waiting(confirm) -> Ready (answer to request 4)
#12 0.000s task 1: Ready -> Running (scheduled)
#13 0.000s task 1: Running -> Completed(ok) (returned)
"""


def scheduler():
    return TestScheduler(agents=[research])


def test_example_runs_with_its_exact_trace_and_result():
    s = scheduler()
    s.mock_llm([{"text": "check tide tables", "queries": ["tides brest", "tides cork"]}])
    s.mock_tool("search", ["hit brest", "hit cork"])
    task = s.submit("research", topic="tides")
    assert s.run_until_quiet() == 0.0

    (confirm,) = s.confirmations()
    assert (confirm.task, confirm.request, confirm.question) == (task, 4, "Publish 2 findings?")
    assert s.state(task).state == "waiting"
    s.answer(confirm, True)
    s.run_until_quiet()

    assert s.result(task) == {"plan": "check tide tables", "published": True}
    assert s.trace() == EXPECTED_TRACE
    assert s.sent() == [(1, 1, "llm"), (1, 2, "tool:search"), (1, 3, "tool:search"), (1, 4, "confirm")]


def test_example_sends_what_the_agent_asked():
    s = scheduler()
    asked = []

    def llm(payload):
        asked.append(("llm", payload))
        return {"text": "plan", "queries": ["a", "b", "c"]}

    def search(payload):
        asked.append(("search", payload))
        return f"hit {payload['q']}"

    s.mock_llm(llm)
    s.mock_tool("search", search)
    task = s.submit("research", {"topic": "tides"})
    s.run_until_quiet()
    (confirm,) = s.confirmations()
    assert confirm.question == "Publish 3 findings?"
    s.answer(confirm, False)
    s.run_until_quiet()

    assert s.result(task) == {"plan": "plan", "published": False}
    assert asked == [
        ("llm", {"messages": [{"role": "user", "content": "Plan: tides"}]}),
        ("search", {"q": "a"}),
        ("search", {"q": "b"}),
        ("search", {"q": "c"}),
    ]


def test_example_input_is_checked_against_its_type_hints():
    assert research.input_schema == {
        "type": "object",
        "properties": {"topic": {"type": "string"}},
        "required": ["topic"],
        "additionalProperties": False,
    }
