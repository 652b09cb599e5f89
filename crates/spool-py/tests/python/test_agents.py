"""Python agents on the test scheduler: async def, children, deadlines, cancellation,
priorities, tenants, timers, and what an agent may not yield or return."""

import pytest

import spool
from spool.testing import TestScheduler


@spool.agent("leaf")
def leaf(cx, n: int, wait: float = 0.0):
    if wait:
        yield cx.sleep(wait)
    if n < 0:
        raise RuntimeError(f"bad {n}")
    answer = yield cx.llm(prompt=f"leaf {n}")
    return {"n": n, "answer": answer.text, "at": cx.now()}


@spool.agent("fan")
async def fan(cx, k: int):
    # Child i sleeps k - i seconds: the last spawned ends first.
    children = [cx.spawn("leaf", {"n": i, "wait": float(k - i)}) for i in range(k)]
    first_id, first = await cx.join_any(children)
    rest = await cx.join_all([c for c in children if c.id != first_id])
    return {"first": [first_id, first], "rest": rest}


@spool.agent("one")
def one(cx, n: int):
    child = cx.spawn("leaf", {"n": n})
    try:
        return {"child": child.id, "result": (yield child)}
    except spool.TaskError as e:
        return {"child": child.id, "kind": e.kind, "error": str(e)}


@spool.agent("slow")
def slow(cx, seconds: float = 10.0):
    yield cx.sleep(seconds)
    return {"woke": cx.now()}


def scheduler(**options):
    s = TestScheduler(agents=[leaf, fan, one, slow], **options)
    s.mock_llm(lambda payload: {"text": payload["prompt"]})
    return s


def running_order(s):
    """The tasks in the order they were first scheduled."""
    order = []
    for event in s.trace_events():
        if "Ready -> Running" in event:
            task = int(event.split("task ", 1)[1].split(":", 1)[0])
            if task not in order:
                order.append(task)
    return order


def test_an_async_agent_spawns_and_joins_children_in_virtual_time():
    s = scheduler()
    task = s.submit("fan", k=3)
    assert s.run_until_quiet() == 3.0
    # Children are tasks 2, 3, 4; task 4 slept 1 s and ended first.
    assert s.result(task) == {
        "first": [4, {"n": 2, "answer": "leaf 2", "at": 1.0}],
        "rest": [{"n": 0, "answer": "leaf 0", "at": 3.0}, {"n": 1, "answer": "leaf 1", "at": 2.0}],
    }
    events = s.trace_events()
    assert [e for e in events if "spawned" in e or "child task" in e] == [
        "#4 0.000s task 2: New -> Ready (spawned by task 1)",
        "#5 0.000s task 3: New -> Ready (spawned by task 1)",
        "#6 0.000s task 4: New -> Ready (spawned by task 1)",
        "#19 1.000s task 1: Waiting(3 children) -> Ready (child task 4 ended)",
        "#28 2.000s task 1: Waiting(2 children) -> Waiting(1 child) (child task 3 ended)",
        "#35 3.000s task 1: Waiting(1 child) -> Ready (child task 2 ended)",
    ]


def test_yielding_a_child_gives_its_result_or_raises_its_error():
    s = scheduler()
    ok = s.submit("one", n=7)
    bad = s.submit("one", n=-1)
    s.run_until_quiet()
    assert s.result(ok) == {"child": 3, "result": {"n": 7, "answer": "leaf 7", "at": 0.0}}
    assert s.result(bad) == {"child": 4, "kind": "failed", "error": "RuntimeError: bad -1"}


def test_a_task_past_its_deadline_fails_with_deadline_exceeded():
    s = scheduler()
    late = s.submit("slow", deadline=5.0)
    on_time = s.submit("slow", seconds=4.0, deadline=5.0)
    s.step_until_idle()
    s.advance(4.0)
    assert s.result(on_time) == {"woke": 4.0}
    assert s.state(late).state == "waiting"
    s.advance(1.0)
    assert s.now == 5.0
    with pytest.raises(spool.DeadlineExceeded) as raised:
        s.result(late)
    assert raised.value.kind == "deadline_exceeded"
    assert str(raised.value) == "task 1 missed its deadline while running"


def test_a_canceled_task_and_its_children_end_canceled():
    s = scheduler()
    parent = s.submit("fan", k=2)
    s.step_until_idle()
    s.cancel(parent)
    s.run_until_quiet()
    for task in (parent, 2, 3):
        assert s.state(task).state == "canceled"
    assert s.state(parent) == ("canceled", "canceled on request")
    with pytest.raises(spool.TaskCanceled) as raised:
        s.result(parent)
    assert raised.value.kind == "canceled"
    assert s.sent() == []


