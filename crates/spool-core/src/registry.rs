//! Task types (and custom policies) by name: what makes a task from its type name —
//! from its saved state on restore and journal replay, or from a JSON input for a
//! schedule or the HTTP API.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::async_task::{AsyncTask, Cx, RemakeError};
use crate::id::TaskId;
use crate::policy::{Policy, PolicyFactory};
use crate::saved::{SavedTask, StateError};
use crate::state::Outcome;
use crate::task::{AgentTask, Step, TaskContext};

type Decoder = Arc<dyn Fn(&[u8]) -> Result<Box<dyn AgentTask>, StateError> + Send + Sync>;
type AsyncMaker = Arc<dyn Fn(Value) -> AsyncTask + Send + Sync>;
type InputMaker = Arc<dyn Fn(&Value) -> Result<Box<dyn AgentTask>, String> + Send + Sync>;

/// Why a task could not be made from a type name and an input
/// ([`TaskRegistry::make`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MakeError {
    /// No type of this name is registered.
    #[error("the task type {0:?} is not registered")]
    UnknownType(String),
    /// The type refused the input.
    #[error("the task type {type_name:?} refused its input: {reason}")]
    BadInput {
        /// The type.
        type_name: String,
        /// What it said.
        reason: String,
    },
}

/// Task types (and custom policies) by name, for [`Scheduler::restore`](crate::Scheduler::restore).
///
/// # Example
/// ```
/// use serde::{Deserialize, Serialize};
/// use spool_core::{AgentTask, SavedTask, StateError, Step, TaskContext, TaskRegistry};
///
/// #[derive(Serialize, Deserialize)]
/// struct Counter { left: u32 }
///
/// impl AgentTask for Counter {
///     fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
///         self.left = self.left.saturating_sub(1);
///         if self.left == 0 { Step::done("done") } else { Step::Yield }
///     }
///     fn type_name(&self) -> &'static str { "counter" }
///     fn save(&self) -> Result<SavedTask, StateError> { SavedTask::serde(self) }
/// }
///
/// let registry = TaskRegistry::new().with_serde::<Counter>("counter");
/// assert!(registry.knows("counter"));
/// ```
#[derive(Clone, Default)]
pub struct TaskRegistry {
    decoders: BTreeMap<&'static str, Decoder>,
    makers: BTreeMap<&'static str, AsyncMaker>,
    inputs: BTreeMap<&'static str, InputMaker>,
    policies: BTreeMap<&'static str, PolicyFactory>,
    input_schemas: BTreeMap<&'static str, Value>,
}

