"""spool's own executors from Python, one line each: spool.OpenAI against a fake
OpenAI-compatible server on loopback, spool.Subprocess running the test's Python, and
spool.MCP with a minimal stdio MCP server written by the test. Every run is bounded by
run_until_idle's timeout, and checked to have ended."""

import json
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import spool

API_KEY = "sk-test-0123456789abcdef"
MODEL = "test-model"


# --- spool.OpenAI -----------------------------------------------------------------


def completion(content):
    """A chat-completions answer with `content`, as OpenAI sends it."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
    }


class FakeOpenAI:
    """An OpenAI-compatible endpoint on 127.0.0.1: answers each POST with the next of
    `script` ((status, headers, body bytes)), and records what it was sent."""

    def __init__(self, script):
        self.script = list(script)
        self.seen = []  # (monotonic time, path, headers by lower-case name, JSON body)
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    headers = {name.lower(): value for name, value in self.headers.items()}
                    fake.seen.append((time.monotonic(), self.path, headers, body))
                    status, headers, out = fake.script.pop(0)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def fake_openai():
    made = []

    def start(*script):
        fake = FakeOpenAI(script)
        made.append(fake)
        return fake

    yield start
    for fake in made:
        fake.close()


def ok(content):
    return 200, {}, json.dumps(completion(content)).encode()


@spool.agent("exec_ask")
def ask(cx, question: str):
    answer = yield cx.llm(messages=[{"role": "user", "content": question}], temperature=0)
    return {"text": answer.text, "content": answer.content, "answer": dict(answer)}


def run(rt, task, timeout=30.0):
    """Runs `rt` until idle (at most `timeout` seconds) and returns `task`'s state,
    which must have ended."""
    rt.run_until_idle(timeout=timeout)
    state = rt.state(task)
    assert state.done, f"task {task} did not end within {timeout} s: {state}"
    return state


def test_openai_answers_the_agent_and_the_server_sees_model_messages_and_key(fake_openai):
    fake = fake_openai(ok("Tides follow the moon."))
    llm = spool.OpenAI(base_url=fake.base_url, model=MODEL, api_key=API_KEY)
    assert repr(llm) == f"OpenAI({fake.base_url}/v1/chat/completions)"
    with spool.Runtime(agents=[ask], llm=llm) as rt:
        task = rt.submit("exec_ask", question="Why do tides happen?")
        state = run(rt, task)
    assert state.state == "completed", state
    assert state.detail == {
        "text": "Tides follow the moon.",
        "content": "Tides follow the moon.",
        "answer": {
            "content": "Tides follow the moon.",
            "tool_calls": [],
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
        },
    }
    assert len(fake.seen) == 1
    _, path, headers, body = fake.seen[0]
    assert path == "/v1/chat/completions"
    assert headers["authorization"] == f"Bearer {API_KEY}"
    assert headers["x-spool-request-key"] == f"{task}:1"
    assert body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Why do tides happen?"}],
        "temperature": 0,
    }


def test_openai_tool_calls_arrive_with_their_arguments_parsed(fake_openai):
    call = completion(None)
    call["choices"][0]["message"]["tool_calls"] = [
        {"id": "call_1", "type": "function",
         "function": {"name": "search", "arguments": "{\"q\": \"tides\"}"}}]
    call["choices"][0]["finish_reason"] = "tool_calls"
    fake = fake_openai((200, {}, json.dumps(call).encode()))

    @spool.agent("exec_plan")
    def plan(cx):
        answer = yield cx.llm(messages=[{"role": "user", "content": "search"}])
        return {"text": answer.text, "calls": answer.tool_calls, "why": answer.finish_reason}

    llm = spool.OpenAI(base_url=fake.base_url, model=MODEL, api_key=API_KEY)
    with spool.Runtime(agents=[plan], llm=llm) as rt:
        task = rt.submit("exec_plan")
        state = run(rt, task)
    assert state.detail == {
        "text": None,
        "calls": [{"id": "call_1", "name": "search", "arguments": {"q": "tides"}}],
        "why": "tool_calls",
    }


def test_openai_429_with_retry_after_is_sent_again_and_the_task_gets_the_200(fake_openai):
    fake = fake_openai(
        (429, {"Retry-After": "1"}, b'{"error": {"message": "slow down"}}'),
        ok("after the wait"),
    )
    llm = spool.OpenAI(base_url=fake.base_url, model=MODEL, api_key=API_KEY)
    with spool.Runtime(agents=[ask], llm=llm) as rt:
        task = rt.submit("exec_ask", question="again?")
        state = run(rt, task)
    assert state.state == "completed", state
    assert state.detail["text"] == "after the wait"
    assert len(fake.seen) == 2
    (first, _, h1, b1), (second, _, h2, b2) = fake.seen
    # The same request sent again, with its key, not before the provider said.
    assert b1 == b2
    assert h1["x-spool-request-key"] == h2["x-spool-request-key"] == f"{task}:1"
    assert second - first >= 1.0


def test_openai_401_fails_the_task_with_a_typed_error_that_hides_the_key(fake_openai):
    # The provider quotes the key it refused, as OpenAI does.
    refusal = json.dumps({"error": {"message": f"Incorrect API key provided: {API_KEY}"}},
                         separators=(",", ":")).encode()
    fake = fake_openai((401, {}, refusal), (401, {}, refusal))
    llm = spool.OpenAI(base_url=fake.base_url, model=MODEL, api_key=API_KEY)

    @spool.agent("exec_careful")
    def careful(cx):
        try:
            yield cx.llm(messages=[{"role": "user", "content": "hi"}])
        except spool.RequestError as e:
            return {"type": type(e).__name__, "kind": e.kind, "message": str(e)}
        return "not thrown"

    with spool.Runtime(agents=[ask, careful], llm=llm) as rt:
        failed = rt.submit("exec_ask", question="hi")
        state = run(rt, failed)
        caught = rt.submit("exec_careful")
        caught_state = run(rt, caught)

    said = (f"POST {fake.base_url}/v1/chat/completions answered HTTP 401 Unauthorized: "
            '`{"error":{"message":"Incorrect API key provided: ***"}}`')
    assert state.state == "failed"
    error = state.detail
    assert type(error) is spool.TaskError
    assert error.kind == "request_failed"
    assert str(error) == f"a request failed: the executor failed: {said}"
    assert error.details == {"error": {"Failed": {"message": said}}}
    assert type(error.request_error) is spool.RequestError
    assert error.request_error.kind == "failed"
    assert API_KEY not in str(error) + repr(error.details) + str(error.request_error)
    assert caught_state.detail == {"type": "RequestError", "kind": "failed",
                                   "message": f"the executor failed: {said}"}
    # A 401 is not sent again: one request per task.
    assert len(fake.seen) == 2


def test_openai_refuses_a_url_it_cannot_use():
    with pytest.raises(ValueError) as raised:
        spool.OpenAI(base_url="ftp://127.0.0.1/", model=MODEL)
    assert str(raised.value) == "the base URL `ftp://127.0.0.1/` is not usable: it must start with http:// or https://"


# --- spool.Subprocess -------------------------------------------------------------

# Prints what it was given: its arguments and its standard input.
ECHO = "import json, sys; print(json.dumps({'argv': sys.argv[1:], 'stdin': sys.stdin.read()}))"


@spool.agent("exec_use")
def use(cx, tool: str, args: dict):
    try:
        return {"answer": (yield cx.tool(tool, args))}
    except spool.RequestError as e:
        return {"caught": type(e).__name__, "kind": e.kind, "message": str(e), "details": e.details}


def answer(stdout, status=0, stderr=""):
    return {"answer": {"status": status, "signal": None, "stdout": stdout, "stderr": stderr,
                       "truncated": {"stdout": False, "stderr": False}}}


def test_subprocess_answers_with_the_programs_output():
    echo = spool.Subprocess("echo", sys.executable, ["-c", ECHO, "first"])
    assert repr(echo) == "Subprocess(echo)"
    with spool.Runtime(agents=[use], executors=[echo]) as rt:
        # The call's `args` follow the configured ones, as words (no shell); its
        # `stdin` is the program's standard input.
        given = rt.submit("exec_use", tool="echo", args={"args": ["a b", "$HOME; ls"], "stdin": "hello\n"})
        bare = rt.submit("exec_use", tool="echo", args={})
        for task in (given, bare):
            run(rt, task)
        assert rt.result(given) == answer(
            json.dumps({"argv": ["first", "a b", "$HOME; ls"], "stdin": "hello\n"}) + "\n")
        assert rt.result(bare) == answer(json.dumps({"argv": ["first"], "stdin": ""}) + "\n")


def test_subprocess_exit_status_is_in_the_answer_and_failures_are_typed_errors_the_agent_catches():
    tools = [
        spool.Subprocess("exit3", sys.executable,
                         ["-c", "import sys; print('out'); print('bad', file=sys.stderr); sys.exit(3)"]),
        spool.Subprocess("missing", "/nonexistent/spool-test-program"),
        spool.Subprocess("slow", sys.executable, ["-c", "import time; time.sleep(60)"], timeout=0.5),
        spool.Subprocess("echo", sys.executable, ["-c", ECHO]),
    ]
    with spool.Runtime(agents=[use], executors=tools) as rt:
        tasks = {
            "exit3": rt.submit("exec_use", tool="exit3", args={}),
            "missing": rt.submit("exec_use", tool="missing", args={}),
            "slow": rt.submit("exec_use", tool="slow", args={}),
            "bad args": rt.submit("exec_use", tool="echo", args={"city": "Paris"}),
        }
        for task in tasks.values():
            run(rt, task)
        results = {name: rt.result(task) for name, task in tasks.items()}
    # A program that ran answers whatever its exit status: the status is the agent's
    # to judge.
    assert results["exit3"] == answer("out\n", status=3, stderr="bad\n")
    assert results["missing"] == {
        "caught": "RequestError", "kind": "failed",
        "message": "the executor failed: cannot start `/nonexistent/spool-test-program`: "
                   "No such file or directory (os error 2)",
        "details": {"message": "cannot start `/nonexistent/spool-test-program`: "
                               "No such file or directory (os error 2)"},
    }
    assert results["slow"] == {
        "caught": "Timeout", "kind": "timeout", "message": "timed out after 500ms",
        "details": {"after": {"secs": 0, "nanos": 500_000_000}},
    }
    assert results["bad args"] == {
        "caught": "InvalidArguments", "kind": "invalid_arguments",
        "message": "invalid arguments: unknown field `city`: the payload takes `args` and `stdin`",
        "details": {"message": "unknown field `city`: the payload takes `args` and `stdin`"},
    }


def test_subprocess_uncaught_failure_is_the_tasks_typed_error():
    missing = spool.Subprocess("missing", "/nonexistent/spool-test-program")

    @spool.agent("exec_careless")
    def careless(cx):
        return (yield cx.tool("missing", {}))

    with spool.Runtime(agents=[careless], executors=[missing]) as rt:
        task = rt.submit("exec_careless")
        state = run(rt, task)
    said = "cannot start `/nonexistent/spool-test-program`: No such file or directory (os error 2)"
    assert state.state == "failed"
    assert type(state.detail) is spool.TaskError
    assert state.detail.kind == "request_failed"
    assert str(state.detail) == f"a request failed: the executor failed: {said}"
    assert type(state.detail.request_error) is spool.RequestError
    assert str(state.detail.request_error) == f"the executor failed: {said}"


def test_subprocess_environment_is_empty_but_for_env_and_allow_env(monkeypatch):
    monkeypatch.setenv("SPOOL_TEST_ALLOWED", "let in")
    monkeypatch.setenv("SPOOL_TEST_SECRET", "kept out")
    monkeypatch.setenv("SPOOL_TEST_BOTH", "from the parent")
    monkeypatch.delenv("SPOOL_TEST_UNSET", raising=False)
    # `env` prints its environment exactly (a Python child would add LC_CTYPE itself
    # in a C locale).
    printenv = shutil.which("env")
    assert printenv is not None
    tools = [
        spool.Subprocess("env", printenv, env={"GREETING": "hi", "SPOOL_TEST_BOTH": "configured"},
                         allow_env=["SPOOL_TEST_ALLOWED", "SPOOL_TEST_BOTH", "SPOOL_TEST_UNSET"]),
        spool.Subprocess("bare", printenv),
    ]
    with spool.Runtime(agents=[use], executors=tools) as rt:
        configured = rt.submit("exec_use", tool="env", args={})
        bare = rt.submit("exec_use", tool="bare", args={})
        for task in (configured, bare):
            run(rt, task)
        # Allowed variables that are set, then the configured ones, which win.
        assert rt.result(configured) == answer(
            "GREETING=hi\nSPOOL_TEST_ALLOWED=let in\nSPOOL_TEST_BOTH=configured\n")
        assert rt.result(bare) == answer("")


# --- spool.MCP --------------------------------------------------------------------

# A minimal MCP server over stdio: JSON-RPC 2.0, one message a line. It logs every
# message it gets to the file named by its argument.
MCP_SERVER = r'''
import json, sys

log = open(sys.argv[1], "a")
TOOLS = [
    {"name": "add", "description": "Add two integers.",
     "inputSchema": {"type": "object",
                     "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                     "required": ["a", "b"]}},
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object"}},
]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    log.write(line.strip() + "\n")
    log.flush()
    method, id_ = message.get("method"), message.get("id")
    if id_ is None:
        continue  # a notification: no answer
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"],
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "calc", "version": "1.0.0"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call" and message["params"]["name"] == "add":
        args = message["params"]["arguments"]
        result = {"content": [{"type": "text", "text": f"{args['a']} + {args['b']}"},
                              {"type": "text", "text": str(args["a"] + args["b"])}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "the disk is on fire"}], "isError": True}
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "no such method"}})
        continue
    send({"jsonrpc": "2.0", "id": id_, "result": result})
'''


@pytest.fixture
def mcp_config(tmp_path):
    """(config path, log path) of the `calc` server."""
    server = tmp_path / "calc_server.py"
    server.write_text(MCP_SERVER)
    log = tmp_path / "calc.log"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "calc": {"command": sys.executable, "args": [str(server), str(log)], "timeout": 20},
    }}))
    return config, log


def test_mcp_tools_are_called_as_server__tool(mcp_config):
    config, log = mcp_config
    mcp = spool.MCP(config)
    assert repr(mcp) == "MCP(2 tools)"
    assert mcp.definitions() == [
        {"type": "function", "function": {
            "name": "calc__add", "description": "Add two integers.",
            "parameters": {"type": "object",
                           "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "required": ["a", "b"]}}},
        {"type": "function", "function": {
            "name": "calc__fail", "description": "Always fails.",
            "parameters": {"type": "object"}}},
    ]

    @spool.agent("exec_sum")
    def sum_(cx, a: int, b: int):
        total = yield cx.tool("calc__add", {"a": a, "b": b})
        try:
            yield cx.tool("calc__fail", {})
        except spool.RequestError as e:
            return {"total": total, "caught": type(e).__name__, "kind": e.kind, "message": str(e)}
        return "not thrown"

    with spool.Runtime(agents=[sum_], executors=[mcp]) as rt:
        task = rt.submit("exec_sum", a=2, b=3)
        state = run(rt, task)
    # A text result is its text blocks joined by newlines; isError is a failed request.
    assert state.detail == {
        "total": "2 + 3\n5",
        "caught": "RequestError",
        "kind": "failed",
        "message": "the executor failed: MCP tool `calc__fail` reported an error: the disk is on fire",
    }
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert [m["method"] for m in seen] == [
        "initialize", "notifications/initialized", "tools/list", "tools/call", "tools/call"]
    assert [(m["params"]["name"], m["params"]["arguments"]) for m in seen[3:]] == [
        ("add", {"a": 2, "b": 3}), ("fail", {})]


def test_mcp_refuses_a_bad_configuration(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mcpServers": {"calc": {"command": sys.executable, "args": ["x", 2]}}}))
    with pytest.raises(ValueError) as raised:
        spool.MCP(bad)
    assert str(raised.value) == "MCP server `calc`: `args[1]` must be a string, not a number (2)"
    missing = tmp_path / "missing.json"
    with pytest.raises(ValueError) as raised:
        spool.MCP(missing)
    assert str(raised.value) == (
        f"cannot read the MCP configuration {missing}: No such file or directory (os error 2)")
