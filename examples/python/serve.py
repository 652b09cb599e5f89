"""The research agent served over spool's HTTP API.

    python examples/python/serve.py            # http://127.0.0.1:8080, token in research.token

Then, from another terminal (the token is in research.token)::

    T="Authorization: Bearer $(cat research.token)"
    curl -s -X POST http://127.0.0.1:8080/v1/tasks -H "$T" \\
        -d '{"type": "research", "input": {"topic": "tides"}}'
    curl -s http://127.0.0.1:8080/v1/confirmations -H "$T"
    curl -s -X POST http://127.0.0.1:8080/v1/confirmations/1.5 -H "$T" -d '{"answer": true}'
    curl -s http://127.0.0.1:8080/v1/tasks/1 -H "$T"

Ctrl-C stops it; the store (research.spool) keeps every task, and the next start goes
on from it.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading

from research import make_runtime


def main(addr: str) -> None:
    token = os.environ.get("SPOOL_TOKEN") or secrets.token_urlsafe(24)
    with open("research.token", "w") as f:
        os.chmod("research.token", 0o600)
        f.write(token)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with make_runtime().serve(addr, token=token) as server:
        print(f"listening on {server.url} (token in research.token)", flush=True)
        stop.wait()
        print("stopping; everything taken in is in the store", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8080")
