//! Executors from Python: spool's own (the OpenAI-compatible LLM client, subprocess tools,
//! MCP servers), Python functions as tools or as any kind's executor, and fixed answers.
//!
//! A Python function runs on an executor thread of the runtime, taking the GIL only for
//! the call itself: the arguments are checked against the tool's schema before (by
//! `FunctionTools`, without the GIL), and the answer converted after.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;
use spool_core::{Kind, OutboundRequest, RequestError, from_fn};
use spool_exec::{FunctionTools, OpenAiConfig, OpenAiExecutor, ProcessConfig, ProcessTool};
use spool_mcp::{McpConfig, McpExecutor};
use spool_runtime::RuntimeBuilder;

use crate::convert::{from_py, to_py};
use crate::errors;
use crate::options::seconds;

/// An executor to install on a runtime, made by `spool.OpenAI`, `spool.Subprocess`,
/// `spool.MCP`, `spool.executor` or `spool.fixed`.
#[pyclass(frozen, module = "spool._native", name = "Executor")]
#[derive(Debug)]
pub(crate) struct PyExecutor {
    pub(crate) spec: Spec,
}

#[derive(Debug)]
pub(crate) enum Spec {
    /// The LLM client, on `workers` threads.
    OpenAi(OpenAiConfig),
    /// A program run for each call of the tool `name`.
    Process(String, ProcessConfig),
    /// The tools of the MCP servers of a configuration file.
    Mcp(McpExecutor),
    /// A Python function answering every request of `kind`.
    Python(Kind, Arc<Py<PyAny>>, usize),
    /// The same answer to every request of `kind`.
    Fixed(Kind, Value),
}

#[pymethods]
impl PyExecutor {
    fn __repr__(&self) -> String {
        match &self.spec {
            Spec::OpenAi(c) => format!("OpenAI({})", spool_exec::redact_url(&c.endpoint())),
            Spec::Process(name, _) => format!("Subprocess({name})"),
            Spec::Mcp(m) => format!("MCP({} tools)", m.tools().len()),
            Spec::Python(kind, _, workers) => format!("executor({kind}, workers={workers})"),
            Spec::Fixed(kind, value) => format!("fixed({kind}, {value})"),
        }
    }

    /// The tool definitions an MCP executor offers (to pass to a model); empty for the
    /// others.
    fn definitions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let defs = match &self.spec {
            Spec::Mcp(m) => m.definitions(),
            _ => Vec::new(),
        };
        to_py(py, &Value::Array(defs))
    }
}

/// The OpenAI-compatible LLM executor: `base_url` and `model` (or `OPENAI_BASE_URL`,
/// `OPENAI_MODEL`, `OPENAI_API_KEY` from the environment), on `workers` threads.
#[pyfunction]
#[pyo3(signature = (base_url=None, model=None, api_key=None, workers=None, stream=None, timeout=None))]
pub(crate) fn openai(
    base_url: Option<String>,
    model: Option<String>,
    api_key: Option<String>,
    workers: Option<usize>,
    stream: Option<bool>,
    timeout: Option<f64>,
) -> PyResult<PyExecutor> {
    let bad = |e: spool_exec::ConfigError| PyValueError::new_err(e.to_string());
    let mut config = match base_url {
        Some(url) => OpenAiConfig::new(url, model.clone().unwrap_or_else(|| "gpt-4o-mini".into())),
        None => OpenAiConfig::from_env(model.clone().unwrap_or_else(|| "gpt-4o-mini".into()))
            .map_err(bad)?,
    };
    if let Some(model) = model {
        config = config.model(model);
    }
    // A base URL given here still takes the key from the environment, as without one.
    if let Some(key) = api_key.or_else(|| std::env::var("OPENAI_API_KEY").ok()) {
        config = config.api_key(key);
    }
    if let Some(workers) = workers {
        config = config.workers(workers);
    }
    if let Some(stream) = stream {
        config = config.stream(stream);
    }
    if let Some(timeout) = timeout {
        config = config.timeout(seconds("timeout", timeout)?);
    }
    config.validate().map_err(bad)?;
    Ok(PyExecutor {
        spec: Spec::OpenAi(config),
    })
}

/// A tool run as a program: each call (`{"args": [...], "stdin": "..."}`) starts
/// `program` with `args` and the call's `args`, its `stdin` on standard input, and
/// answers with the exit status and the output.
#[pyfunction]
#[pyo3(signature = (name, program, args=Vec::new(), *, workdir=None, env=None, allow_env=Vec::new(), timeout=None, shell=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn subprocess(
    name: String,
    program: String,
    args: Vec<String>,
    workdir: Option<String>,
    env: Option<&Bound<'_, PyDict>>,
    allow_env: Vec<String>,
    timeout: Option<f64>,
    shell: bool,
) -> PyResult<PyExecutor> {
    let mut config = ProcessConfig::new(program).args(args).shell(shell);
    if let Some(dir) = workdir {
        config = config.workdir(dir);
    }
    if let Some(env) = env {
        for (k, v) in env.iter() {
            config = config.env(k.extract::<String>()?, v.extract::<String>()?);
        }
    }
    for name in allow_env {
        config = config.allow_env(name);
    }
    if let Some(t) = timeout {
        config = config.timeout(seconds("timeout", t)?);
    }
    Ok(PyExecutor {
        spec: Spec::Process(name, config),
    })
}

