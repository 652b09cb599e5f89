//! What connecting says when it cannot work, one line each and never with the URL's
//! password: a bad URL, a server that refuses, a database that is not a store, a store
//! of another schema version, a store another writer holds; and what a read-only
//! handle refuses.

use std::net::TcpListener;

use spool_postgres::{PgStore, PgStoreError, SCHEMA_VERSION};

use crate::common::{database, entry, sql};

/// The password every URL here carries (the test cluster trusts every connection, so
/// it is never checked): no message may hold it.
const PASSWORD: &str = "pw-never-shown";

/// `url` with the user `spool` and [`PASSWORD`].
fn with_password(url: &str) -> String {
    url.replacen(
        "postgres://spool@",
        &format!("postgres://spool:{PASSWORD}@"),
        1,
    )
}

/// The message of `result`'s error, checked for the password (display and debug).
fn message(result: Result<PgStore, PgStoreError>) -> String {
    let error = result.expect_err("an error");
    let (shown, debug) = (error.to_string(), format!("{error:?}"));
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(!debug.contains(PASSWORD), "{debug}");
    let durable = spool_durable::DurableError::from(error).to_string();
    assert!(!durable.contains(PASSWORD), "{durable}");
    shown
}

/// The name a store at `url` goes by.
fn name(url: &str) -> String {
    url.to_owned()
}

#[test]
fn a_url_that_does_not_parse_is_quoted_without_its_password() {
    let url = format!("postgres://spool:{PASSWORD}@127.0.0.1:notaport/db");
    assert_eq!(
        message(PgStore::connect(&url)),
        "`postgres://spool:***@127.0.0.1:notaport/db` is not a PostgreSQL URL: invalid connection string: invalid value for option `port`"
    );
}

#[test]
fn a_server_that_refuses_is_named_by_host_and_port() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.local_addr().expect("its address").port()
    };
    let url = format!("postgres://spool:{PASSWORD}@127.0.0.1:{port}/db");
    assert_eq!(
        message(PgStore::connect(&url)),
        format!(
            "cannot connect to PostgreSQL at 127.0.0.1:{port}: error connecting to server: Connection refused (os error 111)"
        )
    );
}

#[test]
fn a_database_with_another_programs_tables_is_not_a_store() {
    let url = database("foreign_tables");
    sql(&url)
        .batch_execute("CREATE TABLE users (id int); CREATE TABLE orders (id int)")
        .expect("tables made");
    for connect in [PgStore::connect, PgStore::connect_read_only] {
        assert_eq!(
            message(connect(&with_password(&url))),
            format!(
                "{} is not a spool store: it holds another program's tables (`public.orders`) and no `spool` schema",
                name(&url)
            )
        );
    }
}

/// An extension's own objects (here pg_stat_statements' view) are the server's tooling:
/// a database with one is still empty as far as the store is concerned.
#[test]
fn an_extensions_objects_are_not_another_programs_tables() {
    let url = database("extension_objects");
    sql(&url)
        .batch_execute("CREATE EXTENSION pg_stat_statements")
        .expect("the extension is made");
    let store = PgStore::connect(&with_password(&url)).expect("a store is made beside it");
    assert_eq!(store.recover().expect("read"), None);
}

#[test]
fn a_spool_schema_that_is_not_spools_is_not_a_store() {
    let url = database("foreign_spool_schema");
    sql(&url)
        .batch_execute("CREATE SCHEMA spool; CREATE TABLE spool.reels (id int)")
        .expect("tables made");
    assert_eq!(
        message(PgStore::connect(&with_password(&url))),
        format!(
            "{} is not a spool store: it has a `spool` schema without spool's marker (another program's)",
            name(&url)
        )
    );
}

#[test]
fn an_empty_database_is_not_a_store_to_a_reader() {
    let url = database("empty_to_a_reader");
    assert_eq!(
        message(PgStore::connect_read_only(&with_password(&url))),
        format!(
            "{} is not a spool store: the database is empty (a writer makes the store when it first connects)",
            name(&url)
        )
    );
    // Nothing was made.
    let schemas: i64 = sql(&url)
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'spool'",
            &[],
        )
        .expect("counted")
        .get(0);
    assert_eq!(schemas, 0);
}