impl fmt::Debug for TaskRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskRegistry")
            .field("types", &self.decoders.keys().collect::<Vec<_>>())
            .field("async", &self.makers.keys().collect::<Vec<_>>())
            .field("policies", &self.policies.keys().collect::<Vec<_>>())
            .field(
                "input_schemas",
                &self.input_schemas.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl TaskRegistry {
    /// An empty registry.
    pub fn new() -> TaskRegistry {
        TaskRegistry::default()
    }

    /// Registers the type `name` (its [`AgentTask::type_name`]) with a decoder of what
    /// its [`AgentTask::save`] wrote.
    #[must_use]
    pub fn with<F>(mut self, name: &'static str, decode: F) -> TaskRegistry
    where
        F: Fn(&[u8]) -> Result<Box<dyn AgentTask>, StateError> + Send + Sync + 'static,
    {
        self.decoders.insert(name, Arc::new(decode));
        self
    }

    /// Registers the serde type `T` under `name`, saved with [`SavedTask::serde`].
    #[must_use]
    pub fn with_serde<T>(self, name: &'static str) -> TaskRegistry
    where
        T: AgentTask + DeserializeOwned,
    {
        self.with(name, |bytes| {
            SavedTask::decode_serde::<T>(bytes).map(|task| Box::new(task) as Box<dyn AgentTask>)
        })
    }

    /// Registers the async task `name`: `f` makes its future from its input, as given
    /// to [`AsyncTask::replayable`]. On restore the task is made again and replayed.
    #[must_use]
    pub fn with_async<F, Fut>(mut self, name: &'static str, f: F) -> TaskRegistry
    where
        F: Fn(Cx, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let f = Arc::new(f);
        self.makers.insert(
            name,
            Arc::new(move |input| {
                let f = Arc::clone(&f);
                AsyncTask::replayable(name, input, move |cx, input| f(cx, input))
            }),
        );
        self
    }

    /// Registers a custom run-queue policy by its [`Policy::name`].
    #[must_use]
    pub fn with_policy<F>(mut self, name: &'static str, factory: F) -> TaskRegistry
    where
        F: Fn() -> Box<dyn Policy> + Send + Sync + 'static,
    {
        self.policies.insert(name, Arc::new(factory));
        self
    }

    /// Registers how a task of type `name` is made from an input (for schedules, and
    /// anything else that starts a task by type name and JSON input; see
    /// [`make`](TaskRegistry::make)). Without it, a type registered with a decoder is
    /// made by decoding the input as its saved state.
    #[must_use]
    pub fn with_input<F>(mut self, name: &'static str, make: F) -> TaskRegistry
    where
        F: Fn(&Value) -> Result<Box<dyn AgentTask>, String> + Send + Sync + 'static,
    {
        self.inputs.insert(name, Arc::new(make));
        self
    }

    /// Declares the JSON Schema the input of task type `name` must fit (checked by the
    /// HTTP API before a task is made). The core does not check it (it has no JSON
    /// Schema library): `spool_exec::Schema` compiles and checks it. Declaring a schema
    /// does not register the type; a second declaration replaces the first.
    ///
    /// # Example
    /// ```
    /// use serde_json::json;
    /// use spool_core::TaskRegistry;
    ///
    /// let prompt = json!({
    ///     "type": "object",
    ///     "properties": {"prompt": {"type": "string", "minLength": 1}},
    ///     "required": ["prompt"],
    /// });
    /// let registry = TaskRegistry::new()
    ///     .with_input("agent", |input| Err(format!("not made in this example: {input}")))
    ///     .with_input_schema("agent", prompt.clone());
    /// assert_eq!(registry.input_schema("agent"), Some(&prompt));
    /// assert_eq!(registry.input_schema("other"), None);
    /// ```
    #[must_use]
    pub fn with_input_schema(mut self, name: &'static str, schema: Value) -> TaskRegistry {
        self.input_schemas.insert(name, schema);
        self
    }

    /// The input schema of task type `name`, if one was declared with
    /// [`with_input_schema`](TaskRegistry::with_input_schema).
    pub fn input_schema(&self, name: &str) -> Option<&Value> {
        self.input_schemas.get(name)
    }

    /// Whether the task type `name` is registered.
    pub fn knows(&self, name: &str) -> bool {
        self.decoders.contains_key(name)
            || self.makers.contains_key(name)
            || self.inputs.contains_key(name)
    }

    /// The names of the registered task types, sorted.
    pub fn type_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self
            .decoders
            .keys()
            .chain(self.makers.keys())
            .chain(self.inputs.keys())
            .copied()
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// A new task of type `name` from `input`: through the maker registered with
    /// [`with_input`](TaskRegistry::with_input); an async type's future made from the
    /// input ([`with_async`](TaskRegistry::with_async)); or a type with a decoder
    /// decoding the input's JSON text as its saved state (a serde type whose fields
    /// the input gives, the others defaulted).
    ///
    /// # Errors
    /// [`MakeError::UnknownType`], or [`MakeError::BadInput`] with what the type said.
    pub fn make(&self, name: &str, input: &Value) -> Result<Box<dyn AgentTask>, MakeError> {
        let bad = |reason: String| MakeError::BadInput {
            type_name: name.to_owned(),
            reason,
        };
        if let Some((&registered, make)) = self.inputs.get_key_value(name) {
            return make(input)
                .map_err(bad)
                .map(|body| self.made_as(registered, body));
        }
        if let Some(make) = self.makers.get(name) {
            return Ok(Box::new(make(input.clone())));
        }
        if let Some(decode) = self.decoders.get(name) {
            let bytes = serde_json::to_vec(input).map_err(|e| bad(e.to_string()))?;
            return decode(&bytes).map_err(|e| bad(e.to_string()));
        }
        Err(MakeError::UnknownType(name.to_owned()))
    }

    /// Makes the async task `name` again and replays its saved polls as task `task`.
    /// `None` if `name` is not registered as an async task.
    pub(crate) fn rebuild_async(
        &self,
        name: &str,
        task: TaskId,
        bytes: &[u8],
    ) -> Option<Result<Box<dyn AgentTask>, RemakeError>> {
        let make = self.makers.get(name)?;
        Some(
            AsyncTask::rebuild(task, bytes, make.as_ref())
                .map(|t| Box::new(t) as Box<dyn AgentTask>),
        )
    }

    /// `body`, made by the maker registered as `registered`, as a task of type
    /// `registered` — what a listing shows and a client submitted — even when its
    /// body names another type (the built-in agent, made as `agent`, is a
    /// `react-agent`). It saves as its body, under the name it was made as, so a
    /// restore gives it back the same name; a body whose own type has no decoder (it
    /// could not be restored anyway) keeps its own name.
    fn made_as(&self, registered: &'static str, body: Box<dyn AgentTask>) -> Box<dyn AgentTask> {
        let own = body.type_name();
        if own == registered || !self.decoders.contains_key(own) {
            return body;
        }
        Box::new(MadeAs {
            name: registered,
            body,
        })
    }

    pub(crate) fn decode(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Option<Result<Box<dyn AgentTask>, String>> {
        if let Some(decode) = self.decoders.get(name) {
            return Some(decode(bytes).map_err(|e| e.to_string()));
        }
        // A task made by the maker registered as `name`, saved by `MadeAs`.
        let (&registered, _) = self.inputs.get_key_value(name)?;
        Some(MadeAs::decode(self, registered, bytes))
    }

    pub(crate) fn policy_factory(&self, name: &str) -> Option<PolicyFactory> {
        self.policies.get(name).cloned()
    }

    /// The `&'static` spelling of a type name read from a snapshot, if the type is
    /// registered. Nothing is kept for a name the registry does not know: a restored
    /// scheduler owns such names, and they go with it.
    pub(crate) fn static_name(&self, name: &str) -> Option<&'static str> {
        if let Some((key, _)) = self.decoders.get_key_value(name) {
            return Some(key);
        }
        if let Some((key, _)) = self.inputs.get_key_value(name) {
            return Some(key);
        }
        self.makers.get_key_value(name).map(|(key, _)| *key)
    }
}

/// A task made by a maker registered under another name than its body's type
/// ([`TaskRegistry::make`]): it is that name's task in listings, snapshots and
/// journals, and polls as its body. Saved as the body's type and state, postcard
/// encoded, so the registry decodes it through the body's decoder and names it again.
struct MadeAs {
    name: &'static str,
    body: Box<dyn AgentTask>,
}

impl fmt::Debug for MadeAs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?})", self.name, self.body)
    }
}

impl AgentTask for MadeAs {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        self.body.poll(cx)
    }

    fn type_name(&self) -> &'static str {
        self.name
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        match self.body.save()? {
            SavedTask::State(bytes) => postcard::to_allocvec(&(self.body.type_name(), bytes))
                .map(SavedTask::State)
                .map_err(|e| StateError::Encode(e.to_string())),
            // Only a body with a decoder is wrapped, and such a body saves its state.
            SavedTask::Replay(_) => Err(StateError::Unsaveable(format!(
                "a task made as `{}` saved a replay of `{}`, which only its own name restores",
                self.name,
                self.body.type_name()
            ))),
        }
    }
}

