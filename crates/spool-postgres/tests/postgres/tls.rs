//! TLS to the server, as the URL's `sslmode` and `sslrootcert` say: on a cluster of this
//! module's own that serves a certificate for `localhost` and 127.0.0.1, signed by a CA
//! the tests make. What each connection of a store uses is read from the server's
//! `pg_stat_ssl`.

use std::path::PathBuf;
use std::sync::OnceLock;

use postgres::NoTls;
use spool_pgtest::{PgCluster, TestCertificates};
use spool_postgres::{PgStore, PgStoreError};

use crate::common::entry;

/// The TLS cluster and the roots a client may name.
struct TlsServer {
    /// The cluster, with `ssl = on`.
    cluster: PgCluster,
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// A CA that did not.
    other_ca: PathBuf,
}

/// The module's TLS cluster, made on first use; the roots are written in its directory,
/// which goes with it.
fn server() -> &'static TlsServer {
    static SERVER: OnceLock<TlsServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let certs = TestCertificates::make(&["localhost", "127.0.0.1"]).expect("certificates");
        let cluster = PgCluster::builder()
            .tls(&certs)
            .start()
            .expect("a cluster with TLS");
        let ca = cluster.dir().join("ca.pem");
        let other_ca = cluster.dir().join("other-ca.pem");
        std::fs::write(&ca, certs.ca_pem()).expect("the CA written");
        std::fs::write(&other_ca, certs.other_ca_pem()).expect("the other CA written");
        TlsServer {
            cluster,
            ca,
            other_ca,
        }
    })
}

/// A new database `name` on the TLS cluster: its URL, with `query` after it.
fn database(name: &str, query: &str) -> String {
    let url = server()
        .cluster
        .create_database(name)
        .unwrap_or_else(|e| panic!("database {name}: {e}"));
    format!("{url}{query}")
}

/// Whether each connection to database `name` is encrypted, in the order of their pids
/// (asked over a plain connection of the test's own, to another database).
fn encrypted(name: &str) -> Vec<bool> {
    let mut observer = postgres::Client::connect(&server().cluster.url(), NoTls).expect("connects");
    observer
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid \
             WHERE a.datname = $1 ORDER BY s.pid",
            &[&name],
        )
        .expect("pg_stat_ssl")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// The error connecting a writer to `url` gives.
fn refused(url: &str) -> String {
    PgStore::connect(url).expect_err("refused").to_string()
}

/// `sslmode=require`: the writer's and the reader's connections are both encrypted.
#[test]
fn require_encrypts_the_writer_and_the_reader() {
    let url = database("tls_require", "?sslmode=require");
    let store = PgStore::connect(&url).expect("connects over TLS");
    assert_eq!(store.start_journal(b"start").expect("starts"), 1);
    assert_eq!(
        store.recover().expect("reads").expect("a journal").start,
        b"start"
    );
    assert_eq!(encrypted("tls_require"), [true, true]);
}

/// Without `sslmode` (libpq's default, `prefer`), a server that offers TLS gets it.
#[test]
fn the_default_takes_tls_when_the_server_offers_it() {
    let url = database("tls_default", "");
    let store = PgStore::connect(&url).expect("connects");
    store.recover().expect("reads");
    assert_eq!(encrypted("tls_default"), [true, true]);
}

/// `sslmode=disable` stays plain on a server that offers TLS.
#[test]
fn disable_stays_plain() {
    let url = database("tls_disable", "?sslmode=disable");
    let store = PgStore::connect(&url).expect("connects");
    store.recover().expect("reads");
    assert_eq!(encrypted("tls_disable"), [false, false]);
}

