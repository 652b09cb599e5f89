"""The runtime from Python: ``spool.Runtime``, its limits, executors and server."""

from __future__ import annotations

import os
import secrets
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _native
from ._agents import Agent, Tool, registered_agents, registered_tools
from ._errors import TaskCanceled, TaskError

Input = Optional[Dict[str, Any]]
Executor = _native.Executor


class Limits:
    """What the scheduler lets run at once.

    - ``max_running``: tasks polled at once (others wait in the queue);
      ``max_running_per_agent``: the same for each agent (tenant); ``max_queued``: tasks
      waiting, beyond which a submission is refused;
    - ``in_flight``: requests out at once per kind, as ``{"llm": 4, "tool:search": 2}``;
    - ``rate``: requests per window per kind, as ``{"llm": (60, 60.0)}`` (60 a minute);
    - ``tokens``: tokens per window per kind, as ``{"llm": (100_000, 60.0)}``;
    - ``per_agent_in_flight``: requests out at once for each agent (tenant).
    """

    def __init__(self, *, max_running: Optional[int] = None, max_running_per_agent: Optional[int] = None,
                 max_queued: Optional[int] = None, in_flight: Optional[Dict[str, int]] = None,
                 rate: Optional[Dict[str, Tuple[int, float]]] = None,
                 tokens: Optional[Dict[str, Tuple[int, float]]] = None,
                 per_agent_in_flight: Optional[int] = None) -> None:
        self._limits: Dict[str, Any] = {
            "max_running": max_running, "max_running_per_agent": max_running_per_agent,
            "max_queued": max_queued, "in_flight": in_flight, "rate": rate, "tokens": tokens,
            "per_agent_in_flight": per_agent_in_flight,
        }

    def _native(self) -> Dict[str, Any]:
        return {k: v for k, v in self._limits.items() if v is not None}

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self._native().items())
        return f"Limits({given})"


class TaskState(NamedTuple):
    """A task's state: ``state`` is ``"ready"``, ``"running"``, ``"waiting"``,
    ``"completed"``, ``"failed"``, ``"canceled"`` or ``"unknown"``; ``detail`` is the
    result (completed), the :class:`TaskError` (failed), or the reason (waiting,
    canceled)."""

    state: str
    detail: Any

    @property
    def done(self) -> bool:
        """Whether the task has ended."""
        return self.state in ("completed", "failed", "canceled")


def OpenAI(base_url: Optional[str] = None, model: Optional[str] = None, *, api_key: Optional[str] = None,
           workers: Optional[int] = None, stream: Optional[bool] = None,
           timeout: Optional[float] = None) -> Executor:
    """spool's OpenAI-compatible LLM executor (Rust, on its own threads): ``base_url``
    and ``model``, or ``OPENAI_BASE_URL``, ``OPENAI_MODEL`` and ``OPENAI_API_KEY`` from
    the environment. Retries 429s and 5xx with back-off; a key never appears in errors."""
    return _native.openai(base_url, model, api_key, workers, stream, timeout)


def Subprocess(name: str, program: str, args: Sequence[str] = (), *, workdir: Optional[str] = None,
               env: Optional[Dict[str, str]] = None, allow_env: Sequence[str] = (),
               timeout: Optional[float] = None, shell: bool = False) -> Executor:
    """The tool ``name`` served by a program: a call ``cx.tool(name, {"args": [...],
    "stdin": "..."})`` (both optional) runs ``program args...`` followed by the call's
    ``args`` (as words, no shell unless ``shell``) with its ``stdin`` on standard input,
    and answers ``{"status", "signal", "stdout", "stderr", "truncated"}`` whatever the
    exit status. The environment is empty but for ``env`` and the variables named in
    ``allow_env``."""
    return _native.subprocess(name, program, list(args), workdir=workdir, env=env,
                              allow_env=list(allow_env), timeout=timeout, shell=shell)


def MCP(config: Union[str, "os.PathLike[str]"]) -> Executor:
    """The tools of the MCP servers in the configuration file ``config`` (the
    ``mcpServers`` format of ``spool serve --mcp``), offered as ``SERVER__TOOL``. Starts
    the servers now; ``.definitions()`` lists their tools for a model."""
    return _native.mcp(os.fspath(config))


def executor(kind: str, func: Callable[[Any], Any], *, workers: int = 1) -> Executor:
    """A Python function as the executor of ``kind`` (``"llm"``, ``"tool:NAME"``, a custom
    kind): called with each request's payload on one of ``workers`` threads."""
    return _native.executor(kind, func, workers)


def fixed(kind: str, value: Any) -> Executor:
    """Answers every request of ``kind`` with ``value``, at once."""
    return _native.fixed(kind, value)


def _agent_tuples(agents: Optional[Iterable[Agent]]) -> List[Any]:
    chosen = registered_agents() if agents is None else list(agents)
    for a in chosen:
        if not isinstance(a, Agent):
            raise TypeError(f"agents are made with @spool.agent, not {a!r}")
    return [a._native() for a in chosen]


