//! Starting `spool serve`: the store's runtime, the token, the server and its stop.

use std::net::SocketAddr;
use std::process::ExitCode;

use serde_json::json;
use spool_http::{Access, AppState, Server, Stopper, ViewsHandle};
use spool_runtime::{Runtime, RuntimeHandle};

use super::{ServeOptions, token_path};
use crate::agent::{AGENT_TYPE, registry};
use crate::cli::location::Location;
use crate::demo::Llm;
use crate::run::{agent_builder, started};
use crate::signals;
use crate::stored::{Failure, failed, open_limited};

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

/// Opens the store's runtime, starts the server on it, says where it listens, and runs
/// until a signal drains it.
fn serve(options: &ServeOptions) -> Result<(), Failure> {
    let limits = options
        .limits
        .limits()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let location = options.store.required().map_err(Failure::Usage)?;
    let given = match &options.token_file {
        Some(path) => read_token(path)?,
        None => None,
    };
    let llm = Llm::from_env()
        .map_err(|e| Failure::Failed(format!("OPENAI_BASE_URL is set but cannot be used: {e}")))?
        .streaming(options.stream);
    // Before any thread starts (see `spool run`).
    let signals = signals::block();
    // Stops the MCP servers when this returns, whether stopped or failed.
    let _mcp = crate::mcp::start(options.mcp.as_deref(), "spool serve")?;
    #[cfg(feature = "postgres")]
    if let Location::Postgres(url) = &location
        && let Some(db) = cluster_of(url)?
    {
        // A node's shards would each count their own spend: a day's budget would
        // be the cluster's times its shards. Refused rather than kept per shard.
        if options.budgets.budgets().map_err(Failure::Usage)?.is_some() {
            return Err(Failure::Usage(
                "--budget and --prices are not taken by a cluster's node (each shard \
                     would count its own spend): the database holds a cluster; run without \
                     them, or serve a store of its own"
                    .to_owned(),
            ));
        }
        let node = ClusterServe {
            url,
            db,
            given,
            llm,
            limits,
        };
        return serve_node(options, node, signals);
    }
    let builder = agent_builder(&llm, options.llm_latency, &limits);
    let builder = match options.budgets.budgets().map_err(Failure::Usage)? {
        Some(budgets) => builder.budgets(budgets),
        None => builder,
    };
    let (builder, otel) = crate::otel::install(builder, &llm, "spool serve")?;
    let (builder, views) = spool_http::publish_views(
        builder,
        spool_http::DEFAULT_PUBLISH_EVERY,
        spool_http::DEFAULT_EVENT_RING,
    );
    // A streamed answer's pieces go on the event stream as they come.
    let (builder, deltas) = spool_http::publish_deltas(builder, spool_http::DEFAULT_DELTA_RING);
    let (runtime, store) = open_limited(&location, builder, &limits)?;
    let handle = runtime.handle();
    let token = Token::given_or_new(given)?;
    let state = app_state(options, handle.clone(), views, &token.text)?.with_deltas(deltas);
    let server = start_server(options, state, &handle)?;
    // A signal waiting since `block` is taken here: the server is there to drain.
    if let Some(set) = signals {
        let stop = drain(server.stopper(), handle.clone());
        signals::on_signal(set, false, "spool serve", stop);
    }
    warn_if_exposed(server.addr(), &options.allow_hosts);
    check_open_files(options.max_connections);
    let store = Announced {
        location: &location,
        name: store.name(),
    };
    announce(options, &store, &runtime, &llm, server.addr(), &token)?;
    let stopped = run_until_stopped(runtime, server);
    crate::otel::finish(otel, "spool serve");
    stopped
}

/// The cluster's tables in the database at `url`, if it holds a cluster (`spool
/// cluster init` was run on it); `None` for a lone store.
#[cfg(feature = "postgres")]
fn cluster_of(url: &str) -> Result<Option<super::node::Db>, Failure> {
    use spool_postgres::ClusterError;
    match super::node::Db::connect(url) {
        Ok(db) => Ok(Some(db)),
        // A bad URL, a server that cannot be reached, a database spool does not know:
        // the store says it as a lone server would (and opening it for writing
        // refuses a cluster's database, should the cluster's tables show then).
        Err(
            ClusterError::NotACluster { .. } | ClusterError::Store(_) | ClusterError::Postgres(_),
        ) => Ok(None),
        Err(error) => Err(failed("cannot open the cluster", error)),
    }
}

