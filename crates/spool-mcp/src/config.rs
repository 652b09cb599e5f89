//! The servers to start, read from the `mcpServers` JSON that MCP clients already use
//! (Claude Desktop, Cursor, VS Code): a command for a stdio server, a URL for a
//! streamable HTTP one, and spool's own settings per server (`timeout`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

/// How long a call may take, unless a server's `timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The first pause before a server that stopped is started again; each stop in a row
/// doubles it, up to [`DEFAULT_RESTART_MAX`].
pub const DEFAULT_RESTART_BASE: Duration = Duration::from_millis(100);

/// The longest pause before a server is started again.
pub const DEFAULT_RESTART_MAX: Duration = Duration::from_secs(30);

/// The MCP servers to run: every server of the configuration, by name in name order
/// (disabled ones left out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct McpConfig {
    /// The servers, in name order.
    pub servers: Vec<ServerConfig>,
}

/// One MCP server: its name, how to reach it, and how long its calls may take.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The name it has in `mcpServers`; its tools are offered as `NAME__TOOL`.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// How long one call may take, waiting for a restarting server included.
    pub timeout: Duration,
    /// The first pause before it is started again after it stopped.
    pub restart_base: Duration,
    /// The longest pause before it is started again.
    pub restart_max: Duration,
}

impl ServerConfig {
    /// A server `name` reached by `transport`, with the default timeout and restarts.
    pub fn new(name: impl Into<String>, transport: Transport) -> ServerConfig {
        ServerConfig {
            name: name.into(),
            transport,
            timeout: DEFAULT_TIMEOUT,
            restart_base: DEFAULT_RESTART_BASE,
            restart_max: DEFAULT_RESTART_MAX,
        }
    }

    /// The same server with another call timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> ServerConfig {
        self.timeout = timeout;
        self
    }

    /// The same server with other pauses before restarts: `base`, doubled for each stop
    /// in a row, at most `max`.
    #[must_use]
    pub fn restarts(mut self, base: Duration, max: Duration) -> ServerConfig {
        self.restart_base = base;
        self.restart_max = max.max(base);
        self
    }
}

