//! The SQLite backend (`spool-store`) under the conformance suite: one temporary
//! directory per test binary, a file per store name; damage done with rusqlite on the
//! closed file.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rusqlite::Connection;
use spool_durable::{DurableError, DurableStore, History};
use spool_store::{Store, StoreOptions};

use crate::suite::{Backend, Damage, Options};

/// The SQLite backend: stores are files in one temporary directory.
#[derive(Debug)]
pub struct Sqlite;

/// The directory of this test binary's stores, removed when the process ends normally.
fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// The file of the store called `name`.
fn path(name: &str) -> PathBuf {
    dir().join(format!("{name}.spool"))
}

/// Opens the store at `path` with the suite's options.
pub fn open_path(path: &Path, options: &Options) -> Result<Box<dyn DurableStore>, DurableError> {
    let mut store_options = StoreOptions::new().crash_at(options.crash_at);
    store_options = store_options.history(options.history.unwrap_or_else(History::off));
    if let Some(clock) = &options.clock {
        store_options = store_options.clock(clock.clone());
    }
    if let Some(keep) = options.keep_checkpoints {
        store_options = store_options.keep_checkpoints(keep);
    }
    Ok(Box::new(Store::open_with(path, store_options)?))
}

/// Runs `sql` on the closed store `name`, behind its back; panics unless it changed
/// exactly `rows` rows.
fn tamper(name: &str, sql: &str, rows: usize) {
    let conn = Connection::open(path(name)).unwrap();
    let changed = conn.execute(sql, []).unwrap();
    assert_eq!(changed, rows, "{sql}");
}

/// Flips one byte (the middle one) of the blob `column` in the row of `table` whose
/// `key` is `id`, on the closed store `name`: an inline entry or task row's own bytes,
/// or the root hashes of a chunked one, or a checkpoint's roots. The row's checksum is
/// left as it was.
fn flip_byte(name: &str, table: &str, column: &str, key: &str, id: u64) {
    let conn = Connection::open(path(name)).unwrap();
    let select = format!("SELECT {column} FROM {table} WHERE {key} = ?1");
    let mut bytes: Vec<u8> = conn
        .query_row(&select, [id as i64], |row| row.get(0))
        .unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    let update = format!("UPDATE {table} SET {column} = ?1 WHERE {key} = ?2");
    assert_eq!(
        conn.execute(&update, rusqlite::params![bytes, id as i64])
            .unwrap(),
        1
    );
}

impl Backend for Sqlite {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn open(&self, name: &str, options: &Options) -> Result<Box<dyn DurableStore>, DurableError> {
        open_path(&path(name), options)
    }

    fn open_read_only(&self, name: &str) -> Result<Box<dyn DurableStore>, DurableError> {
        Ok(Box::new(Store::open_read_only(path(name))?))
    }

    fn locate(&self, name: &str) -> String {
        format!("sqlite:{}", path(name).display())
    }

    fn damage(&self, name: &str, damage: Damage) {
        match damage {
            Damage::EntryByte(seq) => flip_byte(name, "entries", "body", "seq", seq),
            Damage::TaskRowByte(task) => flip_byte(name, "tasks", "body", "task", task),
            Damage::CheckpointByte(id) => flip_byte(name, "checkpoints", "roots", "id", id),
            Damage::KeptTaskRowByte { task, since } => {
                let conn = Connection::open(path(name)).unwrap();
                let select = "SELECT body FROM task_history WHERE task = ?1 AND since = ?2";
                let key = [task as i64, since as i64];
                let mut body: Vec<u8> = conn.query_row(select, key, |row| row.get(0)).unwrap();
                let middle = body.len() / 2;
                body[middle] ^= 0x01;
                let update = "UPDATE task_history SET body = ?1 WHERE task = ?2 AND since = ?3";
                let params = rusqlite::params![body, task as i64, since as i64];
                assert_eq!(conn.execute(update, params).unwrap(), 1);
            }
            Damage::HeadByte => tamper(name, "UPDATE head SET last_seq = last_seq + 1", 1),
            Damage::RenumberEntry { from, to } => tamper(
                name,
                &format!("UPDATE entries SET seq = {to} WHERE seq = {from}"),
                1,
            ),
            Damage::SwapEntries(a, b) => {
                let conn = Connection::open(path(name)).unwrap();
                conn.execute_batch(&format!(
                    "BEGIN;
                     UPDATE entries SET seq = -1 WHERE seq = {a};
                     UPDATE entries SET seq = {a} WHERE seq = {b};
                     UPDATE entries SET seq = {b} WHERE seq = -1;
                     COMMIT;"
                ))
                .unwrap();
            }
            Damage::DeleteEntry(seq) => {
                tamper(name, &format!("DELETE FROM entries WHERE seq = {seq}"), 1);
            }
        }
    }
}

crate::suite::conformance!(Sqlite);