/// What `spool serve` on a cluster's database had at hand when it found the cluster.
#[cfg(feature = "postgres")]
struct ClusterServe<'a> {
    url: &'a str,
    db: super::node::Db,
    given: Option<String>,
    llm: Llm,
    limits: crate::cli::limits::Limits,
}

/// `spool serve` as a node of the cluster: joins it, serves the API for every shard,
/// and on a signal stops taking requests, answers those taken in, then stops its
/// shards and hands them over at once.
#[cfg(feature = "postgres")]
fn serve_node(
    options: &ServeOptions,
    serve: ClusterServe<'_>,
    signals: Option<signals::SignalSet>,
) -> Result<(), Failure> {
    let token = serve.given.ok_or_else(|| {
        Failure::Usage(
            "a cluster's nodes share one token: give it with --token-file (the same token on \
             every node)"
                .to_owned(),
        )
    })?;
    let access = access(options, &token);
    let server = server_builder(options);
    let name = spool_postgres::display_name(serve.url)
        .unwrap_or_else(|| spool_postgres::redact_url(serve.url));
    let running = super::node::start(super::node::NodeStart {
        url: serve.url,
        name: name.clone(),
        db: serve.db,
        node: &options.node,
        server,
        every_address: options.addr.ip().is_unspecified(),
        token,
        access,
        api_registry: registry().with_input_schema(AGENT_TYPE, agent_schema()),
        llm: serve.llm,
        llm_latency: options.llm_latency,
        limits: serve.limits,
    })?;
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let keep = stop.clone();
    if let Some(set) = signals {
        let stopper = running.server.stopper();
        signals::on_signal(set, false, "spool serve", move || {
            stopper.drain();
            let _ = stop.send(());
        });
    }
    let addr = running.server.addr();
    warn_if_exposed(addr, &options.allow_hosts);
    check_open_files(options.max_connections);
    let shards: Vec<String> = running
        .node
        .shard_ids()
        .iter()
        .map(ToString::to_string)
        .collect();
    tracing::info!(
        target: "spool::serve",
        "spool serve: node {} of a cluster of {} shards in {name}, reached at {}; runs shards [{}]",
        running.node_id,
        running.shards,
        running.advertise,
        shards.join(", ")
    );
    crate::logs::say(&format!("listening on http://{addr}"));
    crate::output::say(&web_page(addr, None, options.token_file.as_deref()));
    let _ = stopped.recv();
    drop(keep);
    let super::node::RunningNode {
        server, node, otel, ..
    } = running;
    let left = node.stop();
    server.shutdown();
    crate::otel::finish_shared(otel, "spool serve");
    left.map_err(|e| failed("the node did not stop cleanly", e))?;
    tracing::info!(
        target: "spool::serve",
        "spool serve: stopped; its shards were handed over"
    );
    Ok(())
}

/// The API's token: the one given, or one made at start.
struct Token {
    /// The token itself.
    text: String,
    /// Whether it was made at start (and so is to be written next to the store).
    generated: bool,
}

impl Token {
    /// The token `given` (from `--token-file`), or a new one; warns if it is short
    /// enough to be guessed.
    fn given_or_new(given: Option<String>) -> Result<Token, Failure> {
        let generated = given.is_none();
        let text = match given {
            Some(token) => token,
            None => new_token()?,
        };
        if text.chars().count() < SHORT_TOKEN {
            tracing::warn!(
                target: "spool::serve",
                "spool serve: the token has {} characters; a token of fewer than {SHORT_TOKEN} \
                 can be guessed (make one with `openssl rand -hex 32`)",
                text.chars().count()
            );
        }
        Ok(Token { text, generated })
    }
}