/// A journal written over `verify-full` to `localhost` with the CA as `sslrootcert`,
/// recovered by a store connected again the same way; every connection encrypted.
#[test]
fn a_journal_is_written_and_recovered_over_verify_full() {
    let url = database(
        "tls_journal",
        &format!("?sslmode=verify-full&sslrootcert={}", server().ca.display()),
    )
    .replacen("@127.0.0.1:", "@localhost:", 1);
    let store = PgStore::connect(&url).expect("connects");
    assert_eq!(store.start_journal(b"start").expect("starts"), 1);
    assert_eq!(store.append(&entry(1)).expect("appends"), 1);
    assert_eq!(store.append(&entry(2)).expect("appends"), 2);
    drop(store);
    let store = PgStore::connect(&url).expect("connects again");
    let journal = store.recover().expect("reads").expect("a journal");
    assert_eq!(journal.start, b"start");
    assert_eq!(journal.entries, vec![entry(1), entry(2)]);
    store.verify().expect("the store checks out");
    let reader = PgStore::connect_read_only(&url).expect("a reader connects");
    assert_eq!(reader.recover().expect("reads"), Some(journal));
    assert_eq!(encrypted("tls_journal"), [true, true, true]);
}

/// `verify-full` refuses a host the certificate does not name (the connection goes to
/// 127.0.0.1 by `hostaddr`; the name checked is the URL's host); `verify-ca` takes it,
/// as it checks only the chain.
#[test]
fn verify_full_refuses_a_host_the_certificate_does_not_name() {
    let port = server().cluster.port();
    let url = format!(
        "postgres://spool@db.example.test:{port}/tls_name?hostaddr=127.0.0.1&sslrootcert={}",
        server().ca.display()
    );
    database("tls_name", "");
    assert_eq!(
        refused(&format!("{url}&sslmode=verify-full")),
        format!(
            "cannot connect to PostgreSQL at db.example.test:{port}: error performing TLS \
             handshake: the server's certificate does not name the host \"db.example.test\" \
             (it names localhost, 127.0.0.1)"
        )
    );
    let store = PgStore::connect(&format!("{url}&sslmode=verify-ca")).expect("verify-ca takes it");
    store.recover().expect("reads");
    assert_eq!(encrypted("tls_name"), [true, true]);
}

/// `verify-ca` with a root that did not sign the server's certificate is refused, and
/// says which roots it checked against; so is `verify-full` with no `sslrootcert`,
/// against the Mozilla roots.
#[test]
fn a_certificate_no_trusted_root_signed_is_refused() {
    let url = database("tls_other_ca", "");
    let port = server().cluster.port();
    let other = server().other_ca.display().to_string();
    assert_eq!(
        refused(&format!("{url}?sslmode=verify-ca&sslrootcert={other}")),
        format!(
            "cannot connect to PostgreSQL at 127.0.0.1:{port}: error performing TLS \
             handshake: the server's certificate is not signed by the roots in sslrootcert \
             {other}"
        )
    );
    assert_eq!(
        refused(&format!("{url}?sslmode=verify-full")),
        format!(
            "cannot connect to PostgreSQL at 127.0.0.1:{port}: error performing TLS \
             handshake: the server's certificate is not signed by the Mozilla roots (give \
             sslrootcert=PATH for a private CA)"
        )
    );
    assert_eq!(encrypted("tls_other_ca"), Vec::<bool>::new());
}

/// `sslmode=require` on a server without TLS (the binary's shared cluster) is refused.
#[test]
fn require_on_a_server_without_tls_is_refused() {
    let url = crate::common::database("tls_none_offered");
    let port = PgCluster::shared().port();
    assert_eq!(
        refused(&format!("{url}?sslmode=require")),
        format!(
            "cannot connect to PostgreSQL at 127.0.0.1:{port}: error performing TLS \
             handshake: server does not support TLS"
        )
    );
}

/// An `sslrootcert` that is missing is one error naming the file, before any
/// connection.
#[test]
fn a_missing_root_file_is_named() {
    let missing = server().cluster.dir().join("missing.pem");
    let url = database(
        "tls_missing_root",
        &format!("?sslmode=verify-full&sslrootcert={}", missing.display()),
    );
    let error = PgStore::connect(&url).expect_err("refused");
    assert!(
        matches!(&error, PgStoreError::RootCert { path, .. } if *path == missing.display().to_string()),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!(
            "cannot use sslrootcert {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}
