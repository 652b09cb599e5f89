"""spool.testing: check_determinism passes for a deterministic workload and names the
first event where an agent reading a random number parts; the pytest fixture."""

import random
import re

import pytest

import spool
from spool.testing import TestScheduler, check_determinism


@spool.agent("steady")
def steady(cx, n: int):
    answer = yield cx.llm(prompt=f"step {n}")
    yield cx.sleep(n)
    return answer.text


@spool.agent("dice")
def dice(cx):
    yield cx.sleep(random.random())
    return "rolled"


def steady_workload(s):
    s.mock_llm(lambda payload: {"text": payload["prompt"]})
    for n in range(3):
        s.submit("steady", n=n)
    s.run_until_quiet()


def dice_workload(s):
    for _ in range(3):
        s.submit("dice")
    s.run_until_quiet()


def test_check_determinism_passes_a_deterministic_workload_and_returns_its_trace_hash():
    by_hand = TestScheduler(agents=[steady])
    steady_workload(by_hand)
    assert by_hand.result(3) == "step 2"
    assert check_determinism(steady_workload, agents=[steady]) == by_hand.trace_hash()
    assert check_determinism(steady_workload, runs=3, agents=[steady]) == by_hand.trace_hash()


def test_check_determinism_names_the_event_where_a_random_number_parts_the_runs():
    random.seed(1)
    with pytest.raises(AssertionError) as raised:
        check_determinism(dice_workload, agents=[dice])
    # Events 1 to 9 (submissions, polls, timers set) are the same in both runs; event
    # 10 is the first timer to fire, at a time (and maybe for a task) random chose.
    first, run1, run2 = str(raised.value).split("\n")
    assert first == "run 2 differs from run 1 at trace event 10:"
    assert re.fullmatch(r"  run 1: #10 0\.\d+s task [123]: Waiting\(timer\) -> Ready \(timer fired\)", run1)
    assert re.fullmatch(r"  run 2: #10 0\.\d+s task [123]: Waiting\(timer\) -> Ready \(timer fired\)", run2)
    assert run1[9:] != run2[9:]


def test_the_fixture_is_a_fresh_scheduler_of_every_registered_agent(spool_scheduler):
    assert isinstance(spool_scheduler, TestScheduler)
    assert spool_scheduler.now == 0.0
    assert spool_scheduler.trace() == ""
    spool_scheduler.mock_llm(lambda payload: {"text": payload["prompt"]})
    task = spool_scheduler.submit("steady", n=0)
    spool_scheduler.run_until_quiet()
    assert spool_scheduler.result(task) == "step 0"
    assert {"steady", "dice"} <= {a.name for a in spool.registered_agents()}