/// The API's state: the runtime's `handle`, the built-in agent's input schema, the
/// published `views`, and who may read and write (`--public-read`).
fn app_state(
    options: &ServeOptions,
    handle: RuntimeHandle,
    views: ViewsHandle,
    token: &str,
) -> Result<AppState, Failure> {
    let registry = registry().with_input_schema(AGENT_TYPE, agent_schema());
    let access = access(options, token);
    Ok(AppState::new(handle, registry, views, token.to_owned())
        .map_err(|e| failed("cannot set up the API", e))?
        .access(access)
        .prompt_type(AGENT_TYPE))
}

/// Who may read and write: everyone with `token`, or anyone for reads with
/// `--public-read`.
fn access(options: &ServeOptions, token: &str) -> Access {
    if options.public_read {
        Access::PublicRead(token.to_owned())
    } else {
        Access::Token(token.to_owned())
    }
}

/// The server as the options say: its address, the hosts it answers, its shutdown
/// timeout and its cap on connections.
fn server_builder(options: &ServeOptions) -> spool_http::ServerBuilder {
    options
        .allow_hosts
        .iter()
        .fold(Server::builder(), |server, host| server.allow_host(host))
        .addr(options.addr)
        .shutdown_timeout(options.shutdown_timeout)
        .max_connections(options.max_connections)
}

/// Starts the server with the options' address, hosts and limits; if it cannot start,
/// stops the runtime before saying why.
fn start_server(
    options: &ServeOptions,
    state: AppState,
    handle: &RuntimeHandle,
) -> Result<Server, Failure> {
    let server = server_builder(options).start(state);
    server.map_err(|error| {
        let _ = handle.shutdown();
        failed("cannot serve", error)
    })
}

/// What a signal does: the loop runs on while the requests taken in are answered,
/// then stops.
fn drain(stopper: Stopper, handle: RuntimeHandle) -> impl FnOnce() + Send + 'static {
    move || {
        stopper.drain();
        let _ = handle.shutdown();
    }
}

/// The store, as [`announce`] says it.
struct Announced<'a> {
    /// Where it is, which says where a token made at start is written.
    location: &'a Location,
    /// Its name: the file's path, or the database's URL without its password.
    name: String,
}

/// Writes a token made at start next to the store (or, for a database, in the working
/// directory), then says what started and where: the start line in the log, the
/// address, and the web page's.
fn announce(
    options: &ServeOptions,
    store: &Announced<'_>,
    runtime: &Runtime,
    llm: &Llm,
    addr: SocketAddr,
    token: &Token,
) -> Result<(), Failure> {
    if token.generated {
        // Not on stderr, where a log collector would keep it.
        let path = token_path(store.location);
        write_token(&path, &token.text)?;
        crate::logs::say(&format!(
            "spool serve: token written to {} (use --token-file {0} to keep it)",
            path.display()
        ));
    }
    tracing::info!(
        target: "spool::serve",
        "spool serve: {}",
        started(runtime, &store.name, llm, options.llm_latency)
    );
    crate::logs::say(&format!("listening on http://{addr}"));
    crate::output::say(&web_page(
        addr,
        token.generated.then_some(token.text.as_str()),
        options.token_file.as_deref(),
    ));
    Ok(())
}

/// Runs the loop until it stops, then stops the server; fails if the store did.
fn run_until_stopped(mut runtime: Runtime, server: Server) -> Result<(), Failure> {
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
    tracing::info!(
        target: "spool::serve",
        "spool serve: stopped; everything taken in is in the store"
    );
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
            target: "spool::serve",
            "spool serve: --allow-host '*' answers any Host: a web page that leads a browser \
             here through a name of its own (DNS rebinding) can use the API; name the hosts \
             instead"
        );
    }
    if addr.ip().is_loopback() {
        return;
    }
    tracing::warn!(
        target: "spool::serve",
        "spool serve: listening on {addr}, beyond this machine, without TLS: the token and \
         every prompt cross the network in clear; put spool behind a proxy that does TLS"
    );
    if addr.ip().is_unspecified() && allow_hosts.is_empty() {
        tracing::warn!(
            target: "spool::serve",
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
        target: "spool::serve",
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