#[test]
fn a_store_of_another_schema_version_is_refused() {
    let url = database("other_schema_version");
    drop(PgStore::connect(&url).expect("made"));
    let set = |version: i64| {
        sql(&url)
            .execute(
                "UPDATE spool.meta SET value = $1 WHERE key = 'schema_version'",
                &[&version.to_string()],
            )
            .expect("set");
    };
    set(SCHEMA_VERSION + 1);
    assert_eq!(
        message(PgStore::connect(&with_password(&url))),
        format!(
            "{} has schema version {}, newer than this build reads ({SCHEMA_VERSION})",
            name(&url),
            SCHEMA_VERSION + 1
        )
    );
    set(SCHEMA_VERSION - 1);
    assert_eq!(
        message(PgStore::connect_read_only(&with_password(&url))),
        format!(
            "{} has schema version {}, older than this build reads ({SCHEMA_VERSION}): finish its run with the spool that wrote it, or start a new store",
            name(&url),
            SCHEMA_VERSION - 1
        )
    );
}

/// A store of schema version 2 (its replaced task rows kept apart, in `task_history`)
/// is refused by a writer and a reader alike, before anything is read or written.
#[test]
fn a_store_of_schema_version_2_is_refused() {
    let url = database("schema_version_2");
    drop(PgStore::connect(&url).expect("made"));
    sql(&url)
        .batch_execute(
            "UPDATE spool.meta SET value = '2' WHERE key = 'schema_version';
             ALTER TABLE spool.checkpoints DROP COLUMN base;
             CREATE TABLE spool.task_history (shard integer NOT NULL, task bigint NOT NULL,
                 since bigint NOT NULL, until bigint NOT NULL, body bytea NOT NULL,
                 row_sum bigint NOT NULL, sum bigint NOT NULL);",
        )
        .expect("made version 2");
    let expected = format!(
        "{} has schema version 2, older than this build reads (3): finish its run with the spool that wrote it, or start a new store",
        name(&url)
    );
    assert_eq!(message(PgStore::connect(&with_password(&url))), expected);
    assert_eq!(
        message(PgStore::connect_read_only(&with_password(&url))),
        expected
    );
}

#[test]
fn a_second_writer_is_refused_while_the_first_writes() {
    let url = database("second_writer_refused");
    let first = PgStore::connect(&url).expect("connects");
    first.start_journal(b"start").expect("started");
    assert_eq!(
        message(PgStore::connect(&with_password(&url))),
        format!(
            "{} is in use by another spool process (it holds the store's writer lock; one process writes a store at a time)",
            name(&url)
        )
    );
    assert_eq!(first.append(&entry(1)).expect("still writes"), 1);
    drop(first);
    let second = PgStore::connect(&url).expect("connects once the first is gone");
    assert_eq!(second.append(&entry(2)).expect("writes"), 2);
}

#[test]
fn a_reader_reads_while_the_writer_writes_and_writes_nothing() {
    let url = database("reader_beside_writer");
    let writer = PgStore::connect(&url).expect("connects");
    writer.start_journal(b"start").expect("started");
    writer.append(&entry(1)).expect("appended");
    let reader = PgStore::connect_read_only(&with_password(&url)).expect("connects");
    assert_eq!(reader.name(), name(&url));
    assert_eq!(
        reader.recover().expect("reads").expect("a journal").entries,
        [entry(1)]
    );
    writer.append(&entry(2)).expect("appended");
    assert_eq!(
        reader.recover().expect("reads").expect("a journal").entries,
        [entry(1), entry(2)],
        "the reader sees what is committed"
    );
    reader.verify().expect("checks out");
    let refused = reader.append(&entry(3)).expect_err("refused");
    assert_eq!(
        refused.to_string(),
        format!(
            "{} was connected read only: appending an entry is refused",
            name(&url)
        )
    );
    assert!(matches!(
        spool_durable::DurableError::from(refused),
        spool_durable::DurableError::Unsupported(_)
    ));
    assert!(matches!(
        reader.write_checkpoint(b"x"),
        Err(PgStoreError::ReadOnly { .. })
    ));
    assert!(matches!(
        reader.claim_maker("run"),
        Err(PgStoreError::ReadOnly { .. })
    ));
    assert_eq!(writer.append(&entry(3)).expect("the writer goes on"), 3);
}

/// A writer that connects just after another was dropped finds the lock free, every
/// time: the first lets go of it before its drop returns.
#[test]
fn a_writer_connecting_as_the_last_is_dropped_finds_the_lock_free() {
    let url = database("lock_free_after_drop");
    let mut client = sql(&url);
    for n in 1..=40 {
        let store = PgStore::connect(&url).unwrap_or_else(|e| panic!("writer {n}: {e}"));
        assert_eq!(store.append(&entry(n)).expect("appended"), n);
        drop(store);
        let held: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .expect("counted")
            .get(0);
        assert_eq!(held, 0, "the lock is held after writer {n} was dropped");
    }
}
