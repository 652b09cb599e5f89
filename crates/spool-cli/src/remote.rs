//! A running `spool serve` reached over its HTTP API: where it is (`--addr URL`), the
//! bearer token (`--token-file FILE`, else `SPOOL_TOKEN`), and blocking calls to it.
//! `spool top` polls through it, and `spool schedule ... --addr` and `spool inspect
//! --addr` work through it. The calls are in builds with the `client` feature (on by
//! default); without it a call says how to get one.

use std::path::{Path, PathBuf};
#[cfg(feature = "client")]
use std::time::Duration;

/// The environment variable holding the bearer token when no `--token-file` is given.
pub(crate) const TOKEN_VAR: &str = "SPOOL_TOKEN";

/// Why `--addr` or the token cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AddrError {
    /// `--addr` is not an `http://` URL.
    #[error("--addr {0:?} is not a URL like http://127.0.0.1:7420 (https is not supported)")]
    BadAddr(String),
    /// The token file could not be read, or holds no token.
    #[error("the token file {path}: {why}")]
    Token {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        why: String,
    },
}

/// Why a call to the server failed.
#[derive(Debug, thiserror::Error)]
// Without the client only `NotBuilt` is made.
#[cfg_attr(not(feature = "client"), allow(dead_code))]
pub(crate) enum ReadError {
    /// No answer: the server is not there, or the connection broke.
    #[error("{0}")]
    Transport(String),
    /// Nothing listens at the address: the connection was refused (the text is the
    /// client's, as [`ReadError::Transport`]'s).
    #[error("{0}")]
    Refused(String),
    /// The token was refused.
    #[error("the server refused the token ({0})")]
    Unauthorized(u16),
    /// An answer that is not what the API gives.
    #[error("{0}")]
    Unexpected(String),
    /// This build has no HTTP client.
    #[cfg(not(feature = "client"))]
    #[error(
        "this spool was built without its HTTP client (cargo's `--no-default-features` \
         leaves out the `client` feature), which --addr needs: build it with `cargo build \
         --release -p spool-cli`, or add `--features client`"
    )]
    NotBuilt,
}

impl ReadError {
    /// The error as a command says it of the server at `base`, in one line: the
    /// address it could not reach, or what to check when the token was refused.
    pub(crate) fn said_of(&self, base: &str) -> String {
        match self {
            ReadError::Refused(_) => {
                format!("cannot reach the server at {base}: connection refused")
            }
            ReadError::Transport(why) => format!("cannot reach the server at {base}: {why}"),
            ReadError::Unauthorized(status) => format!(
                "the server at {base} refused the token ({status}): check --token-file or \
                 {TOKEN_VAR}"
            ),
            other => other.to_string(),
        }
    }
}

/// `--addr` as a base URL without a trailing slash.
pub(crate) fn base_url(addr: &str) -> Result<String, AddrError> {
    let trimmed = addr.trim().trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("http://")
        .ok_or_else(|| AddrError::BadAddr(addr.to_owned()))?;
    if rest.is_empty() || rest.contains(['/', '?', '#', ' ']) {
        return Err(AddrError::BadAddr(addr.to_owned()));
    }
    Ok(trimmed.to_owned())
}

/// The token: the file's content trimmed, else `env` (the value of [`TOKEN_VAR`]),
/// else none.
pub(crate) fn token(file: Option<&Path>, env: Option<String>) -> Result<Option<String>, AddrError> {
    let Some(path) = file else {
        return Ok(env.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()));
    };
    let text = std::fs::read_to_string(path).map_err(|e| AddrError::Token {
        path: path.to_path_buf(),
        why: format!("cannot be read: {e}"),
    })?;
    let token = text.trim();
    if token.is_empty() || token.chars().any(char::is_whitespace) {
        return Err(AddrError::Token {
            path: path.to_path_buf(),
            why: "must hold one token: visible characters, no spaces".to_owned(),
        });
    }
    Ok(Some(token.to_owned()))
}

/// Where the server is and how to prove who we are.
#[derive(Clone)]
// Without the client the token is not sent.
#[cfg_attr(not(feature = "client"), allow(dead_code))]
pub(crate) struct Endpoint {
    /// `http://host:port`, no trailing slash.
    pub(crate) base: String,
    /// The bearer token, if one is given.
    pub(crate) token: Option<String>,
}

/// Never shows the token, even when debugging.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Endpoint {
    /// The server at `addr` with the token of `token_file`, else of [`TOKEN_VAR`].
    pub(crate) fn from_options(addr: &str, token_file: Option<&Path>) -> Result<Self, AddrError> {
        Ok(Endpoint {
            base: base_url(addr)?,
            token: token(token_file, std::env::var(TOKEN_VAR).ok())?,
        })
    }
}

/// The largest answer read.
#[cfg(feature = "client")]
const MAX_BODY: u64 = 64 * 1024 * 1024;

