"""Steps per second of durable agents: spool's Python agents against the same agent in
Rust, LangGraph and DBOS, on one workload.

The workload: N agents, each making 5 LLM requests in a row, the LLM a stand-in that
answers at once with ``{"role": "assistant", "content": "ok"}``, every framework
durable on an SQLite file in a fresh temporary directory:

- ``spool-py``: an ``@spool.agent`` generator yielding 5 ``cx.llm`` requests, on
  ``spool.Runtime(store=DIR/run.spool, llm=spool.fixed("llm", ANSWER))`` (the answer
  given by Rust, so the stand-in LLM costs no Python); N ``submit`` calls, then
  ``run_until_idle`` and ``close`` (which waits for the store's last write).
- ``spool-rust``: the same agent as an ``async`` Rust task on the same runtime set-up
  (``examples/agents_baseline.rs``, built with ``cargo build --release --example
  agents_baseline``).
- ``langgraph``: a graph of 5 LLM nodes in a row (a Python function standing in for the
  model, answering at once), compiled with ``SqliteSaver`` on a file; N threads, each
  invoked once with ``durability="sync"`` (each step's checkpoint written before the
  next step runs).
- ``dbos``: a ``@DBOS.workflow`` of 5 ``@DBOS.step`` calls of the same stand-in, on
  DBOS's SQLite system database; N workflows called in turn.

Steps/s is 5N over the wall time from the first submission to the last result
(spool: to the runtime's close). Each measurement runs in a process of its own; the
frameworks take turns within each round, so they see the same machine load.

Durability (``--sync``): ``normal`` (the default) gives every SQLite database WAL with
``synchronous = NORMAL``, spool's store's default: a commit is in the operating system
when it returns (a crash of the process loses nothing committed; a power loss can lose
the last commits). ``full`` gives LangGraph and DBOS ``synchronous = FULL`` in their
own journal modes (LangGraph: WAL; DBOS: the rollback journal), an ``fsync`` per
commit, as each ships; spool from Python has no such mode, so it stays at NORMAL.

Usage::

    python benches/python/agents.py [--agents 1000,10000] [--runs 5]
        [--frameworks spool-py,spool-rust,langgraph,dbos] [--sync normal|full]
        [--baseline PATH_TO_agents_baseline] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import operator
from typing import Any, Dict, List, Optional

from typing_extensions import Annotated, TypedDict

STEPS = 5
ANSWER = {"role": "assistant", "content": "ok"}
FRAMEWORKS = ("spool-py", "spool-rust", "langgraph", "dbos")


def stand_in_llm(messages: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The model every Python framework calls: answers at once."""
    return dict(ANSWER)


# --- spool, Python agent -------------------------------------------------------------

def measure_spool_py(agents: int, directory: str, sync: str) -> float:
    import spool

    @spool.agent("five")
    def five(cx: Any, n: int) -> Any:
        last = None
        for step in range(STEPS):
            answer = yield cx.llm(messages=[{"role": "user", "content": f"agent {n}, step {step}"}])
            last = answer["content"]
        return {"n": n, "last": last}

    rt = spool.Runtime(agents=[five], store=os.path.join(directory, "run.spool"),
                       llm=spool.fixed("llm", ANSWER))
    started = time.perf_counter()
    ids = [rt.submit(five, n=n) for n in range(agents)]
    rt.run_until_idle()
    rt.close()
    elapsed = time.perf_counter() - started
    check = spool.Runtime(agents=[five], store=os.path.join(directory, "run.spool"),
                          llm=spool.fixed("llm", ANSWER))
    for i in (ids[0], ids[-1]):
        result = check.result(i)
        if result["last"] != "ok":
            raise SystemExit(f"spool-py: task {i} ended with {result!r}")
    check.close()
    return elapsed


# --- spool, the same agent in Rust ---------------------------------------------------

