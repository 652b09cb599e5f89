//! Where a command's store is: `--store PATH` (an SQLite file) or `--postgres URL` (a
//! PostgreSQL database), the URL also from the environment (`SPOOL_DATABASE_URL`).

use std::fmt;
use std::path::PathBuf;

use clap::Args;

/// The environment variable that stands for `--postgres URL` when neither `--store`
/// nor `--postgres` is given.
pub(crate) const DATABASE_URL_VAR: &str = "SPOOL_DATABASE_URL";

/// The options that say where the store is. At most one of them (clap refuses both);
/// with neither, the URL in [`DATABASE_URL_VAR`], if set: an explicit `--store` wins
/// over the environment.
#[derive(Clone, Default, PartialEq, Eq, Args)]
pub(crate) struct StoreLocation {
    /// The store: an SQLite file, created if missing
    #[arg(long, value_name = "PATH")]
    pub(crate) store: Option<PathBuf>,
    /// The store in a PostgreSQL database instead, by its URL:
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DB
    /// (default: SPOOL_DATABASE_URL)
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "store",
        verbatim_doc_comment
    )]
    pub(crate) postgres: Option<String>,
}

/// Never shows a URL's password, even when debugging.
impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreLocation")
            .field("store", &self.store)
            .field("postgres", &self.postgres.as_deref().map(without_password))
            .finish()
    }
}

/// A store's place, as the options gave it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, by its connection URL (which may hold a password: never
    /// print it, print [`Location::name`]).
    Postgres(String),
}

impl StoreLocation {
    /// The store the options name, with neither option the one in the environment
    /// ([`DATABASE_URL_VAR`], if set and not empty); `None` if none is named.
    pub(crate) fn location(&self) -> Option<Location> {
        self.location_with(std::env::var(DATABASE_URL_VAR).ok())
    }

    /// As [`location`](StoreLocation::location), with `env` as the environment's URL.
    pub(crate) fn location_with(&self, env: Option<String>) -> Option<Location> {
        match (&self.store, &self.postgres) {
            (Some(path), _) => Some(Location::Sqlite(path.clone())),
            (None, Some(url)) => Some(Location::Postgres(url.clone())),
            (None, None) => env
                .filter(|url| !url.trim().is_empty())
                .map(Location::Postgres),
        }
    }

    /// The options of `--store PATH`.
    #[cfg(test)]
    pub(crate) fn sqlite(path: &str) -> StoreLocation {
        StoreLocation {
            store: Some(path.into()),
            postgres: None,
        }
    }

    /// The store the options (or the environment) name; a command that needs one and
    /// is given none gets [`MISSING`] as its usage error.
    pub(crate) fn required(&self) -> Result<Location, String> {
        self.location().ok_or_else(|| MISSING.to_owned())
    }
}

/// The usage error of a command that needs a store and was given none.
pub(crate) const MISSING: &str =
    "no store given: name one with --store PATH or --postgres URL (or SPOOL_DATABASE_URL)";

impl Location {
    /// What the store is called in messages: the file's path, or the database's URL
    /// without its password.
    pub(crate) fn name(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            Location::Postgres(url) => without_password(url),
        }
    }
}

/// Never shows a URL's password, even when debugging.
impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Location::Postgres(_) => f.debug_tuple("Postgres").field(&self.name()).finish(),
        }
    }
}

/// The name a database URL goes by in messages: `postgres://USER@HOST:PORT/DB` as the
/// client reads the URL (so never its password, however it is spelled), or the URL with
/// its password replaced by `***` when it does not parse.
#[cfg(feature = "postgres")]
pub(crate) fn without_password(url: &str) -> String {
    let url = url.trim();
    spool_postgres::display_name(url).unwrap_or_else(|| spool_postgres::redact_url(url))
}