def test_priorities_order_the_ready_queue_under_the_priority_policy():
    s = scheduler(policy="priority")
    for n, priority in enumerate(["low", "normal", "high", "critical"]):
        s.submit("leaf", n=n, priority=priority)
    s.run_until_quiet()
    assert running_order(s) == [4, 3, 2, 1]
    assert s.sent() == [(4, 1, "llm"), (3, 1, "llm"), (2, 1, "llm"), (1, 1, "llm")]

    fifo = scheduler(policy="fifo")
    for n, priority in enumerate(["low", "normal", "high", "critical"]):
        fifo.submit("leaf", n=n, priority=priority)
    fifo.run_until_quiet()
    assert running_order(fifo) == [1, 2, 3, 4]


def test_tenants_share_the_running_slots_fairly():
    def run(policy):
        s = TestScheduler(agents=[leaf], policy=policy, limits=spool.Limits(max_running=2))
        s.mock("llm", lambda payload: {"text": payload["prompt"]}, latency=1.0)
        for n in range(4):
            s.submit("leaf", n=n, tenant="a")
        for n in range(2):
            s.submit("leaf", n=10 + n, tenant="b")
        s.run_until_quiet()
        return [task for task, _, _ in s.sent()]

    # Tasks 1 and 2 (tenant a) take both free slots when submitted; after that each
    # free slot goes to the tenant with fewer tasks running: b, a, b, a.
    assert run("fair-share") == [1, 2, 5, 3, 6, 4]
    assert run("fifo") == [1, 2, 3, 4, 5, 6]


def test_sleep_and_now_follow_virtual_time():
    s = scheduler()
    task = s.submit("slow", seconds=2.5)
    s.step_until_idle()
    assert s.now == 0.0
    s.advance(2.0)
    assert s.state(task) == ("waiting", "timer")
    s.advance(0.5)
    assert s.result(task) == {"woke": 2.5}
    assert s.trace_events()[-3:] == [
        "#4 2.500s task 1: Waiting(timer) -> Ready (timer fired)",
        "#5 2.500s task 1: Ready -> Running (scheduled)",
        "#6 2.500s task 1: Running -> Completed(ok) (returned)",
    ]


NOT_A_STEP = ("an agent yields what its cx makes (cx.llm, cx.tool, cx.confirm, cx.all, "
              "cx.sleep, a child from cx.spawn), not a value of type `{}`")


def test_yielding_a_non_step_throws_type_error_into_the_agent():
    @spool.agent("catches")
    def catches(cx):
        try:
            yield 42
        except TypeError as e:
            return str(e)

    @spool.agent("lets_through")
    def lets_through(cx):
        yield "x"

    s = TestScheduler(agents=[catches, lets_through])
    caught = s.submit("catches")
    failed = s.submit("lets_through")
    s.run_until_quiet()
    assert s.result(caught) == NOT_A_STEP.format("int")
    error = s.state(failed).detail
    assert type(error) is spool.TaskError
    assert error.kind == "failed"
    assert str(error) == "TypeError: " + NOT_A_STEP.format("str")


def test_returning_a_non_json_value_fails_the_task():
    @spool.agent("returns_a_set")
    def returns_a_set(cx):
        yield cx.sleep(1)
        return {1, 2}

    s = TestScheduler(agents=[returns_a_set])
    task = s.submit("returns_a_set")
    s.run_until_quiet()
    error = s.state(task).detail
    assert error.kind == "failed"
    assert str(error) == (
        "the agent returned a value that is not JSON: TypeError: value at `/` is of type `set`, which "
        "is not JSON (use dict, list, str, int, float, bool, None, a dataclass or a pydantic model)")


def test_all_with_return_exceptions_puts_each_error_in_its_place():
    @spool.agent("gather")
    def gather(cx, keep: bool):
        steps = [cx.llm(prompt="a"), cx.tool("flaky", {}), cx.llm(prompt="b")]
        try:
            answers = yield cx.all(steps, return_exceptions=keep)
        except spool.RequestError as e:
            return {"raised": [type(e).__name__, e.kind, str(e)]}
        return [[type(a).__name__, a.kind, str(a)] if isinstance(a, Exception) else a for a in answers]

    s = TestScheduler(agents=[gather])
    s.mock_llm(lambda payload: {"text": payload["prompt"]})
    s.mock_tool("flaky", [ValueError("broken"), ValueError("broken")])
    kept = s.submit("gather", keep=True)
    raised = s.submit("gather", keep=False)
    s.run_until_quiet()
    error = ["RequestError", "failed", "the executor failed: ValueError: broken"]
    assert s.result(kept) == [{"text": "a"}, error, {"text": "b"}]
    assert s.result(raised) == {"raised": error}


def test_patched_is_true_for_a_run_started_by_the_new_code():
    @spool.agent("patchy")
    def patchy(cx):
        prompt = "new" if cx.patched("new-prompt") else "old"
        return (yield cx.llm(prompt=prompt)).text

    s = TestScheduler(agents=[patchy])
    s.mock_llm(lambda payload: {"text": payload["prompt"]})
    task = s.submit("patchy")
    s.run_until_quiet()
    assert s.result(task) == "new"