/// How a server is reached.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// A program started by spool, speaking JSON-RPC on its standard input and output.
    Stdio {
        /// The program (looked up in `PATH` when it has no `/`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it, on top of spool's own environment.
        env: BTreeMap<String, String>,
        /// Its working directory (spool's when `None`).
        cwd: Option<PathBuf>,
    },
    /// A server that listens on a URL (MCP's streamable HTTP transport).
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:8000/mcp`.
        url: String,
        /// Headers sent with every request (an `Authorization` header, say).
        headers: BTreeMap<String, String>,
    },
}

impl fmt::Debug for Transport {
    /// The variables' and headers' values are left out: they are often credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |map: &BTreeMap<String, String>| -> Vec<String> {
            map.keys().map(|key| format!("{key}=***")).collect()
        };
        match self {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &hidden(env))
                .field("cwd", cwd)
                .finish(),
            Transport::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &hidden(headers))
                .finish(),
        }
    }
}

/// What is wrong with an MCP configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the MCP configuration {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// The text is not JSON.
    #[error("the MCP configuration is not JSON: {0}")]
    NotJson(String),
    /// The JSON is not an object with an `mcpServers` object.
    #[error("the MCP configuration must be an object with an `mcpServers` object, {0}")]
    NoServers(String),
    /// One server's entry is wrong.
    #[error("MCP server `{server}`: {problem}")]
    Server {
        /// The server's name.
        server: String,
        /// What is wrong, naming the field.
        problem: String,
    },
}

impl McpConfig {
    /// Reads the configuration in the file at `path`.
    ///
    /// # Errors
    /// [`ConfigError::Read`] if the file cannot be read, else as [`McpConfig::parse`].
    pub fn read(path: &Path) -> Result<McpConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            reason: error.to_string(),
        })?;
        McpConfig::parse(&text)
    }

    /// Parses `{"mcpServers": {"NAME": {...}, ...}}`. Each server is either
    /// `{"command", "args"?, "env"?, "cwd"?}` (stdio) or `{"url", "headers"?}`
    /// (streamable HTTP); `"type"` may say which (`stdio`; `http`, `streamable-http` or
    /// `streamableHttp`). spool also reads `"timeout"` (seconds a call may take) and
    /// `"disabled": true` (the server is left out). Other members, which other clients
    /// use for their own settings, are ignored.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the server and the field that is wrong.
    pub fn parse(text: &str) -> Result<McpConfig, ConfigError> {
        let value: Value =
            serde_json::from_str(text).map_err(|error| ConfigError::NotJson(error.to_string()))?;
        let Some(root) = value.as_object() else {
            return Err(ConfigError::NoServers(format!("not {}", type_of(&value))));
        };
        let servers = match root.get("mcpServers") {
            Some(Value::Object(servers)) => servers,
            Some(other) => {
                return Err(ConfigError::NoServers(format!(
                    "and `mcpServers` is {}",
                    type_of(other)
                )));
            }
            None => return Err(ConfigError::NoServers("and it has none".to_owned())),
        };
        // serde_json's map is ordered by key: the servers come in name order.
        let mut config = McpConfig::default();
        for (name, entry) in servers {
            let problem = |problem: String| ConfigError::Server {
                server: name.clone(),
                problem,
            };
            check_name(name).map_err(problem)?;
            if let Some(server) = server(name, entry).map_err(problem)? {
                config.servers.push(server);
            }
        }
        Ok(config)
    }
}

/// A server's name becomes the first part of its tools' names, which models take
/// only in `[A-Za-z0-9_-]`; a `__` in it would make `NAME__TOOL` ambiguous.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".to_owned());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "the name may hold only letters, digits, `_` and `-`, not {c:?}"
        ));
    }
    if name.contains("__") {
        return Err("the name may not hold `__`, which separates it from a tool's".to_owned());
    }
    Ok(())
}

/// The server an entry describes, or `None` if it is disabled.
fn server(name: &str, entry: &Value) -> Result<Option<ServerConfig>, String> {
    let Some(entry) = entry.as_object() else {
        return Err(format!(
            "the entry must be an object, not {}",
            type_of(entry)
        ));
    };
    if optional_bool(entry, "disabled")?.unwrap_or(false) {
        return Ok(None);
    }
    let kind = optional_string(entry, "type")?;
    let transport = match (
        kind.as_deref(),
        entry.contains_key("command"),
        entry.contains_key("url"),
    ) {
        (Some("stdio") | None, true, false) => stdio(entry)?,
        (Some("http" | "streamable-http" | "streamableHttp") | None, false, true) => http(entry)?,
        (_, true, true) => return Err("give either `command` or `url`, not both".to_owned()),
        (Some("sse"), ..) => {
            return Err(
                "`type` `sse` (the old HTTP+SSE transport) is not supported: use the server's streamable HTTP endpoint"
                    .to_owned(),
            );
        }
        (Some("stdio"), false, _) => return Err("`command` is missing".to_owned()),
        (Some("http" | "streamable-http" | "streamableHttp"), _, false) => {
            return Err("`url` is missing".to_owned());
        }
        (Some(other), ..) => {
            return Err(format!(
                "`type` must be `stdio`, `http` or `streamable-http`, not {other:?}"
            ));
        }
        (None, false, false) => {
            return Err("give `command` (a stdio server) or `url` (an HTTP server)".to_owned());
        }
    };
    let mut server = ServerConfig::new(name, transport);
    if let Some(timeout) = entry.get("timeout") {
        server.timeout = seconds(timeout).map_err(|why| format!("`timeout` {why}"))?;
    }
    Ok(Some(server))
}

fn stdio(entry: &Map<String, Value>) -> Result<Transport, String> {
    let command = optional_string(entry, "command")?.unwrap_or_default();
    if command.trim().is_empty() {
        return Err("`command` is empty".to_owned());
    }
    let args = match entry.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(args)) => args
            .iter()
            .enumerate()
            .map(|(i, arg)| match arg {
                Value::String(arg) => Ok(arg.clone()),
                other => Err(format!(
                    "`args[{i}]` must be a string, not {}",
                    type_of(other)
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(format!(
                "`args` must be an array of strings, not {}",
                type_of(other)
            ));
        }
    };
    let env = string_map(entry, "env")?;
    let cwd = optional_string(entry, "cwd")?.map(PathBuf::from);
    Ok(Transport::Stdio {
        command,
        args,
        env,
        cwd,
    })
}

fn http(entry: &Map<String, Value>) -> Result<Transport, String> {
    let url = optional_string(entry, "url")?.unwrap_or_default();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "`url` must start with http:// or https://, not {url:?}"
        ));
    }
    let headers = string_map(entry, "headers")?;
    Ok(Transport::Http { url, headers })
}

fn optional_string(entry: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match entry.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(format!(
            "`{field}` must be a string, not {}",
            type_of(other)
        )),
    }
}

fn optional_bool(entry: &Map<String, Value>, field: &str) -> Result<Option<bool>, String> {
    match entry.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(flag)) => Ok(Some(*flag)),
        Some(other) => Err(format!(
            "`{field}` must be true or false, not {}",
            type_of(other)
        )),
    }
}

fn string_map(entry: &Map<String, Value>, field: &str) -> Result<BTreeMap<String, String>, String> {
    match entry.get(field) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(key, value)| match value {
                Value::String(text) => Ok((key.clone(), text.clone())),
                other => Err(format!(
                    "`{field}.{key}` must be a string, not {}",
                    type_of(other)
                )),
            })
            .collect(),
        Some(other) => Err(format!(
            "`{field}` must be an object of strings, not {}",
            type_of(other)
        )),
    }
}

/// A positive number of seconds, at most a day.
fn seconds(value: &Value) -> Result<Duration, String> {
    match value.as_f64() {
        Some(secs) if secs > 0.0 && secs <= 86_400.0 => Ok(Duration::from_secs_f64(secs)),
        Some(secs) => Err(format!(
            "must be more than 0 and at most 86400 seconds, not {secs}"
        )),
        None => Err(format!(
            "must be a number of seconds, not {}",
            type_of(value)
        )),
    }
}

/// What a JSON value is, for messages: `a number (3)`, `an array`.
fn type_of(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(flag) => format!("a boolean ({flag})"),
        Value::Number(n) => format!("a number ({n})"),
        Value::String(text) => format!("a string ({text:?})"),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(text: &str) -> String {
        match McpConfig::parse(text) {
            Ok(config) => panic!("accepted: {config:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn it_reads_the_clients_format_in_name_order() {
        let config = McpConfig::parse(
            r#"{"mcpServers": {
                "zeta": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer k"}},
                "files": {"command": "npx", "args": ["-y", "server-files", "/tmp"],
                          "env": {"TOKEN": "t"}, "timeout": 2.5, "autoApprove": []},
                "web": {"type": "streamable-http", "url": "https://example.invalid/mcp"},
                "off": {"command": "x", "disabled": true}
            }}"#,
        )
        .expect("a good configuration");
        let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["files", "web", "zeta"]);
        assert_eq!(
            config.servers[0],
            ServerConfig::new(
                "files",
                Transport::Stdio {
                    command: "npx".to_owned(),
                    args: vec![
                        "-y".to_owned(),
                        "server-files".to_owned(),
                        "/tmp".to_owned()
                    ],
                    env: BTreeMap::from([("TOKEN".to_owned(), "t".to_owned())]),
                    cwd: None,
                }
            )
            .timeout(Duration::from_millis(2500))
        );
        assert_eq!(config.servers[2].timeout, DEFAULT_TIMEOUT);
        assert_eq!(
            format!("{:?}", config.servers[2].transport),
            "Http { url: \"http://127.0.0.1:9/mcp\", headers: [\"Authorization=***\"] }"
        );
    }

    #[test]
    fn a_bad_entry_is_named_with_its_field() {
        let cases = [
            (
                "[]",
                "the MCP configuration must be an object with an `mcpServers` object, not an array",
            ),
            (
                "{}",
                "the MCP configuration must be an object with an `mcpServers` object, and it has none",
            ),
            (
                r#"{"mcpServers": []}"#,
                "the MCP configuration must be an object with an `mcpServers` object, and `mcpServers` is an array",
            ),
            (
                r#"{"mcpServers": {"a": 3}}"#,
                "MCP server `a`: the entry must be an object, not a number (3)",
            ),
            (
                r#"{"mcpServers": {"a": {}}}"#,
                "MCP server `a`: give `command` (a stdio server) or `url` (an HTTP server)",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "args": ["1", 2]}}}"#,
                "MCP server `a`: `args[1]` must be a string, not a number (2)",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}"#,
                "MCP server `a`: `env.K` must be a string, not a number (1)",
            ),
            (
                r#"{"mcpServers": {"a": {"command": " "}}}"#,
                "MCP server `a`: `command` is empty",
            ),
            (
                r#"{"mcpServers": {"a": {"url": "ftp://x"}}}"#,
                "MCP server `a`: `url` must start with http:// or https://, not \"ftp://x\"",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}"#,
                "MCP server `a`: `type` `sse` (the old HTTP+SSE transport) is not supported: use the server's streamable HTTP endpoint",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "ws", "url": "http://x"}}}"#,
                "MCP server `a`: `type` must be `stdio`, `http` or `streamable-http`, not \"ws\"",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "http", "command": "x"}}}"#,
                "MCP server `a`: `url` is missing",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "url": "http://x"}}}"#,
                "MCP server `a`: give either `command` or `url`, not both",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "timeout": 0}}}"#,
                "MCP server `a`: `timeout` must be more than 0 and at most 86400 seconds, not 0",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "timeout": "5"}}}"#,
                "MCP server `a`: `timeout` must be a number of seconds, not a string (\"5\")",
            ),
            (
                r#"{"mcpServers": {"a.b": {"command": "x"}}}"#,
                "MCP server `a.b`: the name may hold only letters, digits, `_` and `-`, not '.'",
            ),
            (
                r#"{"mcpServers": {"a__b": {"command": "x"}}}"#,
                "MCP server `a__b`: the name may not hold `__`, which separates it from a tool's",
            ),
            (
                "{",
                "the MCP configuration is not JSON: EOF while parsing an object at line 1 column 1",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(problem(text), expected, "{text}");
        }
    }
}