/// Without the PostgreSQL client there is nothing that reads the URL as the server
/// would, so it is not quoted at all.
#[cfg(not(feature = "postgres"))]
pub(crate) fn without_password(_url: &str) -> String {
    "the PostgreSQL database given".to_owned()
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use super::*;
    use crate::cli::{Cli, Command};

    /// The location `spool ARGS...` names, with no URL in the environment.
    fn parsed(args: &[&str]) -> Result<Option<Location>, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("spool").chain(args.iter().copied()))?;
        let location = match cli.command {
            Command::Run(args) => args.location,
            Command::Serve(args) => args.location,
            Command::Demo(args) => args.location,
            other => panic!("{other:?}"),
        };
        Ok(location.location_with(None))
    }

    #[test]
    fn run_serve_and_demo_take_a_file_or_a_database() {
        for command in ["run", "serve", "demo"] {
            assert_eq!(
                parsed(&[command, "--store", "s.spool"]).expect("parsed"),
                Some(Location::Sqlite("s.spool".into()))
            );
            assert_eq!(
                parsed(&[command, "--postgres=postgres://u@h/db"]).expect("parsed"),
                Some(Location::Postgres("postgres://u@h/db".into()))
            );
            let both = parsed(&[command, "--postgres", "postgres://u@h/db", "--store", "s"])
                .expect_err("both");
            assert_eq!(both.kind(), ErrorKind::ArgumentConflict);
            assert!(
                both.to_string().starts_with(
                    "error: the argument '--postgres <URL>' cannot be used with '--store <PATH>'"
                ),
                "{both}"
            );
        }
        // Neither is a usage error only where a store is needed (`spool run` says so).
        assert_eq!(parsed(&["run"]).expect("parsed"), None);
        assert_eq!(parsed(&["demo"]).expect("parsed"), None);
        let error = parsed(&["demo", "--journal", "j", "--postgres", "postgres://h/db"])
            .expect_err("a journal and a store");
        assert!(
            error.to_string().starts_with(
                "error: the argument '--journal <FILE>' cannot be used with '--postgres <URL>'"
            ),
            "{error}"
        );
    }

    fn given(store: Option<&str>, postgres: Option<&str>) -> StoreLocation {
        StoreLocation {
            store: store.map(PathBuf::from),
            postgres: postgres.map(str::to_owned),
        }
    }

    #[test]
    fn an_explicit_option_wins_over_the_environment() {
        let env = || Some("postgres://env@h/db".to_owned());
        assert_eq!(
            given(Some("s.spool"), None).location_with(env()),
            Some(Location::Sqlite("s.spool".into()))
        );
        assert_eq!(
            given(None, Some("postgres://u@h/x")).location_with(env()),
            Some(Location::Postgres("postgres://u@h/x".into()))
        );
        assert_eq!(
            given(None, None).location_with(env()),
            Some(Location::Postgres("postgres://env@h/db".into()))
        );
        assert_eq!(given(None, None).location_with(None), None);
        assert_eq!(given(None, None).location_with(Some(" ".into())), None);
    }

    #[test]
    fn a_name_never_shows_the_password() {
        for (url, name) in [
            ("postgres://u:s3cret@h:5432/db", "postgres://u@h:5432/db"),
            ("postgresql://u@h/db", "postgres://u@h:5432/db"),
            ("postgres://h/db", "postgres://h:5432/db"),
            ("postgres://u:se/c?r#et@h:6543/db", "postgres://u@h:6543/db"),
            // A URL the client refuses (an unescaped `@` in the password) is shown
            // with every part that could be the password hidden.
            (
                "postgres://u:p@ss:w@h/db?sslmode=disable&password=s3cret",
                "postgres://u:***@h/db?sslmode=disable&password=***",
            ),
            (
                "postgres://u@h/db?password=s3cret",
                "postgres://u@h:5432/db",
            ),
            (
                "host=h user=u password = 's3 cret' dbname=db",
                "postgres://u@h:5432/db",
            ),
        ] {
            assert_eq!(Location::Postgres(url.to_owned()).name(), name, "{url}");
        }
        let debug = format!(
            "{:?}",
            Location::Postgres("postgres://u:s3cret@h/db".into())
        );
        assert_eq!(debug, "Postgres(\"postgres://u@h:5432/db\")");
        let options = StoreLocation {
            store: None,
            postgres: Some("postgres://u:s3cret@h/db".into()),
        };
        assert!(!format!("{options:?}").contains("s3cret"));
        assert_eq!(Location::Sqlite("dir/s.spool".into()).name(), "dir/s.spool");
    }
}
