//! The schema: the tables of a store in the database's `spool` schema, made in an
//! empty database by the first writer, and the checks that a database holds a store
//! of this version. Also the writer's lock and its epoch.

use postgres::{Client, GenericClient};

use crate::address::Address;
use crate::error::PgStoreError;
use crate::rows::{Head, read_head};
use crate::sum;

/// The schema version this build writes and reads (`spool.meta`'s `schema_version`).
///
/// Version 3 keeps task rows as versions that are never rewritten (`spool.tasks`, one
/// row per task and checkpoint that wrote it, a tombstone when a checkpoint dropped
/// the task) and each checkpoint's base (the checkpoint its task rows start from). An
/// older store is refused with [`PgStoreError::OlderSchema`].
pub const SCHEMA_VERSION: i64 = 3;

/// What marks a `spool` schema as spool's: `spool.meta`'s `application` row.
pub(crate) const MARKER: &str = "spool";

/// The first key of the writer's advisory lock ("SPOL"); the second is the shard.
const LOCK_KEY: i32 = 0x5350_4f4c;

/// The first key of the lock held while a schema is checked and made, so two writers
/// connecting at once to an empty database do not both make it.
pub(crate) const SCHEMA_LOCK: i64 = 0x5350_4f4c_0000;

/// The tables of a store, in the `spool` schema. Every key starts with the shard.
const SCHEMA: &str = "
CREATE SCHEMA IF NOT EXISTS spool;
CREATE TABLE spool.meta (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE spool.head (
    shard integer PRIMARY KEY,
    last_seq bigint NOT NULL,
    checkpoint bigint NOT NULL,
    epoch bigint NOT NULL,
    sum bigint NOT NULL
);
CREATE TABLE spool.entries (
    shard integer NOT NULL,
    seq bigint NOT NULL,
    body bytea NOT NULL,
    sum bigint NOT NULL,
    PRIMARY KEY (shard, seq)
);
CREATE TABLE spool.checkpoints (
    shard integer NOT NULL,
    id bigint NOT NULL,
    last_seq bigint NOT NULL,
    parts boolean NOT NULL,
    len bigint NOT NULL,
    body bytea NOT NULL,
    sum bigint NOT NULL,
    at bigint NOT NULL,
    bytes bigint NOT NULL,
    prior bigint NOT NULL,
    base bigint NOT NULL,
    PRIMARY KEY (shard, id)
);
-- Versions of task rows, inserted and never updated: `since` is the checkpoint that
-- keeps the version, `origin` the one that wrote its body (a version copied by a
-- rebase keeps its origin); no body is a tombstone (the task was dropped at `since`).
CREATE TABLE spool.tasks (
    shard integer NOT NULL,
    task bigint NOT NULL,
    since bigint NOT NULL,
    origin bigint NOT NULL,
    body bytea NULL,
    row_sum bigint NOT NULL,
    sum bigint NOT NULL,
    PRIMARY KEY (shard, task, since)
);
-- Versions are inserted as checkpoints go (`since` grows) and dropped by a range of
-- `since`: a block-range index, which costs an insert next to nothing.
CREATE INDEX tasks_since ON spool.tasks USING brin (shard, since);
";

/// The tables of a cluster of nodes sharing the database (see [`crate::cluster`]),
/// made with the store's and again by `Cluster::init` (for a store made before
/// them): the cluster's settings, a lease per shard, the nodes, each shard's inbox of
/// submissions another node took, and where each idempotency key is bound.
pub(crate) const CLUSTER_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS spool.cluster (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE IF NOT EXISTS spool.shards (
    shard integer PRIMARY KEY,
    owner text NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NULL,
    taken_at timestamptz NULL,
    renewed_at timestamptz NULL
);
CREATE TABLE IF NOT EXISTS spool.nodes (
    node text PRIMARY KEY,
    addr text NOT NULL,
    started_at timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    draining boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS spool.inbox (
    id bigserial PRIMARY KEY,
    shard integer NOT NULL,
    key text NOT NULL,
    body bytea NOT NULL,
    sum bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS inbox_shard_id ON spool.inbox (shard, id);
CREATE TABLE IF NOT EXISTS spool.keys (
    key text PRIMARY KEY,
    shard integer NOT NULL,
    item bigint NULL,
    task bigint NULL,
    outcome text NULL,
    refused text NULL
);
CREATE TABLE IF NOT EXISTS spool.budgets (
    kind text PRIMARY KEY,
    in_flight integer NULL,
    per_minute integer NULL,
    tokens_per_minute bigint NULL
);
CREATE TABLE IF NOT EXISTS spool.budget_slices (
    kind text NOT NULL,
    node text NOT NULL,
    in_flight integer NOT NULL,
    want_in_flight integer NOT NULL,
    minute bigint NOT NULL,
    per_minute integer NOT NULL,
    want_per_minute integer NOT NULL,
    tokens bigint NOT NULL DEFAULT 0,
    want_tokens bigint NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (kind, node)
);
";

/// The tables a store has.
pub(crate) const TABLES: [&str; 5] = ["meta", "head", "entries", "checkpoints", "tasks"];

/// Sets what a session of the store needs: how commits reach the disk.
pub(crate) fn set_session(
    client: &mut Client,
    synchronous_commit: bool,
) -> Result<(), PgStoreError> {
    let value = if synchronous_commit { "on" } else { "off" };
    // A role's or database's statement_timeout would cancel a large checkpoint's
    // transaction, and a canceled group is a failed one: the store sets none.
    client.batch_execute(&format!(
        "SET synchronous_commit = {value}; SET statement_timeout = 0; \
         SET idle_in_transaction_session_timeout = 0"
    ))?;
    Ok(())
}

/// Checks that the database holds a store of this version; makes it if the database
/// is empty and `create` (a writer). Returns whether it was made.
pub(crate) fn prepare(
    client: &mut Client,
    address: &Address,
    shard: i32,
    create: bool,
) -> Result<bool, PgStoreError> {
    let mut tx = client.transaction()?;
    if create {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
    }
    let exists: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'spool')",
            &[],
        )?
        .get(0);
    if exists {
        check(&mut tx, address)?;
        if create {
            add_head(&mut tx, shard)?;
        }
        tx.commit()?;
        return Ok(false);
    }
    let not_a_store = |reason: String| PgStoreError::NotAStore {
        what: address.name.clone(),
        reason,
    };
    if let Some(table) = foreign_table(&mut tx)? {
        return Err(not_a_store(format!(
            "it holds another program's tables (`{table}`) and no `spool` schema"
        )));
    }
    if !create {
        return Err(not_a_store(
            "the database is empty (a writer makes the store when it first connects)".to_owned(),
        ));
    }
    tx.batch_execute(SCHEMA)?;
    tx.batch_execute(CLUSTER_SCHEMA)?;
    tx.execute(
        "INSERT INTO spool.meta (key, value) VALUES ('application', $1), ('schema_version', $2)",
        &[&MARKER, &SCHEMA_VERSION.to_string()],
    )?;
    add_head(&mut tx, shard)?;
    tx.commit()?;
    Ok(true)
}

/// Makes `shard`'s head row (an empty journal, epoch 0) if it has none and the shard
/// holds nothing: the first writer of a shard makes it, as `Cluster::init` does for
/// every shard. A shard with entries or checkpoints and no head row is damage, left
/// for the read of the head to report.
pub(crate) fn add_head(client: &mut impl GenericClient, shard: i32) -> Result<(), PgStoreError> {
    client.execute(
        "INSERT INTO spool.head (shard, last_seq, checkpoint, epoch, sum)
         SELECT $1, 0, 0, 0, $2
         WHERE NOT EXISTS (SELECT 1 FROM spool.entries WHERE shard = $1)
           AND NOT EXISTS (SELECT 1 FROM spool.checkpoints WHERE shard = $1)
         ON CONFLICT (shard) DO NOTHING",
        &[&shard, &sum::head(shard, 0, 0, 0)],
    )?;
    Ok(())
}

/// The first table, view or sequence outside PostgreSQL's own schemas, if any.
fn foreign_table(tx: &mut impl GenericClient) -> Result<Option<String>, PgStoreError> {
    let row = tx.query_opt(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
           AND n.nspname NOT IN ('pg_catalog', 'information_schema')
           AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'
           -- An extension's own objects (pg_stat_statements' view, PostGIS's tables)
           -- are the server's tooling, not another program's data.
           AND NOT EXISTS (
               SELECT 1 FROM pg_depend d
               WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
           )
         ORDER BY 1 LIMIT 1",
        &[],
    )?;
    Ok(row.map(|row| row.get(0)))
}

/// Checks that the `spool` schema is spool's, of this version, with every table.
fn check(tx: &mut impl GenericClient, address: &Address) -> Result<(), PgStoreError> {
    let not_a_store = |reason: &str| PgStoreError::NotAStore {
        what: address.name.clone(),
        reason: reason.to_owned(),
    };
    let has_meta: bool = tx
        .query_one("SELECT to_regclass('spool.meta') IS NOT NULL", &[])?
        .get(0);
    if !has_meta {
        return Err(not_a_store(
            "it has a `spool` schema without spool's marker (another program's)",
        ));
    }
    let foreign = || not_a_store("its `spool.meta` is not spool's");
    let application = meta_value(tx, "application").map_err(|_| foreign())?;
    if application.as_deref() != Some(MARKER) {
        return Err(not_a_store(
            "it has a `spool` schema without spool's marker (another program's)",
        ));
    }
    let version = meta_value(tx, "schema_version").map_err(|_| foreign())?;
    let found: i64 = match version.as_deref().map(str::parse) {
        Some(Ok(found)) => found,
        _ => {
            return Err(PgStoreError::Corrupt(format!(
                "the schema version in spool.meta is {}",
                version.map_or_else(|| "missing".to_owned(), |v| format!("`{v}`, not a number"))
            )));
        }
    };
    if found > SCHEMA_VERSION {
        return Err(PgStoreError::NewerSchema {
            what: address.name.clone(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < SCHEMA_VERSION {
        return Err(PgStoreError::OlderSchema {
            what: address.name.clone(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for table in TABLES {
        let there: bool = tx
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&format!("spool.{table}")],
            )?
            .get(0);
        if !there {
            return Err(PgStoreError::Corrupt(format!(
                "the table `spool.{table}` is missing"
            )));
        }
    }
    Ok(())
}

/// The value of `key` in `spool.meta`, if there is one.
pub(crate) fn meta_value(
    tx: &mut impl GenericClient,
    key: &str,
) -> Result<Option<String>, postgres::Error> {
    let row = tx.query_opt("SELECT value FROM spool.meta WHERE key = $1", &[&key])?;
    row.map(|row| row.try_get::<_, String>(0)).transpose()
}

/// Takes the writer's lock of `shard`, held by this session until it ends: `false` if
/// another session holds it.
pub(crate) fn try_lock(client: &mut Client, shard: i32) -> Result<bool, PgStoreError> {
    Ok(client
        .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&LOCK_KEY, &shard])?
        .get(0))
}

/// Lets go of the writer's lock of `shard` now, rather than when the server has
/// ended the session after the connection closes: a writer connecting just after this
/// one closed finds it free.
pub(crate) fn unlock(client: &mut Client, shard: i32) -> Result<(), PgStoreError> {
    client.execute("SELECT pg_advisory_unlock($1, $2)", &[&LOCK_KEY, &shard])?;
    Ok(())
}

/// The server process holding the writer's lock of `shard`, if any.
pub(crate) fn lock_holder(client: &mut Client, shard: i32) -> Result<Option<i32>, PgStoreError> {
    // A two-key advisory lock shows its keys as classid and objid, objsubid 2.
    let row = client.query_opt(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
           AND pid IS NOT NULL
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 2",
        &[&i64::from(LOCK_KEY), &i64::from(shard)],
    )?;
    // A lock a prepared transaction holds has no process: it is not a session's.
    Ok(row.and_then(|row| row.try_get(0).ok()))
}

/// This session's server process and when it started: what names the session when a
/// later one finds it still holding the lock.
pub(crate) fn session_id(client: &mut Client) -> Result<(i32, String), PgStoreError> {
    let row = client.query_one(
        "SELECT pid, backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()",
        &[],
    )?;
    Ok((row.get(0), row.get(1)))
}

/// Whether the session `id` is still there.
pub(crate) fn session_alive(client: &mut Client, id: &(i32, String)) -> Result<bool, PgStoreError> {
    Ok(client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND backend_start::text = $2)",
            &[&id.0, &id.1],
        )?
        .get(0))
}

/// Ends the session `id` (this writer's own, left behind by a cut connection, still
/// holding the lock until the server notices).
pub(crate) fn end_session(client: &mut Client, id: &(i32, String)) -> Result<(), PgStoreError> {
    client.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND backend_start::text = $2",
        &[&id.0, &id.1],
    )?;
    Ok(())
}

/// Bumps the epoch in `shard`'s head row: from now on, a writer with an older one
/// writes nothing. Returns the head with the new epoch.
pub(crate) fn take_epoch(client: &mut Client, shard: i32) -> Result<Head, PgStoreError> {
    let mut tx = client.transaction()?;
    let head = read_head(&mut tx, shard, true)?;
    let epoch = head.epoch + 1;
    let (last_seq, checkpoint) = (head.last_seq as i64, head.checkpoint as i64);
    tx.execute(
        "UPDATE spool.head SET epoch = $2, sum = $3 WHERE shard = $1",
        &[
            &shard,
            &epoch,
            &sum::head(shard, last_seq, checkpoint, epoch),
        ],
    )?;
    tx.commit()?;
    Ok(Head { epoch, ..head })
}