def _tool_tuples(tools: Optional[Iterable[Tool]]) -> List[Any]:
    chosen = registered_tools() if tools is None else list(tools)
    for t in chosen:
        if not isinstance(t, Tool):
            raise TypeError(f"tools are made with @spool.tool, not {t!r}")
    return [t._native() for t in chosen]


def _executors(llm: Any, executors: Iterable[Executor]) -> List[Executor]:
    chosen = list(executors)
    if llm is not None:
        if isinstance(llm, Executor):
            chosen.insert(0, llm)
        elif callable(llm):
            chosen.insert(0, executor("llm", llm))
        else:
            chosen.insert(0, fixed("llm", llm))
    return chosen


def _input(agent: Union[str, Agent], input: Input, fields: Dict[str, Any]) -> Tuple[str, Any]:
    name = agent.name if isinstance(agent, Agent) else agent
    if input is not None and fields:
        raise TypeError("give the input as one dict or as keyword fields, not both")
    return name, (input if input is not None else fields)


def _result(state: TaskState, task: int) -> Any:
    if state.state == "completed":
        return state.detail
    if state.state == "failed":
        raise state.detail
    if state.state == "canceled":
        raise TaskCanceled(f"task {task} was {state.detail}", "canceled", {"reason": state.detail})
    raise LookupError(f"task {task} has not ended: it is {state.state}"
                      + (f" ({state.detail})" if state.detail else ""))


