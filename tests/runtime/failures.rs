//! Failures in the runtime: kinds nobody serves, tasks that panic, executors that die.

use serde_json::json;
use spool::{
    AgentTask, Kind, NewTask, Request, RequestError, Runtime, Step, TaskError, TaskId, TaskState,
    from_fn, task_fn,
};

use crate::support::{LIMIT, within};

/// Makes one request and finishes with its answer, or with its error passed on.
fn ask_once(request: Request) -> impl AgentTask {
    let mut request = Some(request);
    task_fn("ask-once", move |cx| {
        if let Some(request) = request.take() {
            cx.request(request);
            return Step::Wait;
        }
        match cx.take_answer() {
            Some(answer) => Step::Done(answer.result.map_err(|e| e.into_task_error(answer.number))),
            None => Step::fail("resumed without an answer"),
        }
    })
}

fn run_until_idle(runtime: Runtime) -> Runtime {
    within(LIMIT, "run_until_idle", move || {
        let mut runtime = runtime;
        runtime.run_until_idle();
        runtime
    })
}

fn echo_llm() -> Runtime {
    Runtime::builder()
        .executor(
            Kind::Llm,
            from_fn(|out| Ok(out.request.payload.value().clone())),
        )
        .build()
}

#[test]
fn kind_without_executor_fails_only_that_task() {
    let mut runtime = echo_llm();
    let mut submit = |request| runtime.submit(NewTask::new(ask_once(request))).unwrap().id;
    let before = submit(Request::llm(json!("before")));
    let tool = submit(Request::tool("missing", json!({})));
    let custom = submit(Request::new(Kind::custom("search"), json!("q")));
    let after = submit(Request::llm(json!("after")));

    let runtime = run_until_idle(runtime);

    assert_eq!(
        runtime.task_state(before),
        Some(TaskState::Completed(Ok(json!("before"))))
    );
    assert_eq!(
        runtime.task_state(after),
        Some(TaskState::Completed(Ok(json!("after"))))
    );
    let no_executor = |task: TaskId, kind: Kind| {
        Some(TaskState::Completed(Err(TaskError::NoExecutor {
            task,
            kind,
        })))
    };
    assert_eq!(
        runtime.task_state(tool),
        no_executor(tool, Kind::tool("missing"))
    );
    assert_eq!(
        runtime.task_state(custom),
        no_executor(custom, Kind::custom("search"))
    );
    assert_eq!(
        TaskError::NoExecutor {
            task: custom,
            kind: Kind::custom("search")
        }
        .to_string(),
        "task 3 made a `search` request, and no executor serves that kind"
    );
    let stats = runtime.scheduler().stats();
    assert_eq!(
        (stats.completed, stats.failed, stats.dropped_answers),
        (2, 2, 0)
    );
}

#[test]
fn panicking_task_fails_and_the_others_finish() {
    let mut runtime = echo_llm();
    let mut ids = Vec::new();
    for n in 0..5 {
        let mut asked = false;
        let task = task_fn("maybe-panics", move |cx| {
            if !asked {
                asked = true;
                cx.llm(json!(n));
                return Step::Wait;
            }
            let answer = cx
                .take_answer()
                .and_then(|a| a.result.ok())
                .unwrap_or_default();
            if n == 2 {
                panic!("boom after {answer}");
            }
            Step::done(answer)
        });
        ids.push(runtime.submit(NewTask::new(task)).unwrap().id);
    }

    let runtime = run_until_idle(runtime);

    for (n, id) in (0..5).zip(&ids) {
        let expected = if n == 2 {
            TaskState::Completed(Err(TaskError::Panicked {
                task: *id,
                message: "boom after 2".into(),
            }))
        } else {
            TaskState::Completed(Ok(json!(n)))
        };
        assert_eq!(runtime.task_state(*id), Some(expected));
    }
    let stats = runtime.scheduler().stats();
    assert_eq!((stats.completed, stats.failed), (4, 1));
}

