//! Opening a store: the options, the schema, and the checks that a file is a spool
//! store of this schema version, whole, and held by this connection alone.

use spool_durable::{CrashAt, History, WallClock};
use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use super::file;
use super::rows::{Head, read_head};
use crate::StoreError;
use crate::sum;

/// The schema version this build writes and reads (`PRAGMA user_version`).
///
/// Version 2 added a checksum to every entry and checkpoint row and the head row;
/// version 3 added checkpoints in parts (the `tasks` table, a checkpoint's `parts`
/// flag); version 4 keeps history (a checkpoint's wall time and sizes, the checkpoint
/// that wrote each task row, the `task_history` table). An older store is refused with
/// [`StoreError::OlderSchema`].
pub const SCHEMA_VERSION: i64 = 4;

/// What marks an SQLite file as a spool store (`PRAGMA application_id`, "SPOL").
pub const APPLICATION_ID: i64 = 0x5350_4f4c;

const SCHEMA: &str = "
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE,
    kind INTEGER NOT NULL,
    refs INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE checkpoints (
    id INTEGER PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    len INTEGER NOT NULL,
    roots BLOB NOT NULL,
    sum INTEGER NOT NULL,
    parts INTEGER NOT NULL,
    at INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    prior INTEGER NOT NULL
);
CREATE TABLE tasks (
    task INTEGER PRIMARY KEY,
    len INTEGER NOT NULL,
    chunked INTEGER NOT NULL,
    body BLOB NOT NULL,
    sum INTEGER NOT NULL,
    since INTEGER NOT NULL
);
CREATE TABLE task_history (
    until INTEGER NOT NULL,
    task INTEGER NOT NULL,
    since INTEGER NOT NULL,
    len INTEGER NOT NULL,
    chunked INTEGER NOT NULL,
    body BLOB NOT NULL,
    row_sum INTEGER NOT NULL,
    sum INTEGER NOT NULL,
    PRIMARY KEY (until, task)
) WITHOUT ROWID;
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,
    len INTEGER NOT NULL,
    chunked INTEGER NOT NULL,
    body BLOB NOT NULL,
    sum INTEGER NOT NULL
);
CREATE TABLE head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    last_seq INTEGER NOT NULL,
    checkpoint INTEGER NOT NULL,
    sum INTEGER NOT NULL
);
";

/// The tables of a store.
const TABLES: [&str; 6] = [
    "chunks",
    "checkpoints",
    "entries",
    "head",
    "tasks",
    "task_history",
];

/// How much a commit survives.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// A commit survives the process dying at any moment (a panic, an abort, a
    /// SIGKILL, the OOM killer): SQLite's WAL with `synchronous = NORMAL`. The commit
    /// is in the operating system's hands when the call returns, not yet on the disk;
    /// a power loss or kernel crash may lose the last commits (never the file's
    /// consistency). No `fsync` per entry, so a record costs microseconds.
    #[default]
    Process,
    /// A commit survives power loss too: `synchronous = FULL`, an `fsync` of the WAL
    /// on every commit (milliseconds on most disks).
    PowerLoss,
}

/// How a store is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOptions {
    pub(super) keep_checkpoints: usize,
    pub(super) durability: Durability,
    pub(super) queue_groups: usize,
    pub(super) crash_at: Option<CrashAt>,
    pub(super) history: History,
    pub(super) clock: WallClock,
}

/// How many groups the writer's queue holds by default: enough that the turns a loop
/// runs while the writer waits on an `fsync` all go in the next transaction.
pub const DEFAULT_QUEUE_GROUPS: usize = 256;

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            keep_checkpoints: 2,
            durability: Durability::Process,
            queue_groups: DEFAULT_QUEUE_GROUPS,
            crash_at: None,
            history: History::default(),
            clock: WallClock::system(),
        }
    }
}

impl StoreOptions {
    /// The defaults: keep the last 2 checkpoints at least and 7 days of history (at most
    /// 1 GiB, [`History::default`]), [`Durability::Process`].
    pub fn new() -> StoreOptions {
        StoreOptions::default()
    }

    /// How many checkpoints to keep at least (at least 1), with the journal entries
    /// after the oldest of them, whatever [`history`](StoreOptions::history) says: older
    /// ones it does not keep are dropped, and the chunks only they used, in the
    /// transaction that writes a new one. A checkpoint in parts can be read later only
    /// while history is kept: without history, one drops every checkpoint before it.
    #[must_use]
    pub fn keep_checkpoints(mut self, count: usize) -> StoreOptions {
        self.keep_checkpoints = count.max(1);
        self
    }

