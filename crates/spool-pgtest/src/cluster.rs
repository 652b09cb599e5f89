//! A throwaway cluster: made, started, restarted and removed.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::account::{Account, run};
use crate::error::PgError;
use crate::install::bindir;
use crate::reaper::Reaper;

/// The superuser `initdb` makes; every URL connects as it (trust authentication, on
/// 127.0.0.1 only).
const SUPERUSER: &str = "spool";

/// How many free ports are tried when another process takes the chosen one first.
const PORT_ATTEMPTS: u32 = 8;

/// How long `pg_ctl` waits for the server to start or stop, in seconds.
const PG_CTL_WAIT_SECONDS: &str = "60";

/// How long the server may take to accept a connection once `pg_ctl` says it is up.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// Server settings for tests: no flushes to disk (a throwaway cluster does not outlive a
/// machine crash) and room for many clients. [`PgClusterBuilder::setting`] overrides any.
const TEST_SETTINGS: [(&str, &str); 4] = [
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "200"),
];

/// The settings of a cluster to start: the test defaults, then the caller's.
///
/// ```no_run
/// let cluster = spool_pgtest::PgCluster::builder()
///     .setting("synchronous_commit", "on")
///     .start()
///     .expect("a cluster starts");
/// # drop(cluster);
/// ```
#[derive(Debug, Clone)]
pub struct PgClusterBuilder {
    /// `(name, value)` in order; a later one wins.
    settings: Vec<(String, String)>,
    /// Files placed in the data directory before the server starts: `(name, bytes)`.
    files: Vec<(String, Vec<u8>)>,
}

impl PgClusterBuilder {
    /// Sets a server setting (`postgresql.conf` syntax, the value unquoted), overriding
    /// the test default of the same name. `listen_addresses` and
    /// `unix_socket_directories` are the cluster's own and cannot be changed.
    #[must_use]
    pub fn setting(mut self, name: &str, value: &str) -> PgClusterBuilder {
        self.settings.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Places a file named `name` in the data directory before the server starts,
    /// owned by the user that runs the server and readable by it alone (mode 0600, as
    /// PostgreSQL wants of `ssl_key_file`). A setting names it by its bare name: the
    /// server reads relative paths from its data directory.
    #[must_use]
    pub fn file(mut self, name: &str, contents: &[u8]) -> PgClusterBuilder {
        self.files.push((name.to_owned(), contents.to_vec()));
        self
    }

    /// Makes and starts the cluster.
    ///
    /// # Errors
    ///
    /// [`PgError`] when the binaries cannot be found or installed, `initdb` fails, a
    /// file cannot be placed (its name is not a plain file name, for one), or the server
    /// does not start (the error carries the end of its log).
    pub fn start(self) -> Result<PgCluster, PgError> {
        PgCluster::make(&self.settings, &self.files, free_port)
    }
}

/// A PostgreSQL cluster of the test's own: its data in a new temporary directory, its
/// server on a free port of 127.0.0.1 and a socket directory of its own.
///
/// Dropping it stops the server and removes the directory; so does the end of the test
/// process when it is never dropped (see [`PgCluster::shared`]).
#[derive(Debug)]
pub struct PgCluster {
    /// The temporary directory holding everything below.
    dir: PathBuf,
    /// The data directory (`initdb`'s).
    data: PathBuf,
    /// The server's log.
    log: PathBuf,
    /// Where `initdb`, `pg_ctl` and `postgres` are.
    bindir: PathBuf,
    /// Who runs them.
    account: Account,
    /// The TCP port, the same for the cluster's life.
    port: u16,
    /// Stops the server and removes `dir` when dropped or when the process ends.
    reaper: Mutex<Option<Reaper>>,
}

impl PgCluster {
    /// Makes and starts a cluster with the test settings.
    ///
    /// # Errors
    ///
    /// As [`PgClusterBuilder::start`].
    pub fn start() -> Result<PgCluster, PgError> {
        PgCluster::builder().start()
    }

    /// A builder starting from the test settings (`fsync`, `synchronous_commit` and
    /// `full_page_writes` off, `max_connections = 200`).
    #[must_use]
    pub fn builder() -> PgClusterBuilder {
        PgClusterBuilder {
            settings: TEST_SETTINGS
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            files: Vec::new(),
        }
    }

