//! `spool serve --store PATH`: `spool run` behind the HTTP API. It goes on from the
//! store with the built-in agent as task type `agent` (input `{"prompt": ...}`,
//! checked against its schema) and the store's schedules, serves `spool-http`'s router
//! on `--addr` (loopback by default), and says `listening on http://ADDR` on stderr once
//! it takes connections, and the web page's address on stdout. Every request needs the bearer token (from `--token-file`, or
//! made at start and written to `STORE.token`, mode 0600) unless `--public-read` opens
//! the GETs. Ctrl-C or SIGTERM stops it within `--shutdown-timeout`: it stops taking
//! connections, answers the requests it took in while the loop still runs, then stops
//! the loop and cuts what is left.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;
use spool_http::{Access, AppState, Server};

use crate::cli::ModelArgs;
use crate::demo::{AGENT_TYPE, Llm, registry};
use crate::limits::{Described, LimitArgs};
use crate::output::counted;
use crate::run::{agent_builder, described_llm, signals};
use crate::stored::{Failure, failed, open_limited};

/// The options of `spool serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServeOptions {
    /// The store to run.
    pub(crate) store: PathBuf,
    /// Where to listen.
    pub(crate) addr: SocketAddr,
    /// A file holding the bearer token.
    pub(crate) token_file: Option<PathBuf>,
    /// GETs need no token.
    pub(crate) public_read: bool,
    /// The scripted model's latency per call.
    pub(crate) llm_latency: Duration,
    /// The limits on tasks and requests.
    pub(crate) limits: LimitArgs,
    /// How long a shutdown waits for the requests taken in.
    pub(crate) shutdown_timeout: Duration,
    /// Hosts answered besides the bound address's names.
    pub(crate) allow_hosts: Vec<String>,
    /// How many connections may be open at once.
    pub(crate) max_connections: usize,
}

/// The environment `spool serve` reads.
pub(crate) const SERVE_ENVIRONMENT: &str = concat!(
    "\
Environment for serve: as for run (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL).

Every request needs `Authorization: Bearer TOKEN`; without --token-file a token is
made at start and written to STORE.token (mode 0600; its path is said on stderr).
Once it takes connections it prints `listening on http://ADDR` on stderr, and the
live web page's address on stdout (docs/web.md): `web page: http://ADDR/#token=TOKEN`
with a token it made, without the token when it came from --token-file.
Requests must name the server in `Host` (its address, localhost, any IP address when
bound to 0.0.0.0 or ::, or --allow-host).
See docs/http.md.

",
    store_limits_help!()
);

/// The options of `spool serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The store (SQLite file) to serve; created if missing
    #[arg(long, value_name = "PATH")]
    store: PathBuf,
    /// Where to listen: loopback unless told otherwise; port 0 takes
    /// any free port
    #[arg(long, value_name = "ADDR", default_value = spool_http::DEFAULT_ADDR, verbatim_doc_comment)]
    addr: std::net::SocketAddr,
    /// A file holding the bearer token (else one is made and written
    /// to STORE.token)
    #[arg(long, value_name = "FILE", verbatim_doc_comment)]
    token_file: Option<PathBuf>,
    /// GET requests need no token
    #[arg(long)]
    public_read: bool,
    /// Seconds a shutdown waits for the requests taken in before it
    /// cuts connections
    #[arg(
        long,
        verbatim_doc_comment,
        value_name = "SECS",
        default_value_t = spool_http::DEFAULT_SHUTDOWN_TIMEOUT.as_secs(),
        value_parser = clap::value_parser!(u64).range(..=3600),
    )]
    shutdown_timeout: u64,
    /// Also answer requests whose Host is HOST (NAME for any port,
    /// NAME:PORT for one, '*' for any Host); repeatable
    #[arg(long = "allow-host", value_name = "HOST", verbatim_doc_comment)]
    allow_hosts: Vec<String>,
    /// Connections open at once; past it a client gets 503 with
    /// Retry-After
    #[arg(
        long,
        verbatim_doc_comment,
        value_name = "N",
        default_value_t = spool_http::DEFAULT_MAX_CONNECTIONS,
        value_parser = parse_max_connections,
    )]
    max_connections: usize,
    /// The scripted model's latency.
    #[command(flatten)]
    model: ModelArgs,
    /// The limits on tasks and requests.
    #[command(flatten)]
    limits: LimitArgs,
}

