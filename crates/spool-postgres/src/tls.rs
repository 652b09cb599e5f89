//! TLS to the server, as libpq's `sslmode` and `sslrootcert` say: the two options are
//! taken out of the URL (the client parses `sslmode` only up to `require`, and not
//! `sslrootcert`), and a rustls connector is built that checks what the mode asks for.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::PgStoreError;

/// libpq's `sslmode`: whether TLS is used, and what of the server's certificate is
/// checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, else plain (the default).
    Prefer,
    /// TLS or no connection; the certificate is checked only when `sslrootcert` is
    /// given (then as `VerifyCa`).
    Require,
    /// TLS; the certificate must chain to a trusted root.
    VerifyCa,
    /// TLS; the certificate must chain to a trusted root and name the host.
    VerifyFull,
}

impl SslMode {
    /// The mode named `value`, as libpq spells it.
    fn parse(value: &str) -> Result<SslMode, String> {
        match value {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            other => Err(format!(
                "sslmode `{other}` is not one of disable, prefer, require, verify-ca, verify-full"
            )),
        }
    }

    /// The mode the client is given: it knows only whether TLS is off, tried, or
    /// required; the checks are the connector's.
    pub(crate) fn client_mode(self) -> postgres::config::SslMode {
        match self {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                postgres::config::SslMode::Require
            }
        }
    }
}

/// Which roots a certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// `sslrootcert=PATH`: the certificates in a PEM file.
    File(PathBuf),
    /// `sslrootcert=system`, or none given with `verify-ca` / `verify-full`: the Mozilla
    /// roots (`webpki-roots`).
    Mozilla,
}

impl Roots {
    /// How the roots are named in an error.
    fn describe(&self) -> String {
        match self {
            Roots::File(path) => format!("the roots in sslrootcert {}", path.display()),
            Roots::Mozilla => {
                "the Mozilla roots (give sslrootcert=PATH for a private CA)".to_owned()
            }
        }
    }
}

/// The TLS options of a URL, and the URL without them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsOptions {
    /// The URL without `sslmode` and `sslrootcert`, for the client's parser.
    pub(crate) rest: String,
    /// `sslmode`, `prefer` when not given.
    pub(crate) mode: SslMode,
    /// `sslrootcert`, when given.
    root: Option<Roots>,
}