impl MadeAs {
    /// The task `MadeAs::save` wrote, made as `name`.
    fn decode(
        registry: &TaskRegistry,
        name: &'static str,
        bytes: &[u8],
    ) -> Result<Box<dyn AgentTask>, String> {
        let (own, state): (String, Vec<u8>) = postcard::from_bytes(bytes)
            .map_err(|e| format!("a task made as `{name}` was not saved as one ({e})"))?;
        let decode = registry.decoders.get(own.as_str()).ok_or_else(|| {
            format!("a task made as `{name}` has a body of type `{own}`, which the registry does not know")
        })?;
        let body = decode(&state).map_err(|e| e.to_string())?;
        Ok(Box::new(MadeAs { name, body }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    #[test]
    fn input_schemas_are_kept_by_type_and_listed_by_debug() {
        let schema = json!({"type": "object", "required": ["prompt"]});
        let registry = TaskRegistry::new()
            .with_input_schema("agent", json!({"type": "string"}))
            .with_input_schema("agent", schema.clone())
            .with_input_schema("report", json!(true));
        assert_eq!(registry.input_schema("agent"), Some(&schema));
        assert_eq!(registry.input_schema("report"), Some(&json!(true)));
        assert_eq!(registry.input_schema("nope"), None);
        // A schema alone does not register the type.
        assert!(!registry.knows("agent"));
        assert_eq!(
            format!("{registry:?}"),
            "TaskRegistry { types: [], async: [], policies: [], \
             input_schemas: [\"agent\", \"report\"] }"
        );
        assert_eq!(registry.clone().input_schema("agent"), Some(&schema));
    }

    #[derive(Debug, Serialize, Deserialize)]
    struct Counter {
        left: u32,
    }

    impl AgentTask for Counter {
        fn poll(&mut self, _cx: &mut crate::task::TaskContext<'_>) -> crate::task::Step {
            if self.left == 0 {
                return crate::task::Step::done("done");
            }
            self.left -= 1;
            crate::task::Step::Yield
        }

        fn type_name(&self) -> &'static str {
            "counter"
        }

        fn save(&self) -> Result<SavedTask, StateError> {
            SavedTask::serde(self)
        }
    }

    /// A task made by the maker registered as `count-down`, whose body is a `counter`,
    /// is a `count-down` task — live or ended, and after a snapshot is restored — and
    /// runs as its body; one made by its own type's name keeps that name.
    #[test]
    fn a_task_made_under_another_name_keeps_it_through_a_snapshot() {
        use crate::scheduler::Scheduler;
        use crate::state::TaskState;
        use crate::task::NewTask;
        use crate::time::Time;
        let registry = TaskRegistry::new()
            .with_serde::<Counter>("counter")
            .with_input("count-down", |input| {
                serde_json::from_value::<Counter>(input.clone())
                    .map(|c| Box::new(c) as Box<dyn AgentTask>)
                    .map_err(|e| e.to_string())
            });
        let made = registry.make("count-down", &json!({"left": 2})).unwrap();
        assert_eq!(made.type_name(), "count-down");
        let own = registry.make("counter", &json!({"left": 0})).unwrap();
        assert_eq!(own.type_name(), "counter");
        let mut scheduler = Scheduler::new(Default::default());
        let live = scheduler
            .submit(Time::ZERO, NewTask::boxed(made))
            .unwrap()
            .id;
        let ended = registry.make("count-down", &json!({"left": 0})).unwrap();
        let ended = scheduler
            .submit(Time::ZERO, NewTask::boxed(ended))
            .unwrap()
            .id;
        let counter = scheduler
            .submit(Time::ZERO, NewTask::boxed(own))
            .unwrap()
            .id;
        for _ in 0..3 {
            scheduler.step(Time::ZERO);
        }
        assert_eq!(
            scheduler.task_state(ended),
            Some(TaskState::Completed(Ok(json!("done"))))
        );
        let snapshot = scheduler.snapshot().unwrap();
        let mut restored = Scheduler::restore(&snapshot, &registry).unwrap();
        let types: Vec<(TaskId, String)> = restored
            .tasks()
            .map(|t| (t.id, t.type_name.into_owned()))
            .collect();
        assert_eq!(
            types,
            [
                (live, "count-down".to_owned()),
                (ended, "count-down".to_owned()),
                (counter, "counter".to_owned())
            ]
        );
        while restored.step(Time::ZERO).is_some() {}
        assert_eq!(
            restored.task_state(live),
            Some(TaskState::Completed(Ok(json!("done"))))
        );
        // Bytes that `MadeAs` did not write are refused with what was wrong.
        let Some(Err(reason)) = registry.decode("count-down", b"{}") else {
            panic!("a decoder for count-down");
        };
        assert!(
            reason.starts_with("a task made as `count-down` was not saved as one"),
            "{reason}"
        );
    }
}