impl From<ServeArgs> for ServeOptions {
    fn from(args: ServeArgs) -> ServeOptions {
        ServeOptions {
            store: args.store,
            addr: args.addr,
            token_file: args.token_file,
            public_read: args.public_read,
            llm_latency: args.model.latency(),
            limits: args.limits,
            shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
            allow_hosts: args.allow_hosts,
            max_connections: args.max_connections,
        }
    }
}

/// The most connections `--max-connections` takes: each is an open file.
const MAX_CONNECTIONS: usize = 65_536;

fn parse_max_connections(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_CONNECTIONS).contains(&n) => Ok(n),
        _ => Err(format!("a whole number from 1 to {MAX_CONNECTIONS}")),
    }
}

/// Tokens shorter than this are warned about: guessable.
const SHORT_TOKEN: usize = 16;

/// The built-in agent's input schema.
pub(crate) fn agent_schema() -> serde_json::Value {
    json!({"type": "object", "required": ["prompt"],
        "properties": {"prompt": {"type": "string", "pattern": "\\S"}}})
}

/// `spool serve`.
pub(crate) fn run(options: &ServeOptions) -> ExitCode {
    match serve(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report("spool serve"),
    }
}

fn serve(options: &ServeOptions) -> Result<(), Failure> {
    let limits = options
        .limits
        .limits()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let token = match &options.token_file {
        Some(path) => read_token(path)?,
        None => None,
    };
    let llm = Llm::from_env()
        .map_err(|e| Failure::Failed(format!("OPENAI_BASE_URL is set but cannot be used: {e}")))?;
    // Before any thread starts (see `spool run`).
    let signals = signals::block();
    let (builder, views) = spool_http::publish_views(
        agent_builder(&llm, options.llm_latency, &limits),
        spool_http::DEFAULT_PUBLISH_EVERY,
        spool_http::DEFAULT_EVENT_RING,
    );
    let mut runtime = open_limited(&options.store, builder, &limits)?;
    let handle = runtime.handle();
    let generated = token.is_none();
    let token = match token {
        Some(token) => token,
        None => new_token()?,
    };
    if token.chars().count() < SHORT_TOKEN {
        tracing::warn!(
            "spool serve: the token has {} characters; a token of fewer than {SHORT_TOKEN} \
             can be guessed (make one with `openssl rand -hex 32`)",
            token.chars().count()
        );
    }
    let registry = registry().with_input_schema(AGENT_TYPE, agent_schema());
    let access = if options.public_read {
        Access::PublicRead(token.clone())
    } else {
        Access::Token(token.clone())
    };
    let state = AppState::new(handle.clone(), registry, views, token.clone())
        .map_err(|e| failed("cannot set up the API", e))?
        .access(access)
        .prompt_type(AGENT_TYPE);
    let server = options
        .allow_hosts
        .iter()
        .fold(Server::builder(), |server, host| server.allow_host(host))
        .addr(options.addr)
        .shutdown_timeout(options.shutdown_timeout)
        .max_connections(options.max_connections)
        .start(state);
    let server = match server {
        Ok(server) => server,
        Err(error) => {
            let _ = handle.shutdown();
            return Err(failed("cannot serve", error));
        }
    };
    // A signal waiting since `block` is taken here: the server is there to drain.
    if let Some(set) = signals {
        let stopper = server.stopper();
        let handle = handle.clone();
        signals::on_signal(set, false, "spool serve", move || {
            // The loop runs on while the requests taken in are answered, then stops.
            stopper.drain();
            let _ = handle.shutdown();
        });
    }
    warn_if_exposed(server.addr(), &options.allow_hosts);
    check_open_files(options.max_connections);
    if generated {
        // Not on stderr, where a log collector would keep it.
        let path = token_path(&options.store);
        write_token(&path, &token)?;
        crate::logs::say(&format!(
            "spool serve: token written to {} (use --token-file {0} to keep it)",
            path.display()
        ));
    }
    let core = runtime.scheduler();
    tracing::info!(
        "spool serve: {}, {} in {}; llm {}; {}",
        counted(runtime.schedules().len(), "schedule"),
        counted(core.live_len(), "live task"),
        options.store.display(),
        described_llm(&llm, options.llm_latency),
        Described(core.task_limits(), core.request_limits()),
    );
    crate::logs::say(&format!("listening on http://{}", server.addr()));
    crate::output::say(&web_page(
        server.addr(),
        generated.then_some(token.as_str()),
        options.token_file.as_deref(),
    ));
    runtime.run();
    let journal_error = runtime.journal_error().map(|error| error.to_string());
    // The runtime goes before the server's last connections: a request still waiting
    // on the loop is answered 503 instead of waiting for ever, and executor threads
    // busy with a call are not waited for (what they had out is sent again at the next
    // start, from the store).
    drop(runtime);
    server.shutdown();
    if let Some(error) = journal_error {
        return Err(Failure::Failed(format!("the store failed: {error}")));
    }
    tracing::info!("spool serve: stopped; everything taken in is in the store");
    Ok(())
}