    /// How much a commit survives.
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> StoreOptions {
        self.durability = durability;
        self
    }

    /// How many groups (loop turns) may wait in the writer's queue (at least 1,
    /// default [`DEFAULT_QUEUE_GROUPS`]): when the disk is slower than the loop, a
    /// full queue makes the loop wait in `commit` (back-pressure), so what is not yet
    /// durable stays bounded.
    #[must_use]
    pub fn queue_groups(mut self, groups: usize) -> StoreOptions {
        self.queue_groups = groups.max(1);
        self
    }

    /// How much history to keep (default [`History::default`]: 7 days, at most 1
    /// GiB): the segments — a checkpoint and the entries after it — a new checkpoint
    /// leaves in place, oldest dropped first, the latest always kept.
    /// [`History::off`] keeps the latest segment alone.
    #[must_use]
    pub fn history(mut self, history: History) -> StoreOptions {
        self.history = history;
        self
    }

    /// The wall clock checkpoints are stamped with and history's age is weighed by
    /// (default [`WallClock::system`]); a test gives a [`WallClock::manual`] one.
    #[must_use]
    pub fn clock(mut self, clock: WallClock) -> StoreOptions {
        self.clock = clock;
        self
    }

    /// **For crash tests only**: abort the process at `at`, inside a transaction (see
    /// [`CrashAt`]).
    #[must_use]
    pub fn crash_at(mut self, at: Option<CrashAt>) -> StoreOptions {
        self.crash_at = at;
        self
    }
}

/// Takes the lock file of the store at `path` (`PATH.lock`, created if missing),
/// exclusively: two processes writing one store would each go on from its journal and
/// write their own, diverging. Held as long as the returned file is open.
pub(super) fn lock(path: &Path) -> Result<std::fs::File, StoreError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let lock_path = std::path::PathBuf::from(name);
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options.open(&lock_path).map_err(|e| {
        StoreError::Unsupported(format!("cannot open {}: {e}", lock_path.display()))
    })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::InUse {
            path: path.to_path_buf(),
            lock: lock_path,
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(StoreError::Unsupported(format!(
            "cannot lock {}: {e}",
            lock_path.display()
        ))),
    }
}

/// Opens (or creates) the file at `path` as a store, with `options`: the connection,
/// holding the file's lock, and the head row. What
/// [`Store::open_with`](crate::Store::open_with) does before it wraps them.
///
/// A new store's file is created `0600` (its owner alone reads and writes it); an
/// existing one that others may read or write is opened with a warning.
pub(super) fn connect(
    path: &Path,
    options: &StoreOptions,
) -> Result<(Connection, Head), StoreError> {
    let mut conn = open_exclusive(path)?;
    let fresh = check_header(&conn, path)?;
    if fresh {
        // Before any table: freed pages can then be given back to the file system.
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")?;
    }
    set_pragmas(&conn, options.durability)?;
    add_functions(&conn)?;
    // Every statement the store runs stays prepared (there are about twenty).
    conn.set_prepared_statement_cache_capacity(64);
    take_lock(&mut conn, fresh)?;
    check_tables(&conn)?;
    let head = read_head(&conn)?;
    Ok((conn, head))
}

/// The SQL function a checkpoint keeps an old task row with:
/// `spool_kept_sum(task, since, until, row_sum)`, the kept row's checksum.
fn add_functions(conn: &Connection) -> Result<(), StoreError> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        "spool_kept_sum",
        4,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let task: i64 = ctx.get(0)?;
            let since: i64 = ctx.get(1)?;
            let until: i64 = ctx.get(2)?;
            let row_sum: i64 = ctx.get(3)?;
            Ok(sum::task_history(
                task as u64,
                since as u64,
                until as u64,
                row_sum,
            ))
        },
    )?;
    Ok(())
}

/// Opens the file at `path` (created `0600` if missing) as an SQLite database held by
/// this connection alone.
fn open_exclusive(path: &Path) -> Result<Connection, StoreError> {
    // A file that cannot be created here is refused by SQLite's open just below, with
    // its own words: nothing is lost by not reporting it twice.
    let _ = file::create_private(path);
    file::warn_if_shared(path);
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_millis(200))?;
    // One writer holds the store (its lock file, taken before this open); readers
    // ([`connect_read_only`]) may read the file beside it, through the WAL index.
    Ok(conn)
}