impl TlsOptions {
    /// Takes `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL or a
    /// `key=value` string). A string that does not split into options is left whole,
    /// for the client's parser to say what is wrong with it.
    pub(crate) fn take(url: &str) -> Result<TlsOptions, String> {
        let (rest, taken) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            take_from_url(url)?
        } else {
            take_from_pairs(url)
        };
        let mut mode = SslMode::Prefer;
        let mut root = None;
        for (key, value) in taken {
            if key == "sslmode" {
                mode = SslMode::parse(&value)?;
            } else if value == "system" {
                root = Some(Roots::Mozilla);
            } else {
                root = Some(Roots::File(PathBuf::from(value)));
            }
        }
        // Checking a certificate needs roots; with none named, the Mozilla roots.
        if root.is_none() && matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) {
            root = Some(Roots::Mozilla);
        }
        Ok(TlsOptions { rest, mode, root })
    }

    /// The connector for these options, or `None` for `sslmode=disable`. A root file is
    /// read here, so that a bad one is said when connecting first.
    pub(crate) fn connector(&self) -> Result<Option<MakeRustlsConnect>, PgStoreError> {
        if self.mode == SslMode::Disable {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let verifier: Arc<dyn ServerCertVerifier> = match &self.root {
            // libpq without a root certificate: encrypted, the certificate unchecked.
            None => Arc::new(Unchecked { algorithms }),
            Some(roots) => {
                let store = Arc::new(root_store(roots)?);
                let webpki = WebPkiServerVerifier::builder_with_provider(store, provider.clone())
                    .build()
                    .map_err(|e| PgStoreError::Unsupported(format!("TLS roots: {e}")))?;
                if self.mode == SslMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(AnyName { webpki })
                }
            }
        };
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PgStoreError::Unsupported(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        // PostgreSQL's ALPN name, as libpq sends it: a server that negotiates TLS
        // directly (`sslnegotiation=direct`) requires it; others ignore it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(Some(MakeRustlsConnect::new(config)))
    }

    /// What a failed handshake means, in words, when a cause in `error`'s chain is a
    /// certificate rustls refused.
    pub(crate) fn explain(&self, error: &postgres::Error) -> Option<String> {
        let refused = certificate_error(error)?;
        let roots = self
            .root
            .as_ref()
            .map_or_else(|| "no roots".to_owned(), Roots::describe);
        Some(match refused {
            CertificateError::UnknownIssuer => {
                format!("the server's certificate is not signed by {roots}")
            }
            CertificateError::NotValidForName => {
                "the server's certificate does not name the host".to_owned()
            }
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => format!(
                "the server's certificate does not name the host {:?} (it names {})",
                expected.to_str(),
                presented
                    .iter()
                    .map(|name| plain_name(name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            other => format!("the server's certificate is refused: {other}"),
        })
    }
}

/// A name rustls shows as `DnsName("host")` or `IpAddress(1.2.3.4)`, as `host` or
/// `1.2.3.4`; any other form as it is.
fn plain_name(shown: &str) -> &str {
    shown
        .strip_prefix("DnsName(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
        .or_else(|| {
            shown
                .strip_prefix("IpAddress(")
                .and_then(|rest| rest.strip_suffix(')'))
        })
        .unwrap_or(shown)
}

/// The certificate error rustls gave, if one is in `error`'s chain (the I/O error the
/// TLS stream failed with wraps it).
fn certificate_error(error: &postgres::Error) -> Option<&CertificateError> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(cause) = source {
        let inner = cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map_or(cause, |inner| inner as &(dyn std::error::Error + 'static));
        if let Some(rustls::Error::InvalidCertificate(refused)) =
            inner.downcast_ref::<rustls::Error>()
        {
            return Some(refused);
        }
        source = cause.source();
    }
    None
}

/// The roots `roots` names, read.
fn root_store(roots: &Roots) -> Result<RootCertStore, PgStoreError> {
    let path = match roots {
        Roots::Mozilla => {
            return Ok(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            });
        }
        Roots::File(path) => path,
    };
    let bad = |reason: String| PgStoreError::RootCert {
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(bad(
            "no PEM certificate in it (-----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    let mut store = RootCertStore::empty();
    for certificate in certificates {
        store
            .add(certificate)
            .map_err(|e| bad(format!("a certificate in it cannot be used: {e}")))?;
    }
    Ok(store)
}

/// `key=value` pairs `sslmode` and `sslrootcert` of a URL's query, and the URL without
/// them.
fn take_from_url(url: &str) -> Result<(String, Vec<(String, String)>), String> {
    // As the client reads a URL: the credentials run to the first `@` (a password may
    // hold a `?`), the query starts at the first `?` after them.
    let scheme = url.find("://").map_or(0, |i| i + "://".len());
    let credentials = url[scheme..].find('@').map_or(scheme, |i| scheme + i + 1);
    let Some(start) = url[credentials..].find('?').map(|i| credentials + i) else {
        return Ok((url.to_owned(), Vec::new()));
    };
    let (base, query) = (&url[..start], &url[start + 1..]);
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((key @ ("sslmode" | "sslrootcert"), value)) => {
                taken.push((key.to_owned(), percent_decode(value)?));
            }
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, taken))
}

/// `value` with its `%XX` escapes decoded.
fn percent_decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = value
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| format!("`{value}` has a `%` not followed by two hex digits"))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{value}` does not decode to UTF-8"))
}

/// `sslmode` and `sslrootcert` of a `key=value` string (values quoted with `'` and
/// escaped with `\`, as libpq reads them), and the string without them. A string that
/// does not split into pairs is returned whole, nothing taken.
fn take_from_pairs(text: &str) -> (String, Vec<(String, String)>) {
    let Some(pairs) = split_pairs(text) else {
        return (text.to_owned(), Vec::new());
    };
    let mut rest = String::new();
    let mut taken = Vec::new();
    for (key, value, span) in pairs {
        if key == "sslmode" || key == "sslrootcert" {
            taken.push((key, value));
        } else {
            if !rest.is_empty() {
                rest.push(' ');
            }
            rest.push_str(&text[span]);
        }
    }
    (rest, taken)
}

/// The pairs of a `key=value` string: key, value unquoted, and where the pair is.
fn split_pairs(text: &str) -> Option<Vec<(String, String, std::ops::Range<usize>)>> {
    let mut pairs = Vec::new();
    let mut chars = text.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            return Some(pairs);
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        chars.next_if(|(_, c)| *c == '=')?;
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => value.push(chars.next()?.1),
                Some((i, '\'')) if quoted => break i + 1,
                Some((i, c)) if !quoted && c.is_whitespace() => break i,
                Some((_, c)) => value.push(c),
                None if quoted => return None,
                None => break text.len(),
            }
        };
        pairs.push((key, value, start..end));
    }
}

/// A verifier that takes any certificate (`require` or `prefer` without roots, as libpq
/// does): the connection is encrypted, the server not authenticated. The handshake's
/// signatures are still checked, with the certificate's key.
#[derive(Debug)]
struct Unchecked {
    /// The signature algorithms of the crypto provider.
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `verify-ca`: the certificate must chain to a trusted root, but may name any host.
/// webpki checks the chain before the name, so a name error means the chain passed.
#[derive(Debug)]
struct AnyName {
    /// The full check, whose name error is let through.
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(url: &str) -> (String, SslMode, Option<Roots>) {
        let options = TlsOptions::take(url).expect("takes");
        (options.rest, options.mode, options.root)
    }

    /// The TLS options leave a URL's query, the other options stay in order; values are
    /// percent-decoded; `verify-*` without a root file checks against the Mozilla roots.
    #[test]
    fn the_options_leave_a_url() {
        assert_eq!(
            taken(
                "postgres://u@h:5/db?application_name=a&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20x.pem&connect_timeout=3"
            ),
            (
                "postgres://u@h:5/db?application_name=a&connect_timeout=3".to_owned(),
                SslMode::VerifyFull,
                Some(Roots::File(PathBuf::from("/etc/ca x.pem")))
            )
        );
        assert_eq!(
            taken("postgresql://u@h/db?sslmode=verify-ca"),
            (
                "postgresql://u@h/db".to_owned(),
                SslMode::VerifyCa,
                Some(Roots::Mozilla)
            )
        );
        assert_eq!(
            taken("postgres://u@h/db?sslmode=require&sslrootcert=system"),
            (
                "postgres://u@h/db".to_owned(),
                SslMode::Require,
                Some(Roots::Mozilla)
            )
        );
        assert_eq!(
            taken("postgres://u:p?w&sslmode=x@h/db?sslmode=require"),
            (
                "postgres://u:p?w&sslmode=x@h/db".to_owned(),
                SslMode::Require,
                None
            )
        );
        assert_eq!(
            taken("postgres://u@h/db"),
            ("postgres://u@h/db".to_owned(), SslMode::Prefer, None)
        );
        assert_eq!(
            taken("postgres://u@h/db?sslmode=disable&user=x"),
            (
                "postgres://u@h/db?user=x".to_owned(),
                SslMode::Disable,
                None
            )
        );
    }

    /// The same in the `key=value` form, quotes and escapes read as libpq reads them.
    #[test]
    fn the_options_leave_a_key_value_string() {
        assert_eq!(
            taken("host=h sslmode = verify-full dbname='my db' sslrootcert='/x/it\\'s.pem' user=u"),
            (
                "host=h dbname='my db' user=u".to_owned(),
                SslMode::VerifyFull,
                Some(Roots::File(PathBuf::from("/x/it's.pem")))
            )
        );
        // Not pairs: left whole for the client to refuse.
        assert_eq!(
            taken("host=h sslmode"),
            ("host=h sslmode".to_owned(), SslMode::Prefer, None)
        );
    }

    /// A mode libpq does not know, or one the client cannot do, is refused by name.
    #[test]
    fn an_unknown_mode_is_refused() {
        assert_eq!(
            TlsOptions::take("postgres://h/db?sslmode=allow"),
            Err(
                "sslmode `allow` is not one of disable, prefer, require, verify-ca, \
                 verify-full"
                    .to_owned()
            )
        );
        assert_eq!(
            TlsOptions::take("postgres://h/db?sslrootcert=%zz"),
            Err("`%zz` has a `%` not followed by two hex digits".to_owned())
        );
    }

    /// A root file that is missing, or holds no certificate, is one error naming it.
    #[test]
    fn a_bad_root_file_is_named() {
        let dir = std::env::temp_dir().join(format!("spool-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let missing = dir.join("missing.pem");
        let options = TlsOptions::take(&format!(
            "postgres://h/db?sslmode=verify-full&sslrootcert={}",
            missing.display()
        ))
        .expect("takes");
        let error = options.connector().err().expect("refused");
        assert_eq!(
            error.to_string(),
            format!(
                "cannot use sslrootcert {}: No such file or directory (os error 2)",
                missing.display()
            )
        );
        let text = dir.join("text.pem");
        std::fs::write(&text, "not a certificate\n").expect("written");
        let options = TlsOptions::take(&format!(
            "postgres://h/db?sslmode=verify-ca&sslrootcert={}",
            text.display()
        ))
        .expect("takes");
        let error = options.connector().err().expect("refused");
        assert_eq!(
            error.to_string(),
            format!(
                "cannot use sslrootcert {}: no PEM certificate in it \
                 (-----BEGIN CERTIFICATE-----)",
                text.display()
            )
        );
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
