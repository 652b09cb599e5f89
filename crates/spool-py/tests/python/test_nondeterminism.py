"""A generator whose code changed under a recorded run: reported as spool.Nondeterminism
naming the task, the step and the request, from a store and from a snapshot; the
unchanged code resumes."""

import pytest

import spool
from spool.testing import TestScheduler


def writer_agent(strict):
    """The agent ``writer``: version 1 asks for a review of the draft, version 2 (``strict``)
    asks for it with one more argument, so its second request differs."""

    @spool.agent("writer")
    def writer(cx, topic: str):
        draft = yield cx.llm(prompt=f"draft {topic}")
        args = {"text": draft.text, "strict": True} if strict else {"text": draft.text}
        review = yield cx.tool("review", args)
        ok = yield cx.confirm("publish?")
        return {"draft": draft.text, "review": review, "ok": ok}

    return writer


V1, V2 = writer_agent(False), writer_agent(True)


def runtime(store, agent):
    return spool.Runtime(store=store, agents=[agent], llm={"text": "d1"},
                         executors=[spool.fixed("tool:review", "fine")])


def test_a_changed_generator_on_a_store_is_nondeterminism_at_its_step(tmp_path):
    store = tmp_path / "run.spool"
    with runtime(store, V1) as rt:
        task = rt.submit("writer", topic="x")
        rt.run_until_idle()
        assert rt.state(task) == ("waiting", "confirm")

    with pytest.raises(spool.Nondeterminism) as raised:
        runtime(store, V2)
    error = raised.value
    assert isinstance(error, spool.SpoolError)
    # Step 1 is the task's second poll (from 0), where it now asks for request 2 with
    # other arguments than the store recorded (the runtime's checkpoint at close holds
    # the requests the task had out).
    assert (error.task, error.step, error.request) == (task, 1, 2)
    assert error.recorded == 'request 2 tool:review {"text":"d1"}'
    assert error.got == 'request 2 tool:review {"strict":true,"text":"d1"}'
    assert str(error) == (
        "task 1 does not replay: at poll 1 it differs from its journal:\n"
        '  recorded: request 2 tool:review {"text":"d1"}\n'
        '  now:      request 2 tool:review {"strict":true,"text":"d1"}'
    )

    # The store is untouched by the refused open: the unchanged code resumes from it.
    with runtime(store, V1) as rt:
        rt.run_until_idle()
        assert rt.state(task) == ("waiting", "confirm")
        (confirm,) = rt.confirmations()
        assert (confirm.task, confirm.request, confirm.question) == (task, 3, "publish?")
        rt.answer(confirm, True)
        rt.run_until_idle()
        assert rt.result(task) == {"draft": "d1", "review": "fine", "ok": True}


def test_a_changed_generator_under_a_snapshot_is_nondeterminism_at_its_step():
    s = TestScheduler(agents=[V1])
    s.mock_llm({"text": "d1"})
    s.mock_tool("review", "fine")
    task = s.submit("writer", topic="x")
    s.run_until_quiet()
    snapshot = s.snapshot()

    with pytest.raises(spool.Nondeterminism) as raised:
        TestScheduler.restore(snapshot, agents=[V2])
    error = raised.value
    assert (error.task, error.step, error.request) == (task, 1, 2)
    assert error.recorded == 'request 2 tool:review {"text":"d1"}'
    assert error.got == 'request 2 tool:review {"strict":true,"text":"d1"}'
    assert str(error) == (
        "task 1 does not replay: at poll 1 it differs from its journal:\n"
        '  recorded: request 2 tool:review {"text":"d1"}\n'
        '  now:      request 2 tool:review {"strict":true,"text":"d1"}'
    )

    # The same code restores, and the held confirmation is asked again at the first
    # step after the restore.
    restored = TestScheduler.restore(snapshot, agents=[V1])
    assert restored.state(task) == ("waiting", "confirm")
    restored.run_until_quiet()
    (confirm,) = restored.confirmations()
    assert (confirm.task, confirm.request) == (task, 3)
    restored.answer(confirm, False)
    restored.run_until_quiet()
    assert restored.result(task) == {"draft": "d1", "review": "fine", "ok": False}


def test_a_change_after_the_last_recorded_request_is_not_nondeterminism(tmp_path):
    """Only what was recorded is checked: code that changes what it does after the
    request it waits on resumes, and runs the new code from there."""

    @spool.agent("writer")
    def v3(cx, topic: str):
        draft = yield cx.llm(prompt=f"draft {topic}")
        review = yield cx.tool("review", {"text": draft.text})
        ok = yield cx.confirm("publish?")
        return {"version": 3, "ok": ok}

    store = tmp_path / "run.spool"
    with runtime(store, V1) as rt:
        task = rt.submit("writer", topic="x")
        rt.run_until_idle()
    with runtime(store, v3) as rt:
        rt.run_until_idle()
        (confirm,) = rt.confirmations()
        rt.answer(confirm, True)
        rt.run_until_idle()
        assert rt.result(task) == {"version": 3, "ok": True}


def test_patched_is_false_for_a_task_recorded_before_the_change(tmp_path):
    """``cx.patched(name)`` lets new code run beside tasks recorded by the old: the old
    task replays the old branch (and so is not nondeterministic), a new task takes the
    new one."""

    @spool.agent("asker")
    def old(cx):
        answer = yield cx.llm(prompt="old")
        ok = yield cx.confirm("go on?")
        return {"answer": answer.text, "ok": ok}

    @spool.agent("asker")
    def new(cx):
        prompt = "new" if cx.patched("new-prompt") else "old"
        answer = yield cx.llm(prompt=prompt)
        ok = yield cx.confirm("go on?")
        return {"answer": answer.text, "ok": ok}

    def open_with(agent):
        return spool.Runtime(store=tmp_path / "run.spool", agents=[agent],
                             llm=lambda payload: {"text": payload["prompt"]})

    with open_with(old) as rt:
        recorded = rt.submit("asker")
        rt.run_until_idle()
    with open_with(new) as rt:
        fresh = rt.submit("asker")
        rt.run_until_idle()
        for confirm in rt.confirmations():
            rt.answer(confirm, True)
        rt.run_until_idle()
        assert rt.result(recorded) == {"answer": "old", "ok": True}
        assert rt.result(fresh) == {"answer": "new", "ok": True}
