//! Rust closures as tools: each registered by name with a [`Schema`] for its arguments,
//! which are checked before the closure runs. What does not fit, what the closure
//! refuses and what makes it panic all come back to the task as typed errors; the
//! executor keeps serving.

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde_json::{Value, json};
use spool_core::{Executor, Replies};
use spool_core::{OutboundRequest, RequestError, Response};

use crate::schema::{Schema, SchemaError};

/// A tool's function: the arguments (already checked against the tool's schema) in,
/// the result or an error message out.
type ToolFn = Arc<dyn Fn(&Value) -> Result<Value, String> + Send + Sync>;

/// One registered tool.
#[derive(Clone)]
struct Tool {
    name: String,
    schema: Schema,
    function: ToolFn,
}

/// Function tools by name: Rust closures served as tools, their arguments checked
/// against a JSON Schema ([`Schema`]) before each call.
///
/// It is an [`Executor`]. Install it for every tool that has no executor of its own
/// with `RuntimeBuilder::tools(functions)`, or for one tool with
/// `.executor(Kind::tool(name), functions)`. It is `Clone` (the closures are shared),
/// so `.pool(Kind::tool(name), n, move || functions.clone())` runs one tool's calls on
/// `n` threads.
///
/// Each request is answered at once, on the executor's thread:
///
/// - a tool not registered: [`RequestError::Failed`] ``no function tool named `X` ``;
/// - arguments that do not fit the schema: [`RequestError::InvalidArguments`] listing
///   every violation (``arguments of `X` do not fit its schema: /lat: expected a number,
///   got "north"; /lon: required property is missing``), so the task (or the LLM
///   behind it) can correct the call and try again — the closure is not run;
/// - the closure's `Err(message)`: [`RequestError::Failed`] with that message;
/// - a closure that panics: [`RequestError::Failed`] ``the function tool `X`
///   panicked: <its message>``; the panic is caught and the executor goes on serving
///   (unless the build sets `panic = "abort"`, where nothing can be caught).
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_exec::FunctionTools;
///
/// let tools = FunctionTools::new().register(
///     "add",
///     json!({
///         "type": "object",
///         "description": "Adds two integers.",
///         "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
///         "required": ["a", "b"],
///         "additionalProperties": false,
///     }),
///     |args| {
///         let (a, b) = (args["a"].as_i64(), args["b"].as_i64());
///         match (a, b) {
///             (Some(a), Some(b)) => a.checked_add(b).map(|s| json!(s)).ok_or("overflow".into()),
///             _ => Err("a and b must fit in 64 bits".into()),
///         }
///     },
/// )?;
/// assert_eq!(tools.call("add", &json!({"a": 2, "b": 3})), Ok(json!(5)));
/// assert_eq!(tools.definitions()[0]["function"]["name"], "add");
/// // Then: Runtime::builder().tools(tools) serves `tool:add`.
/// # Ok::<(), spool_exec::SchemaError>(())
/// ```
#[derive(Clone, Default)]
pub struct FunctionTools {
    /// In registration order, which [`definitions`](FunctionTools::definitions) keeps.
    tools: Vec<Tool>,
    by_name: BTreeMap<String, usize>,
}

impl fmt::Debug for FunctionTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FunctionTools")
            .field("tools", &self.names().collect::<Vec<_>>())
            .finish()
    }
}

impl FunctionTools {
    /// No tools yet.
    pub fn new() -> FunctionTools {
        FunctionTools::default()
    }