/// The line that gives the web page's address. A token made at start is in it
/// (`#token=`, the fragment, which a browser never sends): whoever reads stdout started
/// the server, and the token is in `STORE.token` for them already. A token from
/// `--token-file` is not: the user has it, and a secret they keep in a file is not
/// copied to wherever stdout goes; the line names the file instead.
fn web_page(addr: SocketAddr, made: Option<&str>, token_file: Option<&std::path::Path>) -> String {
    match (made, token_file) {
        (Some(token), _) => format!("web page: http://{addr}/#token={token}"),
        (None, Some(file)) => format!(
            "web page: http://{addr}/ (add #token= and the token in {})",
            file.display()
        ),
        (None, None) => format!("web page: http://{addr}/"),
    }
}

/// The token in `path`, trimmed; an empty file is refused. The error names the file
/// the user gave, and not what the system said about others.
fn read_token(path: &std::path::Path) -> Result<Option<String>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| failed(&format!("cannot read the token file {}", path.display()), e))?;
    let token = text.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Failure::Failed(format!(
            "the token file {} must hold one token: visible characters, no spaces",
            path.display()
        )));
    }
    Ok(Some(token.to_owned()))
}

/// Where a token made at start is written: beside the store, `STORE.token`.
fn token_path(store: &std::path::Path) -> PathBuf {
    let mut path = store.as_os_str().to_owned();
    path.push(".token");
    PathBuf::from(path)
}

/// Writes `token` to `path`, readable by the owner only.
fn write_token(path: &std::path::Path, token: &str) -> Result<(), Failure> {
    use std::io::Write as _;
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        open.mode(0o600);
        // A file that was there keeps its mode on open: narrow it first.
        if path.exists() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| failed(&format!("cannot write the token to {}", path.display()), e))?;
        }
    }
    open.open(path)
        .and_then(|mut file| writeln!(file, "{token}"))
        .map_err(|e| {
            failed(
                &format!(
                    "cannot write the token to {} (use --token-file)",
                    path.display()
                ),
                e,
            )
        })
}

/// Warns at start when the server can be reached from other machines (spool has no
/// TLS; on every address only IP addresses and `localhost` are answered unless hosts
/// are named), and when `--allow-host '*'` lets any `Host` in.
fn warn_if_exposed(addr: SocketAddr, allow_hosts: &[String]) {
    if allow_hosts.iter().any(|host| host.trim() == "*") {
        tracing::warn!(
            "spool serve: --allow-host '*' answers any Host: a web page that leads a browser \
             here through a name of its own (DNS rebinding) can use the API; name the hosts \
             instead"
        );
    }
    if addr.ip().is_loopback() {
        return;
    }
    tracing::warn!(
        "spool serve: listening on {addr}, beyond this machine, without TLS: the token and \
         every prompt cross the network in clear; put spool behind a proxy that does TLS"
    );
    if addr.ip().is_unspecified() && allow_hosts.is_empty() {
        tracing::warn!(
            "spool serve: on every address, a Host that is an IP address or localhost is \
             answered; name the other hosts clients use with --allow-host (others get 421)"
        );
    }
}

