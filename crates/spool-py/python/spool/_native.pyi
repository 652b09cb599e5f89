"""Type stubs of ``spool._native``, the Rust extension module under the ``spool`` package.

Users reach these classes through ``spool`` (``spool.Cx``, ``spool.Request``,
``spool.Executor``, ...) and ``spool.testing``; the wrappers there take agents and tools
made with ``@spool.agent`` and ``@spool.tool``. The constructors here take them as the
tuples those objects hand over.
"""

import os
from typing import Any, Callable, Dict, Generator, Iterable, List, Optional, Sequence, Tuple, Union, final

__version__: str
"""The package's version (the crate's)."""

__all__ = [
    "All", "Child", "Confirmation", "Cx", "Executor", "Join", "Request", "Runtime", "Sleep",
    "TestScheduler", "__version__", "executor", "fixed", "mcp", "openai", "subprocess",
]

# (name, function, input schema or None): what ``spool.Agent`` hands the runtime.
_AgentSpec = Tuple[str, Callable[..., Any], Optional[Dict[str, Any]]]
# (name, argument schema, function of the arguments dict, threads): ``spool.Tool``'s.
_ToolSpec = Tuple[str, Dict[str, Any], Callable[[Dict[str, Any]], Any], int]

@final
class Request:
    """A request an agent yields: its kind (``llm``, ``tool:NAME``, ``confirm``, or a custom
    kind) and its payload. Made by ``cx.llm``, ``cx.tool``, ``cx.confirm`` and
    ``cx.request``; yielding (or awaiting) it gives back the answer, or raises the
    request's ``spool.RequestError`` at the ``yield``."""

    @property
    def kind(self) -> str:
        """The request's kind, as spool names it: ``llm``, ``tool:search``, ``confirm``, ..."""
    @property
    def payload(self) -> Any:
        """The request's payload, as JSON (objects as ``spool.Answer``)."""
    def __await__(self) -> Generator[Any, Any, Any]:
        """In an ``async def`` agent: ``answer = await cx.llm(...)``."""

@final
class All:
    """Several requests at once (``cx.all``); the agent receives their answers as a list,
    in order."""

    def __await__(self) -> Generator[Any, Any, List[Any]]:
        """In an ``async def`` agent: ``answers = await cx.all([...])``."""

@final
class Sleep:
    """A pause in the scheduler's time (``cx.sleep``); virtual under ``TestScheduler``.
    Yielding it gives back ``None``."""

    def __await__(self) -> Generator[Any, Any, None]:
        """In an ``async def`` agent: ``await cx.sleep(5)``."""

@final
class Child:
    """A child task (``cx.spawn``), running from the moment it was spawned. Yield (or
    await) it once to wait for its result; a child that failed raises its
    ``spool.TaskError`` there."""

    @property
    def id(self) -> int:
        """The child's task id."""
    def __await__(self) -> Generator[Any, Any, Any]:
        """In an ``async def`` agent: ``result = await child``."""

@final
class Join:
    """Waiting for several children: all of them (``cx.join_all``: their results, in
    order) or the first to end (``cx.join_any``: ``(id, result)``)."""

    def __await__(self) -> Generator[Any, Any, Any]:
        """In an ``async def`` agent: ``results = await cx.join_all(children)``."""

@final
class Cx:
    """The agent's handle on spool, passed as its first argument.

    Its methods only describe a step; the agent yields (or awaits) what they return and
    receives the answer. ``cx.spawn`` is the exception: the child starts at once.
    """

    def llm(self, payload: Any = None, **fields: Any) -> Request:
        """Asks the model: ``cx.llm(messages=[...], model=..., tools=[...])``, or one dict
        (not both). Yields back the model's answer (a ``spool.Answer``; ``.text`` is
        its content)."""
    def tool(self, name: str, args: Any = None, **fields: Any) -> Request:
        """Calls the tool ``name`` with ``args`` (a dict, or keyword arguments; not both).
        Yields back what the tool returned. ``ValueError`` if ``name`` is empty."""
    def confirm(self, question: Any) -> Request:
        """Asks a person ``question``: yields back whatever they reply (``True``/``False``
        for a yes/no)."""
    def request(self, kind: str, payload: Any = None) -> Request:
        """A request of any kind (``"llm"``, ``"tool:NAME"``, ``"confirm"`` or a custom
        kind an executor serves); the payload defaults to ``None``. ``ValueError`` for a
        kind spool does not read."""
    def all(self, requests: Iterable[Request], return_exceptions: bool = False) -> All:
        """Several requests at once: yields back their answers as a list, in order. A
        failed request raises its ``RequestError`` (the first in order), unless
        ``return_exceptions=True``, which puts each error in its place in the list.
        ``TypeError`` for an item that is not a request."""
    def sleep(self, seconds: float) -> Sleep:
        """A pause of ``seconds`` in the scheduler's time; yields back ``None``.
        ``ValueError`` for a negative or non-finite number."""
    def spawn(
        self,
        agent: str,
        input: Any = None,
        *,
        priority: Optional[str] = None,
        deadline: Optional[float] = None,
        key: Optional[str] = None,
    ) -> Child:
        """Starts the agent ``agent`` as a child of this task with ``input`` (a dict of its
        arguments); it runs from now on. ``priority`` is ``"low"``, ``"normal"``,
        ``"high"`` or ``"critical"``, ``deadline`` seconds from now, ``key`` an
        idempotency key. Yield the returned child to wait for it. ``ValueError`` for an
        unknown agent or priority."""
    def join_all(self, children: Iterable[Child]) -> Join:
        """Waits for every child: yields back their results, in order. A child that
        failed raises its ``TaskError`` (the first in order)."""
    def join_any(self, children: Iterable[Child]) -> Join:
        """Waits for the first child to end: yields back ``(id, result)``, or raises that
        child's ``TaskError``. The others can be waited for again."""
    def now(self) -> float:
        """The scheduler's time, in seconds from its start (virtual under
        ``TestScheduler``). Recorded, so a replay sees the same value."""
    @property
    def task_id(self) -> int:
        """This task's id."""
    def patched(self, name: str) -> bool:
        """Whether this run takes the new branch of the code change ``name``: ``True`` in
        a run started by code that has the change, ``False`` in one replayed from a
        record made before it. The first answer for a name sticks for the task's life."""