    /// The cluster of this test binary, made with the test settings on first use and
    /// shared by its tests; each test takes a database of its own with
    /// [`PgCluster::create_database`]. It is never dropped: the reaper removes it when
    /// the process ends.
    ///
    /// # Panics
    ///
    /// When the cluster cannot be started; the message is the [`PgError`].
    pub fn shared() -> &'static PgCluster {
        static SHARED: OnceLock<PgCluster> = OnceLock::new();
        SHARED.get_or_init(|| {
            PgCluster::start()
                .unwrap_or_else(|error| panic!("the shared PostgreSQL cluster: {error}"))
        })
    }

    /// The URL of the cluster's `postgres` database,
    /// `postgres://spool@127.0.0.1:PORT/postgres`.
    #[must_use]
    pub fn url(&self) -> String {
        self.database_url("postgres")
    }

    /// The URL of database `name` in this cluster (which may not exist).
    #[must_use]
    pub fn database_url(&self, name: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{name}", self.port)
    }

    /// The server's TCP port on 127.0.0.1.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory holding the data directory, the socket directory and the
    /// log; removed with the cluster.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The data directory.
    #[must_use]
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The server's log file.
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The process id of the running server (the postmaster), from `postmaster.pid`.
    ///
    /// # Errors
    ///
    /// [`PgError::Io`] when the file cannot be read (the server is not running) or its
    /// first line is not a pid.
    pub fn postmaster_pid(&self) -> Result<u32, PgError> {
        let path = self.data.join("postmaster.pid");
        let text = std::fs::read_to_string(&path).map_err(|source| PgError::Io {
            what: "could not read the server's pid from",
            path: path.clone(),
            source,
        })?;
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| PgError::Io {
                what: "no pid on the first line of",
                path,
                source: std::io::Error::from(std::io::ErrorKind::InvalidData),
            })
    }

    /// Creates database `name` and returns its URL: tests sharing a cluster each take a
    /// database of their own.
    ///
    /// # Errors
    ///
    /// [`PgError::DatabaseName`] for a name that is not a plain identifier,
    /// [`PgError::Connect`] or [`PgError::Query`] from the server (a database of that
    /// name exists already, for one).
    pub fn create_database(&self, name: &str) -> Result<String, PgError> {
        let plain = !name.is_empty()
            && name.len() <= 63
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            return Err(PgError::DatabaseName {
                name: name.to_owned(),
            });
        }
        let mut client = self.connect()?;
        let sql = format!("CREATE DATABASE {name}");
        client
            .batch_execute(&sql)
            .map_err(|source| PgError::Query { sql, source })?;
        Ok(self.database_url(name))
    }

    /// Restarts the server (`pg_ctl restart -m fast`): the same port and URL, the data
    /// kept. Returns once it accepts connections again.
    ///
    /// # Errors
    ///
    /// [`PgError::Command`] from `pg_ctl`, [`PgError::Start`] when it does not come back.
    pub fn restart(&self) -> Result<(), PgError> {
        let mut command = self.pg_ctl("restart");
        command.args(["-m", "fast", "-l"]).arg(&self.log);
        run(command)?;
        self.wait_ready()
    }

    /// Stops the server (`pg_ctl stop -m fast`), keeping its data; see
    /// [`PgCluster::start_again`].
    ///
    /// # Errors
    ///
    /// [`PgError::Command`] from `pg_ctl` (the server was not running, for one).
    pub fn stop(&self) -> Result<(), PgError> {
        let mut command = self.pg_ctl("stop");
        command.args(["-m", "fast"]);
        run(command)?;
        Ok(())
    }

    /// Starts the server again after [`PgCluster::stop`], on the same port.
    ///
    /// # Errors
    ///
    /// [`PgError::Start`] when it does not start (another process took the port, for
    /// one), with the end of its log.
    pub fn start_again(&self) -> Result<(), PgError> {
        match self.launch()? {
            Launch::Started => self.wait_ready(),
            Launch::PortTaken(tail) | Launch::Failed(tail) => Err(PgError::Start {
                reason: format!("pg_ctl start on port {} failed", self.port),
                log: self.log.clone(),
                tail,
            }),
        }
    }

    /// `initdb`, the settings, and a start on a port from `next_port` (the next one when
    /// another process took it first).
    fn make(
        settings: &[(String, String)],
        files: &[(String, Vec<u8>)],
        mut next_port: impl FnMut() -> Result<u16, PgError>,
    ) -> Result<PgCluster, PgError> {
        let bindir = bindir()?;
        let account = Account::for_this_process()?;
        let temp = tempfile::Builder::new()
            .prefix("spool-pg-")
            .tempdir()
            .map_err(|source| PgError::Io {
                what: "could not make a temporary directory in",
                path: std::env::temp_dir(),
                source,
            })?;
        let data = temp.path().join("data");
        let reaper = Reaper::spawn(temp.path(), &data, &bindir, &account)?;
        // From here on the reaper owns the directory's removal.
        let dir = temp.keep();
        let mut cluster = PgCluster {
            log: dir.join("postgres.log"),
            data,
            dir,
            bindir,
            account,
            port: 0,
            reaper: Mutex::new(Some(reaper)),
        };
        cluster.init(settings)?;
        for (name, contents) in files {
            cluster.place(name, contents)?;
        }
        for _ in 0..PORT_ATTEMPTS {
            cluster.port = next_port()?;
            match cluster.launch()? {
                Launch::Started => {
                    cluster.wait_ready()?;
                    return Ok(cluster);
                }
                Launch::PortTaken(_) => continue,
                Launch::Failed(tail) => {
                    return Err(PgError::Start {
                        reason: "pg_ctl start failed".to_owned(),
                        log: cluster.log.clone(),
                        tail,
                    });
                }
            }
        }
        Err(PgError::NoFreePort {
            attempts: PORT_ATTEMPTS,
            log: cluster.log.clone(),
            tail: log_tail(&cluster.log, 0),
        })
    }

    /// Runs `initdb` and writes the settings into `postgresql.conf`.
    fn init(&self, settings: &[(String, String)]) -> Result<(), PgError> {
        let socket_dir = self.dir.join("socket");
        std::fs::create_dir(&socket_dir).map_err(|source| PgError::Io {
            what: "could not make the socket directory",
            path: socket_dir.clone(),
            source,
        })?;
        self.account.take(&self.dir)?;
        self.account.take(&socket_dir)?;
        let mut initdb = self.account.command(&self.bindir.join("initdb"));
        initdb.arg("-D").arg(&self.data).args([
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        ]);
        run(initdb)?;
        // The cluster's own addresses come last, so no setting of the caller's moves it
        // onto another interface or socket directory.
        let mut conf = String::from("\n# spool-pgtest\n");
        let own = [
            ("listen_addresses".to_owned(), "127.0.0.1".to_owned()),
            (
                "unix_socket_directories".to_owned(),
                socket_dir.to_string_lossy().into_owned(),
            ),
        ];
        for (name, value) in settings.iter().chain(own.iter()) {
            conf.push_str(&format!("{name} = '{}'\n", value.replace('\'', "''")));
        }
        let path = self.data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&path).map_err(|source| PgError::Io {
            what: "could not read",
            path: path.clone(),
            source,
        })?;
        text.push_str(&conf);
        std::fs::write(&path, text).map_err(|source| PgError::Io {
            what: "could not write",
            path,
            source,
        })
    }

    /// Writes `contents` to `name` in the data directory, mode 0600, owned by the
    /// account.
    fn place(&self, name: &str, contents: &[u8]) -> Result<(), PgError> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.data.join(name);
        let plain = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
        let io = |what, source| PgError::Io {
            what,
            path: path.clone(),
            source,
        };
        if !plain {
            return Err(io(
                "a file to place in the data directory needs a plain name, not",
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            ));
        }
        std::fs::write(&path, contents).map_err(|e| io("could not write", e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io("could not chmod", e))?;
        self.account.take(&path)
    }

    /// `pg_ctl start` on `self.port`, waiting until the server is up or has failed.
    fn launch(&self) -> Result<Launch, PgError> {
        let log_start = std::fs::metadata(&self.log)
            .map(|meta| meta.len())
            .unwrap_or(0);
        let mut command = self.pg_ctl("start");
        command
            .arg("-l")
            .arg(&self.log)
            .arg("-o")
            .arg(format!("-p {}", self.port));
        match run(command) {
            Ok(_) => Ok(Launch::Started),
            Err(PgError::Command { .. }) => {
                let tail = log_tail(&self.log, log_start);
                let taken = tail.contains("could not bind") || tail.contains("already in use");
                Ok(if taken {
                    Launch::PortTaken(tail)
                } else {
                    Launch::Failed(tail)
                })
            }
            Err(other) => Err(other),
        }
    }

    /// Polls until the server accepts a connection, up to [`READY_DEADLINE`].
    fn wait_ready(&self) -> Result<(), PgError> {
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            match self.connect() {
                Ok(_) => return Ok(()),
                Err(error) if Instant::now() >= deadline => {
                    return Err(PgError::Start {
                        reason: format!("no connection within {READY_DEADLINE:?}: {error}"),
                        log: self.log.clone(),
                        tail: log_tail(&self.log, 0),
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// A client on the `postgres` database.
    fn connect(&self) -> Result<postgres::Client, PgError> {
        let url = self.url();
        let mut config: postgres::Config = url.parse().map_err(|source| PgError::Connect {
            url: url.clone(),
            source,
        })?;
        config.connect_timeout(Duration::from_secs(5));
        config
            .connect(postgres::NoTls)
            .map_err(|source| PgError::Connect { url, source })
    }

    /// `pg_ctl ACTION -D DATA -w -t 60`, run as the account.
    fn pg_ctl(&self, action: &str) -> std::process::Command {
        let mut command = self.account.command(&self.bindir.join("pg_ctl"));
        command
            .arg(action)
            .arg("-D")
            .arg(&self.data)
            .args(["-w", "-t", PG_CTL_WAIT_SECONDS]);
        command
    }
}

impl Drop for PgCluster {
    /// Stops the server and removes the directory (the reaper does both, and is waited
    /// for).
    fn drop(&mut self) {
        let reaper = self
            .reaper
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(reaper);
    }
}

/// How a `pg_ctl start` ended.
#[derive(Debug)]
enum Launch {
    /// The server is up.
    Started,
    /// The port was taken before the server bound it; the log's new lines.
    PortTaken(String),
    /// Another failure; the log's new lines.
    Failed(String),
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<u16, PgError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|source| PgError::Io {
        what: "could not bind a free port on",
        path: "127.0.0.1".into(),
        source,
    })?;
    let port = listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|source| PgError::Io {
            what: "could not read the bound port of",
            path: "127.0.0.1".into(),
            source,
        })?;
    Ok(port)
}

/// The last 20 lines of the log written after byte `from`.
fn log_tail(log: &Path, from: u64) -> String {
    let Ok(bytes) = std::fs::read(log) else {
        return "(no log written)".to_owned();
    };
    let start = usize::try_from(from).unwrap_or(0).min(bytes.len());
    let text = String::from_utf8_lossy(&bytes[start..]);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::{PgCluster, free_port};

    /// A port another process holds makes the server fail to bind; the next port is
    /// taken and the cluster starts there.
    #[test]
    fn a_taken_port_is_replaced_by_the_next() {
        let held = TcpListener::bind("127.0.0.1:0").expect("a listener");
        let taken = held.local_addr().expect("its address").port();
        let mut offered = Vec::new();
        let cluster = PgCluster::make(&[], &[], || {
            let port = if offered.is_empty() {
                taken
            } else {
                free_port()?
            };
            offered.push(port);
            Ok(port)
        })
        .expect("starts on the second port");
        assert_eq!(offered.len(), 2, "ports offered: {offered:?}");
        assert_eq!(offered[0], taken);
        assert_eq!(cluster.port(), offered[1]);
        let log = std::fs::read_to_string(cluster.log_path()).expect("the log");
        assert!(log.contains("could not bind"), "{log}");
    }

    /// When every port offered is taken, the error says how many were tried.
    #[test]
    fn ports_taken_every_time_end_in_an_error() {
        let held = TcpListener::bind("127.0.0.1:0").expect("a listener");
        let taken = held.local_addr().expect("its address").port();
        let error = PgCluster::make(&[], &[], || Ok(taken)).expect_err("no port to bind");
        assert!(
            matches!(error, crate::error::PgError::NoFreePort { attempts: 8, .. }),
            "{error}"
        );
    }
}