/// The tools of the MCP servers in the configuration file at `path` (the format of
/// `spool serve --mcp`); starts the servers now, and lists their tools.
#[pyfunction]
pub(crate) fn mcp(py: Python<'_>, path: std::path::PathBuf) -> PyResult<PyExecutor> {
    let executor = py.detach(|| -> Result<McpExecutor, String> {
        let config = McpConfig::read(&path).map_err(|e| e.to_string())?;
        McpExecutor::start(&config).map_err(|e| e.to_string())
    });
    let executor = executor.map_err(PyValueError::new_err)?;
    Ok(PyExecutor {
        spec: Spec::Mcp(executor),
    })
}

/// A Python function as the executor of `kind`: called with each request's payload,
/// on `workers` threads; what it returns is the answer, an exception a failed request.
#[pyfunction]
#[pyo3(signature = (kind, func, workers=1))]
pub(crate) fn executor(kind: &str, func: Py<PyAny>, workers: usize) -> PyResult<PyExecutor> {
    let kind = kind
        .parse::<Kind>()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyExecutor {
        spec: Spec::Python(kind, Arc::new(func), workers.max(1)),
    })
}

/// The same answer, `value`, to every request of `kind`, at once.
#[pyfunction]
pub(crate) fn fixed(kind: &str, value: &Bound<'_, PyAny>) -> PyResult<PyExecutor> {
    let kind = kind
        .parse::<Kind>()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyExecutor {
        spec: Spec::Fixed(kind, from_py(value)?),
    })
}

/// Calls `func(payload)` with the GIL: its answer, or its exception as a failed request.
pub(crate) fn call_python(func: &Py<PyAny>, payload: &Value) -> Result<Value, RequestError> {
    Python::attach(|py| {
        let result = to_py(py, payload).and_then(|args| func.bind(py).call1((args,)));
        match result.and_then(|v| from_py(&v)) {
            Ok(value) => Ok(value),
            Err(e) => Err(errors::request_error_of(py, &e)),
        }
    })
}

/// A Python tool: its name, its argument schema and its function.
#[derive(Debug)]
pub(crate) struct ToolDef {
    pub(crate) name: String,
    pub(crate) schema: Value,
    pub(crate) func: Arc<Py<PyAny>>,
    pub(crate) workers: usize,
}

/// Installs `tools` (each on its own pool of threads) and `executors` on `builder`.
pub(crate) fn install(
    mut builder: RuntimeBuilder,
    tools: &[ToolDef],
    executors: &[Py<PyExecutor>],
    py: Python<'_>,
) -> PyResult<RuntimeBuilder> {
    if !tools.is_empty() {
        let mut functions = FunctionTools::new();
        for tool in tools {
            let func = Arc::clone(&tool.func);
            functions = functions
                .register(
                    tool.name.clone(),
                    tool.schema.clone(),
                    move |args: &Value| {
                        call_python(&func, args).map_err(|e| match e {
                            RequestError::Failed { message } => message,
                            other => other.to_string(),
                        })
                    },
                )
                .map_err(|e| PyValueError::new_err(format!("tool `{}`: {e}", tool.name)))?;
        }
        for tool in tools {
            let functions = functions.clone();
            builder = builder.pool(
                Kind::tool(tool.name.clone()),
                tool.workers.max(1),
                move || functions.clone(),
            );
        }
    }
    for executor in executors {
        builder = match &executor.bind(py).get().spec {
            Spec::OpenAi(config) => {
                let workers = config.workers.max(1);
                let llm = OpenAiExecutor::new(config.clone());
                builder.pool(Kind::Llm, workers, move || llm.clone())
            }
            Spec::Process(name, config) => {
                builder.executor(Kind::tool(name.clone()), ProcessTool::new(config.clone()))
            }
            Spec::Mcp(mcp) => mcp.tools().iter().fold(builder, |builder, tool| {
                builder.executor(tool.kind(), mcp.clone())
            }),
            Spec::Python(kind, func, workers) => {
                let func = Arc::clone(func);
                builder.pool(kind.clone(), *workers, move || {
                    let func = Arc::clone(&func);
                    from_fn(move |request: &OutboundRequest| {
                        call_python(&func, request.request.payload.value())
                    })
                })
            }
            Spec::Fixed(kind, value) => {
                let value = value.clone();
                builder.executor(kind.clone(), from_fn(move |_| Ok(value.clone())))
            }
        };
    }
    Ok(builder)
}
