"""Testing Python agents in virtual time: spool's test scheduler, mocks, traces.

A :class:`TestScheduler` runs agents one poll at a time with no threads and no real
clock: requests go to mocks (a script of answers, a function, a fixed value) or are held
for the test to answer, and time moves only when the test says. The same test gives the
same trace, byte for byte, on every run and machine::

    from spool.testing import TestScheduler

    def test_research():
        s = TestScheduler()
        s.mock_llm([{"text": "plan", "queries": ["a", "b"]}])
        s.mock_tool("search", ["hit"])
        task = s.submit("research", topic="tides")
        s.run_until_quiet()
        (confirm,) = s.confirmations()
        s.answer(confirm, True)
        s.run_until_quiet()
        assert s.result(task) == {"plan": "plan", "published": True}

Installed with the package, this module is also a pytest plugin: the fixture
``spool_scheduler`` gives a fresh :class:`TestScheduler` of every registered agent.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from . import _native
from ._agents import Agent, Tool
from ._runtime import Input, Limits, TaskState, _agent_tuples, _input, _result, _tool_tuples


class TestScheduler:
    """spool's core driven by the test: virtual time, mocked executors, one poll per step.

    Requests of a kind with no mock end their task with ``no_executor`` — except
    confirmations, which are held for the test (:meth:`confirmations`, :meth:`answer`).
    Python tools run at once, on the test's thread. The trace of every scheduling
    decision is kept (:meth:`trace`).

    With ``check_replay`` (the default), after each step the task polled is saved and
    made again from its record, as a restart would: agent code runs again (keep it free
    of side effects), and an agent that asks for something else the second time raises
    :class:`spool.Nondeterminism` at the step where it happens."""

    __test__ = False  # not a pytest test class

    def __init__(self, *, agents: Optional[Iterable[Agent]] = None, tools: Optional[Iterable[Tool]] = None,
                 policy: Optional[str] = None, limits: Optional[Limits] = None,
                 check_replay: bool = True, _native_scheduler: Any = None) -> None:
        self._s = _native_scheduler or _native.TestScheduler(
            _agent_tuples(agents), _tool_tuples(tools), policy=policy,
            limits=limits._native() if limits is not None else None, check_replay=check_replay)

    # -- mocks -----------------------------------------------------------------------

    def mock_llm(self, answers: Any) -> None:
        """Answers LLM requests: a list is a script (in order; an exception in it fails
        that request; a request after its end fails), a callable is called with each
        request's payload, anything else is the answer to every request."""
        self._s.mock_llm(answers)

    def mock_tool(self, name: str, answers: Any) -> None:
        """Answers the tool ``name`` (as :meth:`mock_llm`), in place of its function."""
        self._s.mock_tool(name, answers)

    def mock(self, kind: str, answers: Any, *, latency: float = 0.0) -> None:
        """Answers requests of ``kind`` (``"llm"``, ``"tool:NAME"``, ``"confirm"``, a custom
        kind) ``latency`` virtual seconds after each is asked."""
        self._s.mock(kind, answers, latency)

    def hold(self, kind: str) -> None:
        """Holds every request of ``kind`` until the test answers it (:meth:`held`)."""
        self._s.hold(kind)

    # -- tasks -----------------------------------------------------------------------

    def submit(self, agent: Union[str, Agent], input: Input = None, /, *, priority: Optional[str] = None,
               tenant: Optional[str] = None, deadline: Optional[float] = None, key: Optional[str] = None,
               **fields: Any) -> int:
        """Submits a task (as :meth:`spool.Runtime.submit`); it runs at the next step."""
        name, value = _input(agent, input, fields)
        return self._s.submit(name, value, priority=priority, tenant=tenant, deadline=deadline, key=key)

    def state(self, task: int) -> TaskState:
        """Task ``task``'s state."""
        state, detail = self._s.state(task)
        return TaskState(state, detail)

    def result(self, task: int) -> Any:
        """Task ``task``'s result, or its error raised (as :meth:`spool.Runtime.result`)."""
        return _result(self.state(task), task)

    def cancel(self, task: int) -> None:
        """Cancels task ``task`` and its children."""
        self._s.cancel(task)

    # -- time and steps --------------------------------------------------------------

    def step(self) -> bool:
        """Polls one ready task; ``False`` if none was ready."""
        return self._s.step()

    def step_until_idle(self) -> int:
        """Steps until no task is ready, without moving time; returns the steps taken."""
        return self._s.step_until_idle()

    def advance(self, seconds: float) -> None:
        """Moves virtual time on by ``seconds``, delivering what falls due, and steps."""
        self._s.advance(seconds)

    def run_until_quiet(self) -> float:
        """Steps, and moves time to each next timer or mock answer, until only what
        waits on the test is left; returns the virtual time then."""
        return self._s.run_until_quiet()

    @property
    def now(self) -> float:
        """The virtual time, in seconds from the start."""
        return self._s.now()

    # -- what waits on the test ------------------------------------------------------

    def held(self) -> List[Any]:
        """Requests held for the test (held kinds and confirmations), oldest first."""
        return self._s.held()

    def confirmations(self) -> List[Any]:
        """The held requests, as :meth:`held` (the confirmations, unless kinds are held)."""
        return self._s.held()

    def answer(self, held: Any, value: Any) -> None:
        """Answers a held request with ``value``; an exception fails it."""
        self._s.answer(held, value)

    # -- what happened ---------------------------------------------------------------

    def trace(self) -> str:
        """Every scheduling decision so far, one line each."""
        return self._s.trace()

    def trace_events(self) -> List[str]:
        """The trace's events, one string each."""
        return self._s.trace_events()

    def trace_hash(self) -> int:
        """A hash of the trace: equal runs have equal hashes."""
        return self._s.trace_hash()

    def sent(self) -> List[Tuple[int, int, str]]:
        """Every request sent, in order, as ``(task, request number, kind)``."""
        return [tuple(x) for x in self._s.sent()]

    def snapshot(self) -> bytes:
        """The whole scheduler as bytes; :meth:`restore` makes it again."""
        return bytes(self._s.snapshot())

    @classmethod
    def restore(cls, snapshot: bytes, *, agents: Optional[Iterable[Agent]] = None,
                tools: Optional[Iterable[Tool]] = None) -> "TestScheduler":
        """A scheduler restored from :meth:`snapshot` with today's agents (each live
        Python task re-run from its recorded answers: an agent that now yields something
        else raises :class:`spool.Nondeterminism`). Mocks are not in a snapshot."""
        native = _native.TestScheduler.restore(snapshot, _agent_tuples(agents), _tool_tuples(tools))
        return cls(_native_scheduler=native)


