"""spool's HTTP API served for Python agents: submit, poll, confirm, and what is refused.
Loopback only; every wait is a poll with a deadline."""

import json
import time
import urllib.error
import urllib.request

import pytest

import spool

TOKEN = "test-token-for-serve"


@spool.agent("greet")
def greet(cx, name: str):
    answer = yield cx.llm(prompt=f"greet {name}")
    ok = yield cx.confirm(f"send to {name}?")
    return {"greeting": answer.text, "sent": ok}


@pytest.fixture
def server():
    rt = spool.Runtime(agents=[greet], llm={"text": "hello"})
    served = rt.serve("127.0.0.1:0", token=TOKEN)
    yield served
    served.stop()


def call(server, method, path, body=None, token=TOKEN):
    """(status, content type, JSON body) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, method=method, data=data)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Content-Type"), json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), json.loads(e.read())


def poll(server, path, done, seconds=20.0):
    """GETs ``path`` until ``done(body)``; fails with the last body after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        status, _, body = call(server, "GET", path)
        assert status == 200, body
        if done(body):
            return body
        if time.monotonic() > deadline:
            pytest.fail(f"GET {path} did not get there within {seconds} s: {body}")
        time.sleep(0.01)


def test_a_python_agent_type_runs_over_http(server):
    assert server.url.startswith("http://127.0.0.1:")
    assert server.token == TOKEN
    status, content_type, body = call(server, "POST", "/v1/tasks", {"type": "greet", "input": {"name": "ada"}})
    assert (status, content_type) == (202, "application/json")
    assert body == {"id": 1, "admission": {"status": "ready"}}

    confirmations = poll(server, "/v1/confirmations", lambda b: len(b) == 1)
    assert (confirmations[0]["key"], confirmations[0]["task"], confirmations[0]["question"]) == (
        "1.2", 1, "send to ada?")
    status, _, body = call(server, "POST", "/v1/confirmations/1.2", {"answer": True})
    assert (status, body) == (202, {"answered": True, "key": "1.2"})

    task = poll(server, "/v1/tasks/1", lambda b: b["state"] not in ("ready", "running", "waiting"))
    assert (task["type"], task["state"], task["result"], task["error"]) == (
        "greet", "completed", {"greeting": "hello", "sent": True}, None)
    assert server.runtime.result(1) == {"greeting": "hello", "sent": True}


def test_the_python_agents_are_the_task_types(server):
    status, _, body = call(server, "GET", "/v1/task-types")
    assert status == 200
    assert body == [{"name": "greet", "input_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": False,
    }}]


def test_a_request_without_the_token_is_refused(server):
    body = {"type": "greet", "input": {"name": "ada"}}
    assert call(server, "POST", "/v1/tasks", body, token=None) == (
        401, "application/problem+json",
        {"type": "https://spool.invalid/problems/unauthorized", "title": "Unauthorized", "status": 401,
         "detail": "this request needs the header `Authorization: Bearer <token>`"})
    assert call(server, "GET", "/v1/tasks/1", token="not-the-token") == (
        401, "application/problem+json",
        {"type": "https://spool.invalid/problems/unauthorized", "title": "Unauthorized", "status": 401,
         "detail": "the bearer token is not the server's"})


def test_an_unknown_type_and_a_bad_input_are_refused(server):
    assert call(server, "POST", "/v1/tasks", {"type": "nope", "input": {}}) == (
        422, "application/problem+json",
        {"type": "https://spool.invalid/problems/invalid", "title": "Invalid request", "status": 422,
         "detail": "/type: unknown task type `nope` (known: greet)",
         "errors": [{"path": "/type", "message": "unknown task type `nope` (known: greet)"}]})
    assert call(server, "POST", "/v1/tasks", {"type": "greet", "input": {"name": 3}}) == (
        422, "application/problem+json",
        {"type": "https://spool.invalid/problems/invalid", "title": "Invalid request", "status": 422,
         "detail": "/input/name: expected a string, got 3",
         "errors": [{"path": "/input/name", "message": "expected a string, got 3"}]})