#[test]
fn dead_executor_fails_outstanding_and_later_requests() {
    let mut runtime = Runtime::builder()
        .executor(
            Kind::Llm,
            from_fn(|out| Ok(out.request.payload.value().clone())),
        )
        .executor(
            Kind::tool("fragile"),
            from_fn(|out| {
                if out.request.payload == json!("die") {
                    panic!("fragile tool broke");
                }
                Ok(out.request.payload.value().clone())
            }),
        )
        .build();
    let mut submit = |request| runtime.submit(NewTask::new(ask_once(request))).unwrap().id;
    // One batch: the first request kills the executor; the two after it are lost with it.
    let killer = submit(Request::tool("fragile", json!("die")));
    let second = submit(Request::tool("fragile", json!(2)));
    let third = submit(Request::tool("fragile", json!(3)));
    let llm = submit(Request::llm(json!("fine")));

    let mut runtime = run_until_idle(runtime);

    let died = || {
        Some(TaskState::Completed(Err(TaskError::Request {
            number: 1,
            error: RequestError::ExecutorDied {
                kind: "tool:fragile".into(),
                message: "fragile tool broke".into(),
            },
        })))
    };
    for id in [killer, second, third] {
        assert_eq!(runtime.task_state(id), died(), "task {id}");
    }
    assert_eq!(
        runtime.task_state(llm),
        Some(TaskState::Completed(Ok(json!("fine"))))
    );

    // A request made after the death fails the same way, at once.
    let later = runtime
        .submit(NewTask::new(ask_once(Request::tool("fragile", json!(4)))))
        .unwrap()
        .id;
    let llm_later = runtime
        .submit(NewTask::new(ask_once(Request::llm(json!("still fine")))))
        .unwrap()
        .id;
    let runtime = run_until_idle(runtime);
    assert_eq!(runtime.task_state(later), died());
    assert_eq!(
        runtime.task_state(llm_later),
        Some(TaskState::Completed(Ok(json!("still fine"))))
    );
    let Some(TaskState::Completed(Err(error))) = runtime.task_state(later) else {
        unreachable!()
    };
    assert_eq!(
        error.to_string(),
        "request 1 failed: the executor for `tool:fragile` died: fragile tool broke"
    );
    let stats = runtime.scheduler().stats();
    assert_eq!(
        (stats.requests, stats.answers, stats.dropped_answers),
        (6, 6, 0)
    );
    assert_eq!((stats.completed, stats.failed), (2, 4));
}

/// A journal that takes its first `ok` commits (the submission's), then
/// refuses every commit (as a writer fenced by a newer owner of its store does).
struct RefusesAfterFirst {
    ok: usize,
    commits: usize,
}

impl spool::JournalSink for RefusesAfterFirst {
    fn start(&mut self, _snapshot: &[u8]) -> Result<(), spool::JournalError> {
        Ok(())
    }

    fn record(&mut self, _entry: &spool::JournalEntry) -> Result<(), spool::JournalError> {
        Ok(())
    }

    fn commit(&mut self) -> Result<spool::Commit, spool::JournalError> {
        self.commits += 1;
        if self.commits > self.ok {
            return Err(spool::JournalError::Sink(std::sync::Arc::new(
                std::io::Error::other("taken over by another writer"),
            )));
        }
        Ok(spool::Commit::Durable)
    }
}

/// Completes at once; saveable, as a journaled task must be.
#[derive(serde::Serialize, serde::Deserialize)]
struct Once;

impl AgentTask for Once {
    fn poll(&mut self, _cx: &mut spool::TaskContext<'_>) -> Step {
        Step::done(json!("done"))
    }

    fn type_name(&self) -> &'static str {
        "once"
    }

    fn save(&self) -> Result<spool::SavedTask, spool::StateError> {
        spool::SavedTask::serde(self)
    }
}

/// What a loop holds after its journal refused a group may never be committed: no
/// publication shows it: the task's poll (running, then completed) was in a refused
/// group, and is never published.
#[test]
fn nothing_the_journal_refused_is_published() {
    let published = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&published);
    let mut runtime = Runtime::builder()
        .registry(spool::TaskRegistry::new().with_serde::<Once>("once"))
        .journal(RefusesAfterFirst { ok: 1, commits: 0 })
        .publish(std::time::Duration::ZERO, move |publication| {
            let mut seen = seen.lock().expect("the list");
            seen.extend(
                publication
                    .take_events()
                    .into_iter()
                    .map(|e| e.to.to_string()),
            );
        })
        .build();
    runtime
        .submit(NewTask::new(Once))
        .expect("the submission's group is taken");
    let runtime = run_until_idle(runtime);
    assert!(runtime.journal_error().is_some());
    let published = published.lock().expect("the list").clone();
    // The submission and the poll were in the loop's first turn, whose group was
    // refused: nothing of it is shown.
    assert_eq!(published, Vec::<String>::new());
}
