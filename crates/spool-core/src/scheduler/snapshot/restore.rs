//! Putting a scheduler together again from a [`Snapshot`](crate::snapshot::Snapshot):
//! the tasks, then what follows from them, then the queues, keys, gates and schedules,
//! and last a check that they all agree.

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use crate::snapshot::{PhaseRecord, PolicyRecord, SnapshotData, StatusRecord};
    use crate::{
        AgentTask, Config, Fingerprint, NewTask, Request, Response, RestoreError, SavedTask,
        Scheduler, Snapshot, StateError, Step, TaskContext, TaskId, TaskRegistry, Time,
    };

    /// Asks one LLM question, then finishes.
    #[derive(Debug, Serialize, Deserialize)]
    struct Ask {
        asked: bool,
    }

    impl AgentTask for Ask {
        fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
            if self.asked {
                return Step::done(1);
            }
            self.asked = true;
            cx.request(Request::llm(json!("question")));
            Step::Wait
        }
        fn type_name(&self) -> &'static str {
            "ask"
        }
        fn save(&self) -> Result<SavedTask, StateError> {
            SavedTask::serde(self)
        }
    }

    fn registry() -> TaskRegistry {
        TaskRegistry::new().with_serde::<Ask>("ask")
    }

    /// Agents `default` and `a`; task 1 (agent `a`, key `k`) ended, task 2 waiting for
    /// its answer, task 3 ready.
    fn fixture() -> Snapshot {
        let mut s = Scheduler::new(Config::new());
        let ask = || NewTask::new(Ask { asked: false });
        s.submit(Time::ZERO, ask().agent("a").key("k")).unwrap();
        while s.step(Time::ZERO).is_some() {}
        let key = s.poll_request().unwrap().key;
        let _ = s.handle_response(Time::ZERO, Response::new(key, Ok(json!(1))));
        while s.step(Time::ZERO).is_some() {}
        s.submit(Time::ZERO, ask()).unwrap();
        while s.step(Time::ZERO).is_some() {}
        s.submit(Time::ZERO, ask()).unwrap();
        s.snapshot().unwrap()
    }

    fn restore(snapshot: &Snapshot) -> Option<RestoreError> {
        Scheduler::restore(snapshot, &registry()).err()
    }

    fn invalid(reason: &str) -> RestoreError {
        RestoreError::Invalid(reason.to_owned())
    }

    type Fault = fn(&mut SnapshotData);

    #[test]
    fn the_fixture_restores() {
        let snapshot = fixture();
        let d = &snapshot.data;
        assert_eq!(d.tasks.len(), 3);
        assert_eq!(d.ended_keys.len(), 1);
        assert_eq!(d.ready.len(), 1);
        assert_eq!(restore(&snapshot), None);
    }

    /// Each way a snapshot can fail to hang together, found by the restore itself
    /// (past the format's own checks), is the exact error.
    #[test]
    fn each_inconsistency_is_its_exact_error() {
        let bad_json = serde_json::from_str::<serde_json::Value>("{")
            .unwrap_err()
            .to_string();
        let cases: Vec<(Fault, RestoreError)> = vec![
            (
                |d| d.config.policy = PolicyRecord::Custom("mine".into()),
                RestoreError::UnknownPolicy("mine".into()),
            ),
            (
                |d| d.agents.push(("a".into(), 1)),
                invalid("agent `a` is listed twice"),
            ),
            (
                |d| d.tasks[1].type_name = "nope".into(),
                RestoreError::UnknownType {
                    task: TaskId(2),
                    type_name: "nope".into(),
                },
            ),
            (
                |d| d.tasks[1].phase = PhaseRecord::Done,
                invalid("task 2 is done but its body is live"),
            ),
            (
                |d| d.tasks[0].phase = PhaseRecord::Waiting,
                invalid("task 1 is live but its body is a result"),
            ),
            (
                |d| {
                    if let StatusRecord::InFlight { out, .. } = &mut d.tasks[1].pending[0].status {
                        *out = 3;
                    }
                },
                invalid("task 2's request 1 has an unknown state 3"),
            ),
            (
                |d| {
                    if let StatusRecord::InFlight { payload, .. } =
                        &mut d.tasks[1].pending[0].status
                    {
                        *payload = "{".into();
                    }
                },
                invalid(&format!(
                    "task 2 holds JSON that does not parse: {bad_json}"
                )),
            ),
            (
                |d| {
                    let key = d.ended_keys[0].clone();
                    d.ended_keys.push(key);
                },
                invalid("the key `k` is held by two tasks"),
            ),
            (
                |d| {
                    d.addenda
                        .key_fingerprints
                        .push(("nobody".into(), Fingerprint([0; 16])))
                },
                invalid("the key `nobody` has a fingerprint but no task holds it"),
            ),
            (
                |d| d.ready.clear(),
                invalid("the run queue does not hold exactly the ready tasks"),
            ),
            (
                |d| d.tasks[1].phase = PhaseRecord::Queued,
                invalid("the slot queue does not hold exactly the tasks waiting for a slot"),
            ),
            (
                |d| d.tasks[1].phase = PhaseRecord::Blocked,
                invalid("task 2 waits for dependencies but has none"),
            ),
        ];
        for (fault, error) in cases {
            let mut snapshot = fixture();
            fault(&mut snapshot.data);
            assert_eq!(restore(&snapshot), Some(error));
        }
    }

    /// With several faults at once, the restore reports the one it meets first: the
    /// policy, the agents, the tasks (in id order), the keys, their fingerprints, and
    /// last the queues checked against the tasks.
    #[test]
    fn the_first_fault_in_restore_order_is_reported() {
        let faults: Vec<(Fault, RestoreError)> = vec![
            (
                |d| d.config.policy = PolicyRecord::Custom("mine".into()),
                RestoreError::UnknownPolicy("mine".into()),
            ),
            (
                |d| d.agents.push(("a".into(), 1)),
                invalid("agent `a` is listed twice"),
            ),
            (
                |d| d.tasks[0].phase = PhaseRecord::Waiting,
                invalid("task 1 is live but its body is a result"),
            ),
            (
                |d| d.tasks[1].phase = PhaseRecord::Done,
                invalid("task 2 is done but its body is live"),
            ),
            (
                |d| {
                    let key = d.ended_keys[0].clone();
                    d.ended_keys.push(key);
                },
                invalid("the key `k` is held by two tasks"),
            ),
            (
                |d| {
                    d.addenda
                        .key_fingerprints
                        .push(("nobody".into(), Fingerprint([0; 16])))
                },
                invalid("the key `nobody` has a fingerprint but no task holds it"),
            ),
            (
                |d| d.ready.clear(),
                invalid("the run queue does not hold exactly the ready tasks"),
            ),
        ];
        for first in 0..faults.len() {
            let mut snapshot = fixture();
            for (fault, _) in &faults[first..] {
                fault(&mut snapshot.data);
            }
            assert_eq!(restore(&snapshot), Some(faults[first].1.clone()), "{first}");
        }
    }
}
