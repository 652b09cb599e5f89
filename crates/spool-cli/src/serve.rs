//! `spool serve --store PATH`: `spool run` behind the HTTP API. It goes on from the
//! store with the built-in agent as task type `agent` (input `{"prompt": ...}`,
//! checked against its schema) and the store's schedules, serves `spool-http`'s router
//! on `--addr` (loopback by default), and says `listening on http://ADDR` on stderr once
//! it takes connections. Every request needs the bearer token (from `--token-file`, or
//! made at start and printed once) unless `--public-read` opens the GETs. Ctrl-C or
//! SIGTERM stops it cleanly.

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
use crate::run::{agent_builder, signals};
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
}

/// The environment `spool serve` reads.
pub(crate) const SERVE_ENVIRONMENT: &str = concat!(
    "\
Environment for serve: as for run (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL).

Every request needs `Authorization: Bearer TOKEN`; without --token-file a token is
made at start and printed once on stderr. Once it takes connections it prints
`listening on http://ADDR` on stderr. See docs/http.md.

The live web page is at http://ADDR/#token=TOKEN (docs/web.md).

",
    store_limits_help!()
);

/// The options of `spool serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The store (SQLite file) to serve; created if missing
    #[arg(long, value_name = "PATH")]
    store: PathBuf,
    /// Where to listen (loopback unless told otherwise; port 0: any free port)
    #[arg(long, value_name = "ADDR", default_value = spool_http::DEFAULT_ADDR)]
    addr: std::net::SocketAddr,
    /// A file holding the bearer token (else one is made and printed once)
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// GET requests need no token
    #[arg(long)]
    public_read: bool,
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
        }
    }
}

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
    if let Some(set) = signals {
        signals::on_signal(set, handle.clone(), false, "spool serve");
    }
    let generated = token.is_none();
    let token = match token {
        Some(token) => token,
        None => new_token()?,
    };
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
    let server = match Server::builder().addr(options.addr).start(state) {
        Ok(server) => server,
        Err(error) => {
            let _ = handle.shutdown();
            return Err(failed("cannot serve", error));
        }
    };
    if generated {
        crate::logs::say(&format!("spool serve: token (printed once): {token}"));
    }
    let core = runtime.scheduler();
    tracing::info!(
        "spool serve: {} schedules, {} live tasks in {}; {}",
        runtime.schedules().len(),
        core.live_len(),
        options.store.display(),
        Described(core.task_limits(), core.request_limits()),
    );
    crate::logs::say(&format!("listening on http://{}", server.addr()));
    runtime.run();
    server.shutdown();
    if let Some(error) = runtime.journal_error() {
        return Err(Failure::Failed(format!("the store failed: {error}")));
    }
    tracing::info!("spool serve: stopped; everything taken in is in the store");
    Ok(())
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
            }
            other => panic!("{other:?}"),
        }
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