    /// Adds the tool `name`, whose arguments must fit `schema` (a JSON object schema;
    /// its top-level `description`, if any, becomes the tool's description in
    /// [`definitions`](FunctionTools::definitions)), served by `function`.
    ///
    /// # Errors
    /// - the schema's own [`SchemaError`] if it does not compile (see [`Schema::new`]);
    /// - [`SchemaError::ArgumentsNotAnObject`] if its `type` is not `"object"`;
    /// - [`SchemaError::InvalidToolName`] if `name` is not 1 to 64 of `a-z A-Z 0-9 _ -`
    ///   (what the OpenAI API takes);
    /// - [`SchemaError::DuplicateTool`] if `name` is registered already.
    pub fn register<F>(
        mut self,
        name: impl Into<String>,
        schema: Value,
        function: F,
    ) -> Result<FunctionTools, SchemaError>
    where
        F: Fn(&Value) -> Result<Value, String> + Send + Sync + 'static,
    {
        let name = name.into();
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_name {
            return Err(SchemaError::InvalidToolName { name });
        }
        if self.by_name.contains_key(&name) {
            return Err(SchemaError::DuplicateTool { name });
        }
        let schema = Schema::new(schema)?;
        if !schema.is_object() {
            return Err(SchemaError::ArgumentsNotAnObject { tool: name });
        }
        self.by_name.insert(name.clone(), self.tools.len());
        self.tools.push(Tool {
            name,
            schema,
            function: Arc::new(function),
        });
        Ok(self)
    }

    /// The tools' names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|tool| tool.name.as_str())
    }

    /// The schema of the tool `name`, if there is one.
    pub fn schema(&self, name: &str) -> Option<&Schema> {
        self.tool(name).map(|tool| &tool.schema)
    }

    /// The tools as the OpenAI chat-completions API takes them in `tools`, in
    /// registration order: `[{"type": "function", "function": {"name": .., "description":
    /// .., "parameters": <the schema>}}, ..]`. The schema's top-level `description`
    /// becomes the tool's (and is not repeated in `parameters`); a schema without one
    /// gives a tool without one.
    pub fn definitions(&self) -> Value {
        let definitions = self
            .tools
            .iter()
            .map(|tool| {
                let mut function = serde_json::Map::new();
                function.insert("name".to_owned(), json!(tool.name));
                let mut parameters = tool.schema.json().clone();
                // Said once, as the tool's description, rather than twice in every request.
                if let Some(description) = parameters
                    .as_object_mut()
                    .and_then(|schema| schema.remove("description"))
                {
                    function.insert("description".to_owned(), description);
                }
                function.insert("parameters".to_owned(), parameters);
                json!({"type": "function", "function": function})
            })
            .collect();
        Value::Array(definitions)
    }

    /// Calls the tool `name` with `args` here and now, as the executor does for a
    /// request (the same checks, the same errors); for tests and for agents that run a
    /// tool in-process.
    ///
    /// # Errors
    /// As listed on [`FunctionTools`]: `Failed` for an unknown tool, a closure error or
    /// a panic; `InvalidArguments` for arguments that do not fit the schema.
    pub fn call(&self, name: &str, args: &Value) -> Result<Value, RequestError> {
        let tool = self
            .tool(name)
            .ok_or_else(|| RequestError::failed(format!("no function tool named `{name}`")))?;
        if let Err(violations) = tool.schema.check(args) {
            let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
            return Err(RequestError::InvalidArguments {
                message: format!(
                    "arguments of `{name}` do not fit its schema: {}",
                    list.join("; ")
                ),
            });
        }
        let function = &tool.function;
        match catch_unwind(AssertUnwindSafe(|| function(args))) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(message)) => Err(RequestError::Failed { message }),
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".to_owned());
                tracing::warn!(tool = name, panic = %why, "function tool panicked");
                Err(RequestError::failed(format!(
                    "the function tool `{name}` panicked: {why}"
                )))
            }
        }
    }

    fn tool(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name).and_then(|&i| self.tools.get(i))
    }
}

impl Executor for FunctionTools {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let result = match request.request.kind.tool_name() {
            Some(name) => self.call(name, request.request.payload.value()),
            None => Err(RequestError::failed(format!(
                "function tools serve tool requests, not `{}`",
                request.request.kind
            ))),
        };
        replies.send(Response::new(request.key, result));
    }
}