def check_determinism(workload: Callable[[TestScheduler], Any], *, runs: int = 2,
                      **scheduler: Any) -> int:
    """Runs ``workload`` on ``runs`` fresh schedulers (made with ``scheduler``'s keyword
    arguments) and checks that they made the same scheduling decisions in the same
    order; returns the trace's hash. Raises ``AssertionError`` naming the first trace
    event where two runs part: a task that ends differently, waits on other requests or
    times, or spawns differently. The runs share one process (and so one hash seed):
    what differs only between processes is for a store's replay to find (it raises
    :class:`spool.Nondeterminism` when the runtime opens it)."""
    first: Optional[TestScheduler] = None
    for run in range(runs):
        s = TestScheduler(**scheduler)
        workload(s)
        if first is None:
            first = s
            continue
        a, b = first.trace_events(), s.trace_events()
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            raise AssertionError(
                f"run {run + 1} differs from run 1 at trace event {at + 1}:\n"
                f"  run 1: {a[at] if at < len(a) else '(ended)'}\n"
                f"  run {run + 1}: {b[at] if at < len(b) else '(ended)'}")
    assert first is not None
    return first.trace_hash()


try:  # the pytest plugin: a fixture, when pytest is there
    import pytest

    @pytest.fixture
    def spool_scheduler() -> TestScheduler:
        """A fresh :class:`TestScheduler` with every registered agent and tool."""
        return TestScheduler()
except ImportError:  # pragma: no cover - pytest is optional
    pass

__all__ = ["TestScheduler", "check_determinism"]