class Server:
    """A runtime serving spool's HTTP API (made by :meth:`Runtime.serve`)."""

    def __init__(self, runtime: "Runtime", addr: str, token: str) -> None:
        self.runtime = runtime
        self.addr = addr
        self.token = token

    @property
    def url(self) -> str:
        """``http://ADDR``: the API's base address."""
        return f"http://{self.addr}"

    def stop(self) -> None:
        """Stops the server and the runtime's loop (what the store holds stays)."""
        self.runtime.close()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class Runtime:
    """spool's runtime with Python agents: one loop schedules every task, executors run
    the requests on their own threads, and a store (if given) makes it durable.

    - ``agents`` / ``tools``: the ones to run (default: every ``@spool.agent`` and
      ``@spool.tool`` defined so far);
    - ``store``: an SQLite file, or ``postgres``: a PostgreSQL URL — tasks survive a
      crash: opened again, the runtime goes on from what the store holds, re-running
      each live Python task from its recorded answers (an agent whose code now yields
      something else raises :class:`~spool.Nondeterminism` here);
    - ``llm``: the LLM executor (:func:`OpenAI`, a function of the payload, or a fixed
      answer); ``executors``: others (:func:`Subprocess`, :func:`MCP`, :func:`executor`);
    - ``limits`` (:class:`Limits`) and ``policy`` (``"fifo"``, ``"priority"``,
      ``"fair-share"``).
    """

    def __init__(self, *, agents: Optional[Iterable[Agent]] = None, tools: Optional[Iterable[Tool]] = None,
                 store: Union[str, "os.PathLike[str]", None] = None, postgres: Optional[str] = None,
                 llm: Any = None, executors: Iterable[Executor] = (), limits: Optional[Limits] = None,
                 policy: Optional[str] = None, checkpoint_every: Optional[int] = None) -> None:
        self._rt = _native.Runtime(
            _agent_tuples(agents), _tool_tuples(tools), _executors(llm, executors),
            store=os.fspath(store) if store is not None else None, postgres=postgres,
            policy=policy, limits=limits._native() if limits is not None else None,
            checkpoint_every=checkpoint_every,
        )

    def submit(self, agent: Union[str, Agent], input: Input = None, /, *, priority: Optional[str] = None,
               tenant: Optional[str] = None, deadline: Optional[float] = None, key: Optional[str] = None,
               **fields: Any) -> int:
        """Submits a task of ``agent`` with ``input`` (a dict of its arguments, or them as
        keywords); returns its id. ``priority`` is ``"low"``, ``"normal"``, ``"high"`` or
        ``"critical"``; ``tenant`` the agent (tenant) it counts for under fair share and
        per-agent limits; ``deadline`` seconds from now; ``key`` an idempotency key (a
        second submission with a key already used gets an id of its own, and that task
        ends at once ``rejected``, naming the first)."""
        name, value = _input(agent, input, fields)
        return self._rt.submit(name, value, priority=priority, tenant=tenant, deadline=deadline, key=key)

    def run_until_idle(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Runs the loop until no task can make progress — every task ended or waiting
        on a confirmation, no request out, no timer set — or until ``timeout`` seconds
        have passed; returns ``{"steps": ..., "elapsed": seconds}``. Timers run in real
        time: a task sleeping an hour keeps it running an hour, and a schedule (always a
        next fire) keeps it running for ever — give a ``timeout``, or use
        :meth:`run_for`. Ctrl-C stops the run and raises ``KeyboardInterrupt`` here;
        what the loop took in is kept (in the store, if it has one)."""
        return self._rt.run_until_idle(timeout)

    def run_for(self, seconds: float) -> Dict[str, Any]:
        """Runs the loop for ``seconds``: timers and schedules fire meanwhile."""
        return self._rt.run_for(seconds)

    def state(self, task: int) -> TaskState:
        """Task ``task``'s state."""
        state, detail = self._rt.state(task)
        return TaskState(state, detail)

    def result(self, task: int) -> Any:
        """Task ``task``'s result; raises its :class:`TaskError` if it failed,
        :class:`TaskCanceled` if it was canceled, ``LookupError`` if it has not ended."""
        return _result(self.state(task), task)

    def cancel(self, task: int) -> None:
        """Cancels task ``task`` and its children; its requests out are canceled too."""
        self._rt.cancel(task)

    def confirmations(self) -> List[Any]:
        """The confirmations tasks wait for (``.task``, ``.request``, ``.question``). A
        confirmation shows once its request is durable, at a turn of the loop: after
        opening a store, run the loop (``run_until_idle``) before looking."""
        return self._rt.confirmations()

    def answer(self, confirmation: Any, value: Any) -> None:
        """Answers ``confirmation`` with ``value``; the task goes on at the next run."""
        self._rt.answer(confirmation, value)

    def schedule(self, slug: str, agent: Union[str, Agent], input: Input = None, /, *,
                 cron: Optional[str] = None, tz: Optional[str] = None, every: Optional[float] = None,
                 at: Optional[str] = None, session: Optional[str] = None, overlap: Optional[str] = None,
                 tenant: Optional[str] = None, priority: Optional[str] = None, enabled: bool = True,
                 pause_after_failures: Optional[int] = None) -> bool:
        """Makes (or replaces) the schedule ``slug``: a task of ``agent`` with ``input``
        at the times of ``cron`` (a cron expression, in the time zone ``tz``, default
        UTC), every ``every`` seconds, or once ``at`` an RFC 3339 instant. ``session``:
        ``"persist"`` (the default: runs share the schedule's session), ``"fresh"`` or
        ``"shared:ID"``; ``overlap``: ``"skip"`` (default), ``"buffer-one"``,
        ``"buffer-all"``, ``"cancel-other"``, ``"allow-all"``. Each run's agent gets two
        more keyword arguments, ``schedule`` (``{"slug", "fire"}``) and, with a session,
        ``session`` (``{"id", "messages"}``): declare them (or ``**extra``). A store
        keeps schedules. Returns ``True`` if it was made, ``False`` if it replaced one."""
        name = agent.name if isinstance(agent, Agent) else agent
        return self._rt.schedule(slug, name, input, cron=cron, tz=tz, every=every, at=at,
                                 session=session, overlap=overlap, tenant=tenant, priority=priority,
                                 enabled=enabled, pause_after_failures=pause_after_failures)

    def schedules(self) -> List[Dict[str, Any]]:
        """Every schedule with its status (``def``, ``status``, ``created_at``, ...)."""
        return list(self._rt.schedules())

    def delete_schedule(self, slug: str) -> None:
        """Deletes the schedule ``slug`` (its runs going on are left to finish)."""
        self._rt.schedule_do("delete", slug)

    def pause_schedule(self, slug: str) -> None:
        """Pauses the schedule ``slug``: it keeps its status and fires nothing."""
        self._rt.schedule_do("pause", slug)

    def resume_schedule(self, slug: str) -> None:
        """Resumes the paused schedule ``slug``."""
        self._rt.schedule_do("resume", slug)

    def run_schedule(self, slug: str) -> None:
        """Starts a run of the schedule ``slug`` now, as if it fired."""
        self._rt.schedule_do("run", slug)

    def serve(self, addr: str = "127.0.0.1:8080", *, token: Optional[str] = None) -> Server:
        """Serves spool's HTTP API (``POST /v1/tasks`` with ``{"type": AGENT, "input":
        {...}}``, ``GET /v1/tasks/{id}``, events, confirmations; see docs/http.md) on
        ``addr`` (port 0: any free port), the Python agents as its task types, every
        request carrying ``Authorization: Bearer TOKEN`` (made at random if not given).
        The loop runs on a thread of its own until :meth:`Server.stop`. Call it before
        the runtime's first ``submit`` or run."""
        token = token if token is not None else secrets.token_urlsafe(24)
        bound = self._rt.serve(addr, token)
        return Server(self, bound, token)

    def close(self) -> None:
        """Stops the runtime; a store keeps everything it was given. Idempotent."""
        self._rt.close()

    @property
    def agents(self) -> List[str]:
        """The names of the agents this runtime runs."""
        return list(self._rt.agents)

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
