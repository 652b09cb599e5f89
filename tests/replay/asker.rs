//! A saveable explicit task for the journal tests.

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool::{AgentTask, Request, SavedTask, Step, TaskContext, TaskRegistry};

/// Asks `left` LLM questions one after another, adding up the answers, then finishes
/// with the sum.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Asker {
    pub(crate) left: u32,
    pub(crate) sum: i64,
    pub(crate) asked: bool,
}

impl Asker {
    pub(crate) fn new(questions: u32) -> Asker {
        Asker {
            left: questions,
            sum: 0,
            asked: false,
        }
    }
}

impl AgentTask for Asker {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.asked {
            match cx.take_answer() {
                Some(answer) => match answer.result {
                    Ok(value) => self.sum += value.as_i64().unwrap_or(0),
                    Err(error) => return Step::Done(Err(error.into_task_error(answer.number))),
                },
                None => return Step::fail("resumed without an answer"),
            }
            self.left -= 1;
        }
        if self.left == 0 {
            return Step::done(self.sum);
        }
        self.asked = true;
        cx.request(Request::llm(json!({"left": self.left})));
        Step::Wait
    }

    fn type_name(&self) -> &'static str {
        "asker"
    }

    fn save(&self) -> Result<SavedTask, String> {
        SavedTask::serde(self)
    }
}

/// The registry of the type above.
pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Asker>("asker")
}