def measure_spool_rust(agents: int, directory: str, sync: str, baseline: str) -> float:
    out = subprocess.run([baseline, str(agents), "1", directory], check=True,
                         capture_output=True, text=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


# --- LangGraph -----------------------------------------------------------------------

def measure_langgraph(agents: int, directory: str, sync: str) -> float:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        n: int
        messages: Annotated[list, operator.add]

    def node(step: int) -> Any:
        def call_model(state: State) -> Dict[str, Any]:
            asked = {"role": "user", "content": f"agent {state['n']}, step {step}"}
            return {"messages": [asked, stand_in_llm(state["messages"] + [asked])]}
        return call_model

    graph = StateGraph(State)
    for step in range(STEPS):
        graph.add_node(f"llm{step}", node(step))
    graph.add_edge(START, "llm0")
    for step in range(1, STEPS):
        graph.add_edge(f"llm{step - 1}", f"llm{step}")
    graph.add_edge(f"llm{STEPS - 1}", END)

    conn = sqlite3.connect(os.path.join(directory, "checkpoints.sqlite"), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()  # journal_mode = WAL
    conn.execute(f"PRAGMA synchronous = {sync.upper()}")
    app = graph.compile(checkpointer=saver)
    started = time.perf_counter()
    last = None
    for n in range(agents):
        last = app.invoke({"n": n, "messages": []}, {"configurable": {"thread_id": f"agent-{n}"}},
                          durability="sync")
    conn.close()
    elapsed = time.perf_counter() - started
    if last is None or len(last["messages"]) != 2 * STEPS:
        raise SystemExit(f"langgraph: the last thread ended with {last!r}")
    return elapsed


# --- DBOS ----------------------------------------------------------------------------

def measure_dbos(agents: int, directory: str, sync: str) -> float:
    import logging

    import sqlalchemy
    from dbos import DBOS, DBOSConfig

    @sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "connect")
    def durability(dbapi_conn: Any, record: Any) -> None:
        if sync == "normal":
            dbapi_conn.execute("PRAGMA journal_mode = WAL")
        dbapi_conn.execute(f"PRAGMA synchronous = {sync.upper()}")

    @DBOS.step()
    def llm_step(n: int, step: int) -> Dict[str, Any]:
        return stand_in_llm([{"role": "user", "content": f"agent {n}, step {step}"}])

    @DBOS.workflow()
    def five(n: int) -> Dict[str, Any]:
        last = None
        for step in range(STEPS):
            last = llm_step(n, step)["content"]
        return {"n": n, "last": last}

    config: DBOSConfig = {
        "name": "agents-bench",
        "system_database_url": "sqlite:///" + os.path.join(directory, "dbos.sqlite"),
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    logging.getLogger("dbos").setLevel(logging.WARNING)
    started = time.perf_counter()
    last = None
    for n in range(agents):
        last = five(n)
    elapsed = time.perf_counter() - started
    DBOS.destroy()
    if last != {"n": agents - 1, "last": "ok"}:
        raise SystemExit(f"dbos: the last workflow ended with {last!r}")
    return elapsed


# --- the driver ----------------------------------------------------------------------

def one(framework: str, agents: int, sync: str, baseline: Optional[str]) -> None:
    """Runs one measurement in this process; prints its JSON line."""
    directory = tempfile.mkdtemp(prefix=f"agents-{framework}-")
    try:
        if framework == "spool-py":
            seconds = measure_spool_py(agents, directory, sync)
        elif framework == "spool-rust":
            if baseline is None:
                raise SystemExit("spool-rust needs --baseline")
            seconds = measure_spool_rust(agents, directory, sync, baseline)
        elif framework == "langgraph":
            seconds = measure_langgraph(agents, directory, sync)
        elif framework == "dbos":
            seconds = measure_dbos(agents, directory, sync)
        else:
            raise SystemExit(f"unknown framework {framework!r}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    steps = STEPS * agents
    print(json.dumps({"framework": framework, "agents": agents, "sync": sync, "steps": steps,
                      "seconds": seconds, "steps_per_s": steps / seconds}), flush=True)


def versions() -> Dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for name in ("spool", "langgraph", "langgraph-checkpoint-sqlite", "dbos", "sqlalchemy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "-"
    import sqlite3
    out["sqlite"] = sqlite3.sqlite_version
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", default="1000,10000", help="agent counts, comma-separated")
    p.add_argument("--runs", type=int, default=5, help="measurements of each cell")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.add_argument("--sync", choices=("normal", "full"), default="normal")
    p.add_argument("--baseline", help="the built examples/agents_baseline binary")
    p.add_argument("--json", help="write every measurement here")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    sizes = [int(a) for a in args.agents.split(",")]
    if args.one:
        one(args.one, sizes[0], args.sync, args.baseline)
        return
    frameworks = args.frameworks.split(",")
    print(json.dumps(versions()), flush=True)
    results: Dict[tuple, List[float]] = {}
    for agents in sizes:
        for round_ in range(args.runs):
            for fw in frameworks:
                cmd = [sys.executable, __file__, "--one", fw, "--agents", str(agents),
                       "--sync", args.sync]
                if args.baseline:
                    cmd += ["--baseline", args.baseline]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True)
                line = json.loads(out.stdout.strip().splitlines()[-1])
                print(json.dumps(line), flush=True)
                results.setdefault((fw, agents), []).append(line["steps_per_s"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"versions": versions(), "sync": args.sync,
                       "runs": {f"{fw}@{n}": v for (fw, n), v in results.items()}}, f, indent=1)
    print()
    print(f"steps/s, median of {args.runs} (sync = {args.sync}); ratio to LangGraph")
    print(f"{'framework':<12}" + "".join(f"{n:>12} agents{'':>10}" for n in sizes))
    for fw in frameworks:
        row = f"{fw:<12}"
        for n in sizes:
            runs = results.get((fw, n), [])
            lg = results.get(("langgraph", n))
            med = statistics.median(runs) if runs else float("nan")
            ratio = med / statistics.median(lg) if lg else float("nan")
            row += f"{med:>14,.0f} {ratio:>7.1f}x{'':>6}"
        print(row)


if __name__ == "__main__":
    main()
