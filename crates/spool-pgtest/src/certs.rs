//! Certificates for TLS tests, made with the `openssl` command: a certificate authority
//! of the test's own, a server certificate it signs, and a second authority that signs
//! nothing (a root a client must not trust the server by).

use std::path::Path;
use std::process::Command;

use crate::account::run;
use crate::cluster::PgClusterBuilder;
use crate::error::PgError;

/// The `openssl` command: Debian's, on the machine image and in CI.
const OPENSSL: &str = "openssl";

/// How long the certificates are valid, in days.
const DAYS: &str = "3650";

/// A CA and a server certificate it signed, in PEM, kept in memory (the files they were
/// made in are removed).
///
/// ```no_run
/// use spool_pgtest::{PgCluster, TestCertificates};
///
/// let certs = TestCertificates::make(&["localhost", "127.0.0.1"]).expect("certificates");
/// let cluster = PgCluster::builder().tls(&certs).start().expect("a TLS cluster");
/// let ca = cluster.dir().join("ca.pem");
/// std::fs::write(&ca, certs.ca_pem()).expect("written");
/// let url = format!("{}?sslmode=verify-full&sslrootcert={}", cluster.url(), ca.display());
/// # drop(url);
/// ```
#[derive(Debug, Clone)]
pub struct TestCertificates {
    /// The CA's certificate.
    ca: Vec<u8>,
    /// Another CA's certificate, which signed nothing here.
    other_ca: Vec<u8>,
    /// The server's certificate, signed by the CA.
    server_cert: Vec<u8>,
    /// The server's private key.
    server_key: Vec<u8>,
}

impl TestCertificates {
    /// Makes a CA and a server certificate for `names` (host names, or IP addresses),
    /// the first also its common name; P-256 keys, valid for ten years.
    ///
    /// # Errors
    ///
    /// [`PgError::Spawn`] when `openssl` cannot be run, [`PgError::Command`] when it
    /// fails, [`PgError::Io`] for the temporary files.
    pub fn make(names: &[&str]) -> Result<TestCertificates, PgError> {
        // A machine without the command gets it from the project's install script.
        if Command::new(OPENSSL).arg("version").output().is_err() {
            crate::install::run_install_script()?;
        }
        let temp = tempfile::Builder::new()
            .prefix("spool-certs-")
            .tempdir()
            .map_err(|source| PgError::Io {
                what: "could not make a temporary directory in",
                path: std::env::temp_dir(),
                source,
            })?;
        let dir = temp.path();
        make_ca(dir, "ca", "spool test CA")?;
        make_ca(dir, "other-ca", "spool other test CA")?;
        let common_name = names.first().copied().unwrap_or("localhost");
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
            ],
            &[&format!("/CN={common_name}")],
        )?;
        let alt_names: Vec<String> = names
            .iter()
            .map(|name| {
                if name.parse::<std::net::IpAddr>().is_ok() {
                    format!("IP:{name}")
                } else {
                    format!("DNS:{name}")
                }
            })
            .collect();
        let extensions = format!(
            "subjectAltName = {}\nbasicConstraints = critical, CA:FALSE\n\
             keyUsage = critical, digitalSignature\nextendedKeyUsage = serverAuth\n",
            alt_names.join(", ")
        );
        write(&dir.join("server.ext"), extensions.as_bytes())?;
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                DAYS,
                "-sha256",
                "-extfile",
                "server.ext",
            ],
            &[],
        )?;
        Ok(TestCertificates {
            ca: read(&dir.join("ca.pem"))?,
            other_ca: read(&dir.join("other-ca.pem"))?,
            server_cert: read(&dir.join("server.crt"))?,
            server_key: read(&dir.join("server.key"))?,
        })
    }

    /// The CA's certificate (PEM): the root a client checks the server by.
    #[must_use]
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca
    }

    /// Another CA's certificate (PEM), which did not sign the server's.
    #[must_use]
    pub fn other_ca_pem(&self) -> &[u8] {
        &self.other_ca
    }

    /// The server's certificate (PEM).
    #[must_use]
    pub fn server_cert_pem(&self) -> &[u8] {
        &self.server_cert
    }

    /// The server's private key (PEM).
    #[must_use]
    pub fn server_key_pem(&self) -> &[u8] {
        &self.server_key
    }
}

impl PgClusterBuilder {
    /// Turns TLS on with `certs`' server certificate and key (`ssl = on`; the files
    /// `server.crt` and `server.key` in the data directory). Clients may still connect
    /// without TLS.
    #[must_use]
    pub fn tls(self, certs: &TestCertificates) -> PgClusterBuilder {
        self.file("server.crt", certs.server_cert_pem())
            .file("server.key", certs.server_key_pem())
            .setting("ssl", "on")
            .setting("ssl_cert_file", "server.crt")
            .setting("ssl_key_file", "server.key")
    }
}

/// A self-signed CA `NAME.pem` with key `NAME.key` in `dir`.
fn make_ca(dir: &Path, name: &str, common_name: &str) -> Result<(), PgError> {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            DAYS,
            "-sha256",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        &[
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-subj",
            &format!("/CN={common_name}"),
        ],
    )
}

/// Runs `openssl ARGS MORE` in `dir`.
fn openssl(dir: &Path, args: &[&str], more: &[&str]) -> Result<(), PgError> {
    let mut command = Command::new(OPENSSL);
    command.current_dir(dir).args(args).args(more);
    run(command).map(drop)
}

/// The bytes of `path`.
fn read(path: &Path) -> Result<Vec<u8>, PgError> {
    std::fs::read(path).map_err(|source| PgError::Io {
        what: "could not read",
        path: path.to_owned(),
        source,
    })
}

/// Writes `contents` to `path`.
fn write(path: &Path, contents: &[u8]) -> Result<(), PgError> {
    std::fs::write(path, contents).map_err(|source| PgError::Io {
        what: "could not write",
        path: path.to_owned(),
        source,
    })
}
