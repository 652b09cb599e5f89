"""spool: a deterministic, coroutine-style runtime for LLM agents, with Python agents.

An agent is a generator function that yields what its ``cx`` makes — a model call, a
tool call, a confirmation, several at once — and receives the answers::

    import spool

    @spool.agent("research")
    def research(cx, topic: str):
        plan = yield cx.llm(messages=[{"role": "user", "content": f"Plan: {topic}"}])
        hits = yield cx.all([cx.tool("search", {"q": q}) for q in plan.queries])
        ok = yield cx.confirm(f"Publish {len(hits)} findings?")
        return {"plan": plan.text, "published": ok}

spool's Rust scheduler runs it: priorities, limits, fair share, 429 back-off, a journal
on SQLite or PostgreSQL that survives a crash, the HTTP API, and a test scheduler in
virtual time (:mod:`spool.testing`). See docs/python.md.
"""

from __future__ import annotations

from . import _native
from ._agents import Agent, Tool, agent, registered_agents, registered_tools, schema_of, tool
from ._answer import Answer
from ._errors import (
    DeadlineExceeded,
    InvalidArguments,
    Nondeterminism,
    RateLimited,
    ReplayError,
    RequestError,
    SpoolError,
    StoreError,
    TaskCanceled,
    TaskError,
    Timeout,
)
from ._runtime import MCP, Limits, OpenAI, Runtime, Server, Subprocess, TaskState, executor, fixed

Cx = _native.Cx
Request = _native.Request
All = _native.All
Sleep = _native.Sleep
Child = _native.Child
Join = _native.Join
Executor = _native.Executor
Confirmation = _native.Confirmation

__version__: str = _native.__version__

__all__ = [
    "Agent", "All", "Answer", "Child", "Join", "Sleep", "Confirmation", "Cx", "DeadlineExceeded", "Executor",
    "InvalidArguments", "Limits", "MCP", "Nondeterminism", "OpenAI", "RateLimited",
    "ReplayError", "Request", "RequestError", "Runtime", "Server", "SpoolError", "StoreError",
    "Subprocess", "TaskCanceled", "TaskError", "TaskState", "Timeout", "Tool", "agent",
    "executor", "fixed", "registered_agents", "registered_tools", "schema_of", "tool",
]
