//! The registry a restore rebuilds task bodies (and custom policies) from, by name.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::AgentTask;
use crate::policy::Policy;

/// What a snapshot keeps of a live task's body.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SavedTask {
    /// An explicit task's fields, encoded by the task (usually with serde; see
    /// [`SavedTask::serde`]), rebuilt by the decoder registered for its type.
    State(Vec<u8>),
}

impl SavedTask {
    /// An explicit task's fields, encoded with serde (postcard).
    ///
    /// # Errors
    /// The serializer's message, if the value cannot be encoded.
    pub fn serde<T: Serialize>(task: &T) -> Result<SavedTask, String> {
        postcard::to_allocvec(task)
            .map(SavedTask::State)
            .map_err(|e| e.to_string())
    }

    /// Reads back what [`SavedTask::serde`] wrote.
    ///
    /// # Errors
    /// The deserializer's message, for bytes that are not a `T`.
    pub fn decode_serde<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
        postcard::from_bytes(bytes).map_err(|e| e.to_string())
    }
}

type Decoder = Arc<dyn Fn(&[u8]) -> Result<Box<dyn AgentTask>, String> + Send + Sync>;
use crate::policy::PolicyFactory;

/// Task types (and custom policies) by name, for [`Scheduler::restore`](crate::Scheduler::restore).
///
/// # Example
/// ```
/// use serde::{Deserialize, Serialize};
/// use spool_core::{AgentTask, SavedTask, Step, TaskContext, TaskRegistry};
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
///     fn save(&self) -> Result<SavedTask, String> { SavedTask::serde(self) }
/// }
///
/// let registry = TaskRegistry::new().with_serde::<Counter>("counter");
/// assert!(registry.knows("counter"));
/// ```
#[derive(Clone, Default)]
pub struct TaskRegistry {
    decoders: BTreeMap<&'static str, Decoder>,
    policies: BTreeMap<&'static str, PolicyFactory>,
}

impl fmt::Debug for TaskRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskRegistry")
            .field("types", &self.decoders.keys().collect::<Vec<_>>())
            .field("policies", &self.policies.keys().collect::<Vec<_>>())
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
        F: Fn(&[u8]) -> Result<Box<dyn AgentTask>, String> + Send + Sync + 'static,
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
            postcard::from_bytes::<T>(bytes)
                .map(|task| Box::new(task) as Box<dyn AgentTask>)
                .map_err(|e| e.to_string())
        })
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

    /// Whether the task type `name` is registered.
    pub fn knows(&self, name: &str) -> bool {
        self.decoders.contains_key(name)
    }

    pub(crate) fn decode(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Option<Result<Box<dyn AgentTask>, String>> {
        self.decoders.get(name).map(|decode| decode(bytes))
    }

    pub(crate) fn policy_factory(&self, name: &str) -> Option<PolicyFactory> {
        self.policies.get(name).cloned()
    }

    /// The `&'static` spelling of a type name read from a snapshot: the registered one,
    /// or one interned for the process (type names are few).
    pub(crate) fn intern(&self, name: &str) -> &'static str {
        if let Some((key, _)) = self.decoders.get_key_value(name) {
            return key;
        }
        static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
        let mut names = NAMES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(known) = names.get(name) {
            return known;
        }
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        names.insert(leaked);
        leaked
    }
}