@final
class Executor:
    """An executor to install on a runtime, made by ``spool.OpenAI``, ``spool.Subprocess``,
    ``spool.MCP``, ``spool.executor`` or ``spool.fixed``."""

    def definitions(self) -> List[Any]:
        """The tool definitions an MCP executor offers (to pass to a model); empty for the
        others."""

@final
class Confirmation:
    """A confirmation (or, under ``TestScheduler``, any held request) a task waits for;
    answer it with ``Runtime.answer`` / ``TestScheduler.answer``."""

    @property
    def task(self) -> int:
        """The task that asks."""
    @property
    def request(self) -> int:
        """The request's number within the task."""
    @property
    def question(self) -> Any:
        """The question (the request's payload)."""

@final
class Runtime:
    """The runtime; see ``spool.Runtime``, which makes it from agents, tools and
    executors."""

    def __new__(
        cls,
        agents: Sequence[_AgentSpec],
        tools: Sequence[_ToolSpec],
        executors: Sequence[Executor],
        store: Union[str, "os.PathLike[str]", None] = None,
        postgres: Optional[str] = None,
        policy: Optional[str] = None,
        limits: Optional[Dict[str, Any]] = None,
        checkpoint_every: Optional[int] = None,
    ) -> "Runtime":
        """Builds the runtime; with a store, recovers what it holds (raising
        ``spool.Nondeterminism`` if today's agents yield other requests than the
        record, ``spool.StoreError`` if the store cannot be used)."""
    def submit(
        self,
        agent: str,
        input: Any = None,
        *,
        priority: Optional[str] = None,
        tenant: Optional[str] = None,
        deadline: Optional[float] = None,
        key: Optional[str] = None,
    ) -> int:
        """Submits a task of the agent ``agent`` with ``input``; returns its id."""
    def run_until_idle(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Runs the loop until no task can make progress without the outside (every task
        ended or waiting for a confirmation), or until ``timeout`` seconds have passed;
        returns ``{"steps": int, "elapsed": float}``."""
    def run_for(self, seconds: float) -> Dict[str, Any]:
        """Runs the loop for ``seconds`` (timers and schedules fire in real time
        meanwhile); returns ``{"steps": int, "elapsed": float}``."""
    def state(self, id: int) -> Tuple[str, Any]:
        """The state of task ``id`` as ``(state, detail)``; see ``spool.Runtime.state``."""
    def cancel(self, id: int) -> None:
        """Cancels task ``id`` (and its children)."""
    def confirmations(self) -> List[Confirmation]:
        """The confirmations tasks wait for."""
    def answer(self, confirmation: Confirmation, value: Any) -> None:
        """Answers a confirmation with ``value``."""
    def schedule(
        self,
        slug: str,
        agent: str,
        input: Any = None,
        *,
        cron: Optional[str] = None,
        tz: Optional[str] = None,
        every: Optional[float] = None,
        at: Optional[str] = None,
        session: Optional[str] = None,
        overlap: Optional[str] = None,
        tenant: Optional[str] = None,
        priority: Optional[str] = None,
        enabled: bool = True,
        pause_after_failures: Optional[int] = None,
    ) -> bool:
        """Makes (or replaces) the schedule ``slug``; see ``spool.Runtime.schedule``.
        Returns whether it was made (``False``: replaced)."""
    def schedules(self) -> List[Any]:
        """Every schedule, with its status (as the HTTP API shows them)."""
    def schedule_do(self, what: str, slug: str) -> None:
        """Deletes, pauses, resumes or runs now (``what``: ``"delete"``, ``"pause"``,
        ``"resume"``, ``"run"``) the schedule ``slug``."""
    def serve(self, addr: str, token: str) -> str:
        """Serves the HTTP API on ``addr`` with ``token``, the loop on a thread of its own;
        returns the address it listens on."""
    def close(self) -> None:
        """Stops the runtime (its server and loop, if it serves). Idempotent."""
    @property
    def store_name(self) -> Optional[str]:
        """The store's name (its path, or its URL without password), if it has one."""
    @property
    def agents(self) -> List[str]:
        """The names of the agents it runs."""

@final
class TestScheduler:
    """spool's test scheduler; see ``spool.testing.TestScheduler``, which wraps it."""

    def __new__(
        cls,
        agents: Sequence[_AgentSpec],
        tools: Sequence[_ToolSpec],
        policy: Optional[str] = None,
        limits: Optional[Dict[str, Any]] = None,
        check_replay: bool = True,
    ) -> "TestScheduler":
        """A test scheduler of ``agents`` and ``tools`` with a policy and limits (as
        ``spool.Runtime``'s). With ``check_replay`` (the default) each task polled is
        saved and replayed from its record after every step, so an agent that does not
        replay fails at the step where it parts."""
    def mock_llm(self, answers: Any) -> None:
        """Answers LLM requests: a list (in order), a callable of the payload, or a value."""
    def mock_tool(self, name: str, answers: Any) -> None:
        """Answers the tool ``name`` (instead of its Python function, if it has one)."""
    def mock(self, kind: str, answers: Any, latency: float = 0.0) -> None:
        """Answers requests of ``kind``, each ``latency`` virtual seconds after it was
        asked."""
    def hold(self, kind: str) -> None:
        """Holds every request of ``kind`` until the test answers it."""
    def submit(
        self,
        agent: str,
        input: Any = None,
        *,
        priority: Optional[str] = None,
        tenant: Optional[str] = None,
        deadline: Optional[float] = None,
        key: Optional[str] = None,
    ) -> int:
        """Submits a task of ``agent`` with ``input``; returns its id."""
    def step(self) -> bool:
        """Polls one ready task; ``False`` when none was ready."""
    def step_until_idle(self) -> int:
        """Steps until no task is ready (time does not move); returns the steps taken."""
    def advance(self, seconds: float) -> None:
        """Moves virtual time on by ``seconds``, firing what falls due, and steps."""
    def run_until_quiet(self) -> float:
        """Steps and moves time to each next timer until only what waits on the test is
        left; returns the virtual time then, in seconds."""
    def now(self) -> float:
        """The virtual time, in seconds."""
    def state(self, id: int) -> Tuple[str, Any]:
        """The state of task ``id`` as ``(state, detail)``."""
    def cancel(self, id: int) -> None:
        """Cancels task ``id`` (and its children)."""
    def held(self) -> List[Confirmation]:
        """The requests held for the test (held kinds, and confirmations), oldest first."""
    def answer(self, held: Confirmation, value: Any) -> str:
        """Answers a held request with ``value`` (an exception: a failed request); returns
        what the scheduler did with it, in words."""
    def trace(self) -> str:
        """The trace: one line per event."""
    def trace_events(self) -> List[str]:
        """The trace's events, one string each."""
    def trace_hash(self) -> int:
        """A hash of the trace: equal for equal runs."""
    def sent(self) -> List[Tuple[int, int, str]]:
        """The requests sent so far, in order: ``(task, number, kind)``."""
    def snapshot(self) -> bytes:
        """The whole scheduler as snapshot bytes."""
    @staticmethod
    def restore(snapshot: bytes, agents: Sequence[_AgentSpec], tools: Sequence[_ToolSpec]) -> "TestScheduler":
        """A test scheduler restored from ``snapshot`` with today's agents (mocks are not
        in a snapshot). Raises ``spool.Nondeterminism`` if an agent now yields something
        else than it recorded."""

def openai(
    base_url: Optional[str] = None,
    model: Optional[str] = None,
    api_key: Optional[str] = None,
    workers: Optional[int] = None,
    stream: Optional[bool] = None,
    timeout: Optional[float] = None,
) -> Executor:
    """The OpenAI-compatible LLM executor: ``base_url`` and ``model`` (default
    ``gpt-4o-mini``), or ``OPENAI_BASE_URL``, ``OPENAI_MODEL``, ``OPENAI_API_KEY`` from
    the environment, on ``workers`` threads. ``ValueError`` for a configuration that
    does not work (no URL, say)."""

def subprocess(
    name: str,
    program: str,
    args: Sequence[str] = ...,
    *,
    workdir: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    allow_env: Sequence[str] = ...,
    timeout: Optional[float] = None,
    shell: bool = False,
) -> Executor:
    """The tool ``name`` run as a program: each call (``{"args": [...], "stdin":
    "..."}``) starts ``program args...`` and the call's ``args``, its ``stdin`` on
    standard input, and answers with the exit status and the output."""

def mcp(path: Union[str, "os.PathLike[str]"]) -> Executor:
    """The tools of the MCP servers in the configuration file at ``path``; starts the
    servers now. ``ValueError`` if the file does not read or a server does not start."""

def executor(kind: str, func: Callable[[Any], Any], workers: int = 1) -> Executor:
    """A Python function as the executor of ``kind``: called with each request's payload
    on ``workers`` threads; what it returns is the answer, an exception a failed
    request."""

def fixed(kind: str, value: Any) -> Executor:
    """The same answer, ``value``, to every request of ``kind``, at once."""
