"""A Python agent on a store, killed with SIGKILL mid-run and resumed by a new process:
the task completes once, with the right result, and no answered tool call is made again."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# The agent, its tool and the runtime, in a process of its own. The tool appends a line
# to LOG for every call it gets; when BLOCK is set, call 3 writes MARKER and never
# returns, so the process is killed while that request is out.
CHILD = textwrap.dedent("""
    import json, os, sys, threading
    import spool

    log, marker, store = sys.argv[1], sys.argv[2], sys.argv[3]
    block = os.environ.get("BLOCK") == "1"

    @spool.tool
    def work(n: int) -> str:
        with open(log, "a") as f:
            f.write(f"call {n}\\n")
        if block and n == 3:
            with open(marker, "w") as f:
                f.write("out")
            threading.Event().wait()
        return f"done {n}"

    @spool.agent("chain")
    def chain(cx, steps: int):
        done = []
        for n in range(1, steps + 1):
            done.append((yield cx.tool("work", {"n": n})))
        return {"done": done}

    rt = spool.Runtime(store=store, agents=[chain], tools=[work])
    if sys.argv[4] == "submit":
        task = rt.submit("chain", steps=4, key="the-chain")
        print(json.dumps({"task": task}), flush=True)
    else:
        task = int(sys.argv[4])
    rt.run_until_idle()
    state = rt.state(task)
    detail = state.detail if state.state == "completed" else str(state.detail)
    print(json.dumps({"task": task, "state": state.state, "result": detail}), flush=True)
    rt.close()
""")


def wait_for(path, proc, seconds=30.0):
    """Waits until ``path`` exists (the tool wrote it), failing if the child ends first."""
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the child ended ({proc.returncode}) before its tool got call 3:\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the tool did not get call 3 within {seconds} s")
        time.sleep(0.01)


def run_child(script, log, marker, store, arg):
    done = subprocess.run([sys.executable, script, log, marker, store, arg],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def calls(log):
    with open(log) as f:
        return f.read().splitlines()


def test_killed_mid_run_resumes_and_completes_once(tmp_path):
    script, log, marker = tmp_path / "child.py", tmp_path / "calls.log", tmp_path / "marker"
    store = tmp_path / "run.spool"
    script.write_text(CHILD)

    first = subprocess.Popen(
        [sys.executable, str(script), str(log), str(marker), str(store), "submit"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, BLOCK="1"))
    wait_for(str(marker), first)
    first.send_signal(signal.SIGKILL)
    out, _ = first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    task = json.loads(out.splitlines()[0])["task"]
    assert calls(log) == ["call 1", "call 2", "call 3"]

    resumed = run_child(str(script), str(log), str(marker), str(store), str(task))
    assert resumed == {"task": task, "state": "completed",
                       "result": {"done": ["done 1", "done 2", "done 3", "done 4"]}}
    # Calls 1 and 2 were answered before the kill, and their answers are in the store:
    # the resumed agent is fed them and they are not made again. Call 3 was out at the
    # kill, with no answer recorded, so it is sent again: delivery is at-least-once for
    # a request that was out when the process died (a tool with side effects must be
    # idempotent, or keyed on its task and request). Call 4 is made once.
    assert calls(log) == ["call 1", "call 2", "call 3", "call 3", "call 4"]

    # Opened once more, the store has the task completed: nothing runs again.
    again = run_child(str(script), str(log), str(marker), str(store), str(task))
    assert again == resumed
    assert calls(log) == ["call 1", "call 2", "call 3", "call 3", "call 4"]