#[cfg(feature = "client")]
impl Endpoint {
    /// A client that reports statuses instead of failing on them, each call bounded by
    /// `timeout` (none: unbounded, for an event stream).
    pub(crate) fn agent(timeout: Option<Duration>) -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(timeout)
            .build()
            .into()
    }

    /// A request for `method path`, with the token.
    pub(crate) fn request(&self, method: &str, path: &str) -> ureq::http::request::Builder {
        let mut builder = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            builder = builder.header("Authorization", format!("Bearer {token}"));
        }
        builder
    }

    /// `method path` with an empty body: the status and the body as text; a 401 is
    /// [`ReadError::Unauthorized`].
    pub(crate) fn call(
        &self,
        agent: &ureq::Agent,
        method: &str,
        path: &str,
    ) -> Result<(u16, String), ReadError> {
        let request = self
            .request(method, path)
            .body(())
            .map_err(|e| ReadError::Unexpected(format!("bad request for {path}: {e}")))?;
        Self::answer(agent, request)
    }

    /// `method path` with `body` as JSON: as [`call`](Endpoint::call).
    pub(crate) fn send(
        &self,
        agent: &ureq::Agent,
        method: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<(u16, String), ReadError> {
        let request = self
            .request(method, path)
            .header("Content-Type", "application/json")
            .body(body.to_string().into_bytes())
            .map_err(|e| ReadError::Unexpected(format!("bad request for {path}: {e}")))?;
        Self::answer(agent, request)
    }

    fn answer(
        agent: &ureq::Agent,
        request: ureq::http::Request<impl ureq::AsSendBody>,
    ) -> Result<(u16, String), ReadError> {
        let mut response = agent.run(request).map_err(|e| match &e {
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                ReadError::Refused(e.to_string())
            }
            _ => ReadError::Transport(e.to_string()),
        })?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| ReadError::Transport(e.to_string()))?;
        if status == 401 {
            return Err(ReadError::Unauthorized(status));
        }
        Ok((status, text))
    }

    /// `GET path` as JSON; any status but 200 is an error naming it.
    pub(crate) fn get<T: serde::de::DeserializeOwned>(
        &self,
        agent: &ureq::Agent,
        path: &str,
    ) -> Result<T, ReadError> {
        let (status, text) = self.call(agent, "GET", path)?;
        if status != 200 {
            return Err(ReadError::Unexpected(format!(
                "GET {path} answered {status}: {}",
                text.chars().take(200).collect::<String>()
            )));
        }
        serde_json::from_str(&text)
            .map_err(|e| ReadError::Unexpected(format!("GET {path}: not the API's JSON: {e}")))
    }
}

/// One call of a command to the server, as [`Client::call`] makes it.
#[derive(Debug)]
pub(crate) struct Client {
    /// The server.
    pub(crate) endpoint: Endpoint,
    #[cfg(feature = "client")]
    agent: ureq::Agent,
}

/// How long a command waits for one answer: a change is answered once durable.
#[cfg(feature = "client")]
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl Client {
    /// A client of `endpoint`.
    pub(crate) fn new(endpoint: Endpoint) -> Client {
        Client {
            endpoint,
            #[cfg(feature = "client")]
            agent: Endpoint::agent(Some(CALL_TIMEOUT)),
        }
    }

    /// `method path`, with `body` as JSON if given: the status and the body as text.
    #[cfg(feature = "client")]
    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, String), ReadError> {
        match body {
            Some(body) => self.endpoint.send(&self.agent, method, path, body),
            None => self.endpoint.call(&self.agent, method, path),
        }
    }

    /// In a build without the HTTP client: says so.
    #[cfg(not(feature = "client"))]
    pub(crate) fn call(
        &self,
        _method: &str,
        _path: &str,
        _body: Option<&serde_json::Value>,
    ) -> Result<(u16, String), ReadError> {
        Err(ReadError::NotBuilt)
    }

    /// `PUT path` with `body` as JSON and `If-None-Match: *`: made only if nothing is
    /// there yet (a server answers 412 if something is). The status and the body.
    #[cfg(feature = "client")]
    pub(crate) fn put_new(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<(u16, String), ReadError> {
        let request = self
            .endpoint
            .request("PUT", path)
            .header("If-None-Match", "*")
            .header("Content-Type", "application/json")
            .body(body.to_string().into_bytes())
            .map_err(|e| ReadError::Unexpected(format!("bad request for {path}: {e}")))?;
        Endpoint::answer(&self.agent, request)
    }

    /// In a build without the HTTP client: says so.
    #[cfg(not(feature = "client"))]
    pub(crate) fn put_new(
        &self,
        _path: &str,
        _body: &serde_json::Value,
    ) -> Result<(u16, String), ReadError> {
        Err(ReadError::NotBuilt)
    }
}