/// Opens the store at `path` to read only, beside the writer that may hold it: the
/// file is never created or written, and must be a store of this schema version.
pub(super) fn connect_read_only(path: &Path) -> Result<(Connection, Head), StoreError> {
    if !path.exists() {
        return Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            reason: "there is no such file".to_owned(),
        });
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    // A writer's commit holds the file for a moment; a read waits for it.
    conn.busy_timeout(Duration::from_secs(5))?;
    if check_header(&conn, path)? {
        return Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            reason: "the file is empty (a writer makes the store when it first opens it)"
                .to_owned(),
        });
    }
    conn.set_prepared_statement_cache_capacity(64);
    check_tables(&conn)?;
    let head = read_head(&conn)?;
    Ok((conn, head))
}

/// Reads the file's application id, schema version and number of schema objects, and
/// checks that it is a store of this schema version; `true` for a new (empty) file.
fn check_header(conn: &Connection, path: &Path) -> Result<bool, StoreError> {
    let not_a_store = |reason: String| StoreError::NotAStore {
        path: path.to_path_buf(),
        reason,
    };
    let header = conn.query_row(
        "SELECT (SELECT application_id FROM pragma_application_id),
                    (SELECT user_version FROM pragma_user_version),
                    (SELECT COUNT(*) FROM sqlite_schema)",
        [],
        |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get(2)?)),
    );
    let (application_id, version, objects): (i64, i64, i64) = match header {
        Ok(header) => header,
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::NotADatabase) => {
            return Err(not_a_store("not an SQLite database".to_owned()));
        }
        Err(e) => return Err(e.into()),
    };
    let fresh = objects == 0 && application_id == 0 && version == 0;
    if fresh {
        Ok(true)
    } else if application_id != APPLICATION_ID {
        Err(not_a_store(format!(
            "an SQLite database of another program (application_id {application_id:#x})"
        )))
    } else if version > SCHEMA_VERSION {
        Err(StoreError::NewerSchema {
            found: version,
            supported: SCHEMA_VERSION,
        })
    } else if (1..SCHEMA_VERSION).contains(&version) {
        Err(StoreError::OlderSchema {
            found: version,
            supported: SCHEMA_VERSION,
        })
    } else if version < SCHEMA_VERSION {
        Err(not_a_store(format!(
            "schema version {version}, which no spool wrote"
        )))
    } else {
        Ok(false)
    }
}

/// Turns on write-ahead logging (refused if SQLite cannot), then sets how commits
/// reach the disk (`durability`) and the journal's, cache's and checkpoints' sizes.
fn set_pragmas(conn: &Connection, durability: Durability) -> Result<(), StoreError> {
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Unsupported(format!(
            "SQLite refused write-ahead logging here (journal mode `{mode}`)"
        )));
    }
    let synchronous = match durability {
        Durability::Process => "NORMAL",
        Durability::PowerLoss => "FULL",
    };
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {synchronous}; PRAGMA journal_size_limit = 67108864;
             PRAGMA cell_size_check = ON; PRAGMA cache_size = -32768;
             PRAGMA wal_autocheckpoint = 4096;"
    ))?;
    Ok(())
}

/// Takes the file's lock now (and, for a `fresh` file, creates the schema and the head
/// row and marks the file as a store of this version), so a second opener is refused
/// here rather than at its first write.
fn take_lock(conn: &mut Connection, fresh: bool) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
    if fresh {
        tx.execute_batch(SCHEMA)?;
        tx.execute(
            "INSERT INTO head (id, last_seq, checkpoint, sum) VALUES (1, 0, 0, ?1)",
            [sum::head(0, 0)],
        )?;
        tx.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
        ))?;
    }
    tx.commit()?;
    Ok(())
}

/// Checks that every table of a store is there.
fn check_tables(conn: &Connection) -> Result<(), StoreError> {
    for table in TABLES {
        let found: i64 = conn.query_row(
            "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [table],
            |row| row.get(0),
        )?;
        if found != 1 {
            return Err(StoreError::Corrupt(format!(
                "the table `{table}` is missing"
            )));
        }
    }
    Ok(())
}
