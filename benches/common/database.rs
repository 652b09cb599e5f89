//! A database of one benchmark run on a throwaway PostgreSQL cluster, and the settings
//! such a cluster flushes its commits with.

use spool_pgtest::PgCluster;

/// A database of a run, dropped with it (untimed), so that a cluster holds one run's
/// rows at a time.
pub(crate) struct Database<'a> {
    server: &'a PgCluster,
    name: String,
    /// Its URL.
    pub(crate) url: String,
}

impl<'a> Database<'a> {
    /// Creates the database `name` on `server`.
    pub(crate) fn create(server: &'a PgCluster, name: String) -> Database<'a> {
        let url = server
            .create_database(&name)
            .unwrap_or_else(|e| panic!("database {name}: {e}"));
        Database { server, name, url }
    }

    /// Its name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Database<'_> {
    fn drop(&mut self) {
        let dropped = postgres::Client::connect(&self.server.url(), postgres::NoTls).and_then(
            |mut client| client.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name)),
        );
        if let Err(e) = dropped {
            eprintln!("  (database {} not dropped: {e})", self.name);
        }
    }
}

/// What a commit waits for on a PostgreSQL cluster.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Flush {
    /// `fsync`, `synchronous_commit` and `full_page_writes` on: every commit on disk.
    Fsync,
    /// The test settings: all three off, nothing flushed.
    Off,
}

impl Flush {
    /// Its name, as the environment gives it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Flush::Fsync => "fsync",
            Flush::Off => "off",
        }
    }

    /// A throwaway PostgreSQL cluster with these settings.
    pub(crate) fn start(self) -> PgCluster {
        let builder = PgCluster::builder();
        let builder = match self {
            Flush::Off => builder,
            Flush::Fsync => builder
                .setting("fsync", "on")
                .setting("synchronous_commit", "on")
                .setting("full_page_writes", "on"),
        };
        builder
            .start()
            .unwrap_or_else(|e| panic!("a PostgreSQL cluster ({}): {e}", self.name()))
    }
}

impl std::str::FromStr for Flush {
    type Err = String;

    fn from_str(s: &str) -> Result<Flush, String> {
        [Flush::Fsync, Flush::Off]
            .into_iter()
            .find(|f| f.name() == s.trim())
            .ok_or_else(|| format!("unknown flush setting {s:?} (fsync, off)"))
    }
}
