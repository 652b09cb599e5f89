//! A store's address: the URL parsed into the client's configuration, and the name it
//! is shown by in messages and logs (`postgres://user@host:port/db`), never with its
//! password.

use std::time::Duration;

use postgres::config::Host;

use crate::error::PgStoreError;
use crate::redact::{redact_url, scrub};
use crate::tls::TlsOptions;

/// The default PostgreSQL port, when the URL names none.
const DEFAULT_PORT: u16 = 5432;

/// Where a store is: how to connect, and how to name it.
#[derive(Clone)]
pub(crate) struct Address {
    pub(crate) config: postgres::Config,
    /// `postgres://user@host:port/db`.
    pub(crate) name: String,
    /// `host:port`, for a connection refused.
    pub(crate) server: String,
    /// `sslmode` and `sslrootcert`, to explain a refused certificate.
    tls_options: TlsOptions,
    /// The TLS connector, or `None` for `sslmode=disable`.
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds the password: only the name is shown.
        f.debug_struct("Address")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Address {
    /// Parses `url` (a `postgres://` URL or a `key=value` connection string).
    /// `sslmode` and `sslrootcert` are read here (the client reads neither
    /// `verify-ca`/`verify-full` nor `sslrootcert`), and a root file named is loaded.
    pub(crate) fn parse(url: &str, connect_timeout: Duration) -> Result<Address, PgStoreError> {
        let tls_options = TlsOptions::take(url).map_err(|reason| PgStoreError::BadUrl {
            url: redact_url(url),
            reason: scrub(&reason, url),
        })?;
        let mut config: postgres::Config =
            tls_options.rest.parse().map_err(|e: postgres::Error| {
                // The client's own words stop at "invalid connection string"; its cause
                // says which part (a port that is not a number, an unknown option).
                PgStoreError::BadUrl {
                    url: redact_url(url),
                    reason: scrub(&reason(&e), url),
                }
            })?;
        config.ssl_mode(tls_options.mode.client_mode());
        let tls = tls_options.connector()?;
        config.connect_timeout(connect_timeout);
        // A connection that goes silent (a cut cable, a dropped route) is noticed in
        // seconds rather than at the kernel's default two hours.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(5));
        config.keepalives_interval(Duration::from_secs(1));
        config.keepalives_retries(5);
        // Keepalives probe an idle connection only: data sent and never acknowledged (a
        // path that drops packets mid-batch) ends the connection after this long rather
        // than after the kernel's retransmissions, about 15 minutes.
        config.tcp_user_timeout(Duration::from_secs(15));
        if config.get_application_name().is_none() {
            config.application_name("spool");
        }
        let (name, server) = names(&config);
        Ok(Address {
            config,
            name,
            server,
            tls_options,
            tls,
        })
    }

    /// Connects a new client, with TLS as the URL's `sslmode` says.
    pub(crate) fn connect(&self) -> Result<postgres::Client, PgStoreError> {
        let connected = match &self.tls {
            None => self.config.connect(postgres::NoTls),
            Some(tls) => self.config.connect(tls.clone()),
        };
        connected.map_err(|e| PgStoreError::Refused {
            address: self.server.clone(),
            reason: match self.tls_options.explain(&e) {
                // The client's words for the step that failed, then why in plain words.
                Some(why) => format!("{e}: {why}"),
                None => reason(&e),
            },
        })
    }
}

/// The name a database goes by in messages (`postgres://user@host:port/db`, never the
/// password) and its server (`host:port`), from the client's reading of the URL.
fn names(config: &postgres::Config) -> (String, String) {
    let user = config.get_user().unwrap_or("").to_owned();
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(DEFAULT_PORT);
    let db = config.get_dbname().unwrap_or(&user).to_owned();
    let server = format!("{host}:{port}");
    let name = if user.is_empty() {
        format!("postgres://{server}/{db}")
    } else {
        format!("postgres://{user}@{server}/{db}")
    };
    (name, server)
}

/// The name the database at `url` goes by in messages and logs, as
/// [`PgStore::name`](crate::PgStore::name) gives it — `postgres://user@host:port/db`,
/// built from the client's reading of the URL, so never its password; `None` for a URL
/// that does not parse (show [`redact_url`] of it instead). Reads no file and connects
/// to nothing.
pub fn display_name(url: &str) -> Option<String> {
    let options = TlsOptions::take(url).ok()?;
    let config: postgres::Config = options.rest.parse().ok()?;
    Some(names(&config).0)
}

/// The database `url` names, as the client reads it (the user's name when the URL
/// names none); `None` for a URL that does not parse.
pub fn database_of(url: &str) -> Option<String> {
    let options = TlsOptions::take(url).ok()?;
    let config: postgres::Config = options.rest.parse().ok()?;
    let user = config.get_user().unwrap_or("");
    Some(config.get_dbname().unwrap_or(user).to_owned())
}

/// The words of a client error with the causes it wraps (the client's own display
/// stops at "error connecting to server").
pub(crate) fn reason(error: &postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL's password is never shown, in either form.
    #[test]
    fn the_password_is_left_out_of_what_is_shown() {
        assert_eq!(
            redact_url("postgres://me:s3cret@db:5/x"),
            "postgres://me:***@db:5/x"
        );
        assert_eq!(
            redact_url("host=db password=s3cret user=me"),
            "host=db password=*** user=me"
        );
        assert_eq!(
            redact_url("postgres://me@db/x?password=s3cret&sslmode=disable"),
            "postgres://me@db/x?password=***&sslmode=disable"
        );
        assert_eq!(redact_url("postgres://me@db/x"), "postgres://me@db/x");
        let address = Address::parse("postgres://me:s3cret@db:6543/jobs", Duration::from_secs(1))
            .expect("parses");
        assert_eq!(address.name, "postgres://me@db:6543/jobs");
        assert!(!format!("{address:?}").contains("s3cret"));
        assert_eq!(
            display_name("postgres://me:se/cr?et@db:6543/jobs").as_deref(),
            Some("postgres://me@db:6543/jobs")
        );
        assert_eq!(
            database_of("postgres://me:se/cr?et@db/jobs").as_deref(),
            Some("jobs")
        );
        assert_eq!(
            database_of("host=db user=me password='a b'").as_deref(),
            Some("me")
        );
        assert_eq!(display_name("postgres://me@db:notaport/x"), None);
    }
}