/// Open files the process needs besides its connections: the store, its journal,
/// executors' sockets, the listener.
#[cfg(unix)]
const OTHER_FILES: u64 = 128;

/// Raises the soft limit on open files to what `max_connections` needs (up to the
/// hard limit), and warns if it is still short: past it, connections would be refused
/// by the system before the cap's clear `503`, and the store could not open a file.
#[cfg(unix)]
fn check_open_files(max_connections: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let needed = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(OTHER_FILES);
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= needed {
        return;
    }
    let raised = needed.min(hard);
    let have = if raised > soft && setrlimit(Resource::RLIMIT_NOFILE, raised, hard).is_ok() {
        raised
    } else {
        soft
    };
    if have >= needed {
        return;
    }
    tracing::warn!(
        "spool serve: --max-connections {max_connections} needs about {needed} open files and \
         the limit is {have}; connections past about {} will fail (raise `ulimit -n`, or \
         lower --max-connections)",
        have.saturating_sub(OTHER_FILES)
    );
}

#[cfg(not(unix))]
fn check_open_files(_max_connections: usize) {}

/// A token of 32 random bytes, in hex, from the system's random source.
fn new_token() -> Result<String, Failure> {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| failed("cannot make a token (use --token-file)", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("spool").chain(args.iter().copied()))
    }

    #[test]
    fn serve_takes_a_store_and_listens_on_loopback_by_default() {
        match parse(&["serve", "--store", "s.spool"]) {
            Ok(Cli {
                command: Command::Serve(args),
                ..
            }) => assert_eq!(
                ServeOptions::from(args),
                ServeOptions {
                    store: "s.spool".into(),
                    addr: "127.0.0.1:7420".parse().expect("an address"),
                    token_file: None,
                    public_read: false,
                    llm_latency: Duration::from_millis(20),
                    limits: LimitArgs::default(),
                    shutdown_timeout: Duration::from_secs(10),
                    allow_hosts: Vec::new(),
                    max_connections: 512,
                }
            ),
            other => panic!("{other:?}"),
        }
        let args = [
            "serve",
            "--store",
            "s.spool",
            "--addr",
            "0.0.0.0:80",
            "--token-file",
            "t",
            "--public-read",
            "--shutdown-timeout",
            "3",
            "--allow-host",
            "spool.example",
            "--allow-host",
            "proxy.example:8443",
            "--max-connections",
            "50",
        ];
        match parse(&args) {
            Ok(Cli {
                command: Command::Serve(args),
                ..
            }) => {
                let options = ServeOptions::from(args);
                assert_eq!(options.addr, "0.0.0.0:80".parse().expect("an address"));
                assert_eq!(options.token_file, Some(PathBuf::from("t")));
                assert!(options.public_read);
                assert_eq!(options.shutdown_timeout, Duration::from_secs(3));
                assert_eq!(
                    options.allow_hosts,
                    ["spool.example", "proxy.example:8443"].map(String::from)
                );
                assert_eq!(options.max_connections, 50);
            }
            other => panic!("{other:?}"),
        }
        let error = parse(&["serve", "--store", "s", "--max-connections", "0"])
            .expect_err("no connections");
        assert!(
            error.to_string().starts_with(
                "error: invalid value '0' for '--max-connections <N>': a whole number from 1 to 65536"
            ),
            "{error}"
        );
        assert_eq!(
            token_path(std::path::Path::new("dir/s.spool")),
            PathBuf::from("dir/s.spool.token")
        );
        let error =
            parse(&["serve", "--store", "s", "--addr", "localhost"]).expect_err("a bad address");
        assert_eq!(error.kind(), ErrorKind::ValueValidation);
        assert!(
            error
                .to_string()
                .starts_with("error: invalid value 'localhost' for '--addr <ADDR>': invalid socket address syntax"),
            "{error}"
        );
    }
}
