//! The PostgreSQL backend (`spool-postgres`) under the conformance suite: one
//! throwaway cluster per test binary, a database per store name; damage done with SQL
//! on the closed store.

use std::collections::BTreeSet;
use std::sync::Mutex;

use postgres::{Client, NoTls};
use spool_durable::{DurableError, DurableStore, History};
use spool_postgres::{PgOptions, PgStore};

use crate::suite::{Backend, Damage, Options};

/// The PostgreSQL backend: stores are databases in the binary's cluster.
#[derive(Debug)]
pub struct Postgres;

/// The URL of the database of the store called `name`, made the first time it is
/// asked for.
fn url(name: &str) -> String {
    static MADE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let cluster = spool_pgtest::PgCluster::shared();
    let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    if made.insert(name.to_owned()) {
        cluster.create_database(name).unwrap()
    } else {
        cluster.database_url(name)
    }
}

/// Opens the store at `url` with the suite's options.
pub fn open_url(url: &str, options: &Options) -> Result<Box<dyn DurableStore>, DurableError> {
    let mut pg_options = PgOptions::new().crash_at(options.crash_at);
    pg_options = pg_options.history(options.history.unwrap_or_else(History::off));
    if let Some(clock) = &options.clock {
        pg_options = pg_options.clock(clock.clone());
    }
    if let Some(keep) = options.keep_checkpoints {
        pg_options = pg_options.keep_checkpoints(keep);
    }
    Ok(Box::new(PgStore::connect_with(url, pg_options)?))
}

/// Runs `sql` on the closed store `name`, behind its back; panics unless it changed
/// exactly `rows` rows.
fn tamper(name: &str, sql: &str, rows: u64) {
    let mut client = Client::connect(&url(name), NoTls).unwrap();
    let changed = client.execute(sql, &[]).unwrap();
    assert_eq!(changed, rows, "{sql}");
}

/// Flips one byte (the middle one) of `body` in the row of `table` whose `key` is
/// `id`, on the closed store `name`; the row's checksum is left as it was.
fn flip_byte(name: &str, table: &str, key: &str, id: u64) {
    let mut client = Client::connect(&url(name), NoTls).unwrap();
    let select = format!("SELECT body FROM spool.{table} WHERE shard = 0 AND {key} = $1");
    let mut body: Vec<u8> = client.query_one(&select, &[&(id as i64)]).unwrap().get(0);
    let middle = body.len() / 2;
    body[middle] ^= 0x01;
    let update = format!("UPDATE spool.{table} SET body = $1 WHERE shard = 0 AND {key} = $2");
    assert_eq!(client.execute(&update, &[&body, &(id as i64)]).unwrap(), 1);
}

/// Flips one byte (the middle one) of the body of task `task`'s row version kept at
/// checkpoint `since`, on the closed store `name`; its checksums are left as they were.
fn flip_version(name: &str, task: u64, since: u64) {
    let mut client = Client::connect(&url(name), NoTls).unwrap();
    let key = (task as i64, since as i64);
    let select = "SELECT body FROM spool.tasks WHERE shard = 0 AND task = $1 AND since = $2";
    let mut body: Vec<u8> = client.query_one(select, &[&key.0, &key.1]).unwrap().get(0);
    let middle = body.len() / 2;
    body[middle] ^= 0x01;
    let update = "UPDATE spool.tasks SET body = $1 WHERE shard = 0 AND task = $2 AND since = $3";
    assert_eq!(client.execute(update, &[&body, &key.0, &key.1]).unwrap(), 1);
}

impl Backend for Postgres {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn open(&self, name: &str, options: &Options) -> Result<Box<dyn DurableStore>, DurableError> {
        open_url(&url(name), options)
    }

    fn open_read_only(&self, name: &str) -> Result<Box<dyn DurableStore>, DurableError> {
        Ok(Box::new(PgStore::connect_read_only(&url(name))?))
    }

    fn locate(&self, name: &str) -> String {
        format!("postgres:{}", url(name))
    }

    fn damage(&self, name: &str, damage: Damage) {
        match damage {
            Damage::EntryByte(seq) => flip_byte(name, "entries", "seq", seq),
            Damage::TaskRowByte(task) => {
                let since = {
                    let mut client = Client::connect(&url(name), NoTls).unwrap();
                    let newest = "SELECT max(since) FROM spool.tasks WHERE shard = 0 AND task = $1";
                    let since: i64 = client.query_one(newest, &[&(task as i64)]).unwrap().get(0);
                    since
                };
                flip_version(name, task, since as u64);
            }
            Damage::CheckpointByte(id) => flip_byte(name, "checkpoints", "id", id),
            Damage::KeptTaskRowByte { task, since } => flip_version(name, task, since),
            Damage::HeadByte => tamper(
                name,
                "UPDATE spool.head SET last_seq = last_seq + 1 WHERE shard = 0",
                1,
            ),
            Damage::RenumberEntry { from, to } => tamper(
                name,
                &format!("UPDATE spool.entries SET seq = {to} WHERE shard = 0 AND seq = {from}"),
                1,
            ),
            Damage::SwapEntries(a, b) => {
                let mut client = Client::connect(&url(name), NoTls).unwrap();
                client
                    .batch_execute(&format!(
                        "BEGIN;
                         UPDATE spool.entries SET seq = -1 WHERE shard = 0 AND seq = {a};
                         UPDATE spool.entries SET seq = {a} WHERE shard = 0 AND seq = {b};
                         UPDATE spool.entries SET seq = {b} WHERE shard = 0 AND seq = -1;
                         COMMIT;"
                    ))
                    .unwrap();
            }
            Damage::DeleteEntry(seq) => tamper(
                name,
                &format!("DELETE FROM spool.entries WHERE shard = 0 AND seq = {seq}"),
                1,
            ),
        }
    }
}

crate::suite::conformance!(Postgres);
