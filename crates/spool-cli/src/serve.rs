//! `spool serve --store PATH` (or `--postgres URL`): `spool run` behind the HTTP API.
//! It goes on from the store with the built-in agent as task type `agent` (input
//! `{"prompt": ...}`, checked against its schema) and the store's schedules, serves
//! `spool-http`'s router on `--addr` (loopback by default), and says `listening on
//! http://ADDR` on stderr once it takes connections, and the web page's address on
//! stdout. Every request needs the bearer token (from `--token-file`, or made at start
//! and written to `STORE.token`, or to `DB.token` in the working directory for a
//! PostgreSQL database `DB`, mode 0600) unless `--public-read` opens the GETs. Ctrl-C or
//! SIGTERM stops it within `--shutdown-timeout`: it stops taking connections, answers
//! the requests it took in while the loop still runs, then stops the loop and cuts what
//! is left.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::limits::LimitArgs;
#[cfg(feature = "serve")]
use crate::cli::location::Location;
use crate::cli::location::StoreLocation;
use crate::cli::serve::ServeArgs;

/// `spool serve` as a node of a cluster: in builds with `serve` and `postgres`.
#[cfg(all(feature = "serve", feature = "postgres"))]
mod node;
/// Starting the server: in builds with the `serve` feature (on by default).
#[cfg(feature = "serve")]
mod start;
#[cfg(feature = "serve")]
pub(crate) use start::run;

/// The options of `spool serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServeOptions {
    /// The store to run.
    pub(crate) store: StoreLocation,
    /// Where to listen.
    pub(crate) addr: SocketAddr,
    /// A file holding the bearer token.
    pub(crate) token_file: Option<PathBuf>,
    /// GETs need no token.
    pub(crate) public_read: bool,
    /// The scripted model's latency per call.
    pub(crate) llm_latency: Duration,
    /// Whether a real endpoint's answers are streamed.
    pub(crate) stream: bool,
    /// The limits on tasks and requests.
    pub(crate) limits: LimitArgs,
    /// The budgets on LLM spend.
    pub(crate) budgets: crate::cli::budgets::BudgetArgs,
    /// How long a shutdown waits for the requests taken in.
    pub(crate) shutdown_timeout: Duration,
    /// Hosts answered besides the bound address's names.
    pub(crate) allow_hosts: Vec<String>,
    /// How many connections may be open at once.
    pub(crate) max_connections: usize,
    /// As a node of a cluster: its name, where the others reach it, its leases' ttl.
    pub(crate) node: NodeArgs,
    /// The MCP servers' configuration (`--mcp FILE`), if any.
    pub(crate) mcp: Option<PathBuf>,
}

/// How `spool serve` runs as a node of a cluster (when its database has one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeArgs {
    /// Its name; by default the host's name and the port.
    pub(crate) node_id: Option<String>,
    /// The URL the other nodes reach it at; by default `http://ADDR`.
    pub(crate) advertise: Option<String>,
    /// How long its leases last unless renewed.
    pub(crate) lease_ttl: Duration,
}

impl From<ServeArgs> for ServeOptions {
    fn from(args: ServeArgs) -> ServeOptions {
        ServeOptions {
            store: args.location,
            addr: args.addr,
            token_file: args.token_file,
            public_read: args.public_read,
            llm_latency: args.model.latency(),
            stream: args.model.stream(),
            limits: args.limits,
            budgets: args.budgets,
            shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
            allow_hosts: args.allow_hosts,
            max_connections: args.max_connections,
            node: NodeArgs {
                node_id: args.node_id,
                advertise: args.advertise,
                lease_ttl: args.lease_ttl,
            },
            mcp: args.mcp.config,
        }
    }
}

/// Where a token made at start is written: beside an SQLite store, `STORE.token`; for
/// a PostgreSQL database, `DB.token` in the working directory, after the database's
/// name (`spool.token` if the URL names none).
#[cfg(feature = "serve")]
pub(crate) fn token_path(store: &Location) -> PathBuf {
    match store {
        Location::Sqlite(path) => {
            let mut path = path.as_os_str().to_owned();
            path.push(".token");
            PathBuf::from(path)
        }
        Location::Postgres(url) => PathBuf::from(format!("{}.token", database_name(url))),
    }
}

/// The database a PostgreSQL URL names, as the client reads it (`postgres://HOST/DB`,
/// `dbname=DB` in the `key=value` form, else the user's name), as a file name:
/// characters other than letters, digits, `_`, `-` and `.` become `_`; `spool` if it
/// names none (or the URL does not parse).
#[cfg(feature = "serve")]
fn database_name(url: &str) -> String {
    #[cfg(feature = "postgres")]
    let name = spool_postgres::database_of(url.trim()).unwrap_or_default();
    #[cfg(not(feature = "postgres"))]
    let name = {
        let _ = url;
        String::new()
    };
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.chars().all(|c| c == '.') {
        "spool".to_owned()
    } else {
        name
    }
}

/// `spool serve` in a build without the `serve` feature: says how to get one.
#[cfg(not(feature = "serve"))]
pub(crate) fn run(_options: &ServeOptions) -> std::process::ExitCode {
    crate::stored::Failure::Failed(crate::stored::not_built("serve")).report("spool serve")
}

#[cfg(all(test, feature = "serve"))]
mod tests {
    /// A token made for a PostgreSQL store is written in the working directory, after
    /// the database's name, whatever form the URL takes.
    #[test]
    #[cfg(feature = "postgres")]
    fn a_token_for_a_database_is_named_after_it() {
        for (url, file) in [
            ("postgres://u:pw@h:5432/team", "team.token"),
            ("postgresql://h/team?sslmode=disable", "team.token"),
            ("postgres://h/", "spool.token"),
            ("postgres://h", "spool.token"),
            ("postgres://h/../etc", ".._etc.token"),
            ("host=h dbname=ops user=u", "ops.token"),
            ("host=h user=u", "u.token"),
            ("postgres://u:se/cr?et@h/team", "team.token"),
            ("host=h password = 'a b' dbname=ops", "ops.token"),
        ] {
            let path = token_path(&Location::Postgres(url.to_owned()));
            assert_eq!(path, PathBuf::from(file), "{url}");
        }
    }

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
                    store: StoreLocation::sqlite("s.spool"),
                    addr: "127.0.0.1:7420".parse().expect("an address"),
                    token_file: None,
                    public_read: false,
                    llm_latency: Duration::from_millis(20),
                    stream: true,
                    limits: LimitArgs::default(),
                    budgets: crate::cli::budgets::BudgetArgs::default(),
                    shutdown_timeout: Duration::from_secs(10),
                    allow_hosts: Vec::new(),
                    max_connections: 512,
                    node: NodeArgs {
                        node_id: None,
                        advertise: None,
                        lease_ttl: Duration::from_secs(10),
                    },
                    mcp: None,
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
            token_path(&Location::Sqlite("dir/s.spool".into())),
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
