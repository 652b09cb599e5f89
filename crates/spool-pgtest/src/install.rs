//! Finding Debian's PostgreSQL binaries, and installing them when they are missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::PgError;

/// The project's install script: it installs the `postgresql` package and makes the
/// system user, serialised on a lock file so that test binaries running at once never
/// run the package manager twice.
fn install_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-deps.sh")
}

/// Runs `scripts/test-deps.sh postgres`.
pub(crate) fn run_install_script() -> Result<(), PgError> {
    let script = install_script();
    let output = Command::new("bash")
        .arg(&script)
        .arg("postgres")
        .output()
        .map_err(|source| PgError::Spawn {
            program: format!("bash {}", script.display()),
            source,
        })?;
    if !output.status.success() {
        return Err(PgError::Install {
            script,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(())
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`: installs the package when
/// none is found, then looks again.
pub(crate) fn bindir() -> Result<PathBuf, PgError> {
    if let Some(dir) = find_bindir() {
        return Ok(dir);
    }
    run_install_script()?;
    find_bindir().ok_or_else(|| PgError::NoBinaries {
        after_install: format!(", also after running {}", install_script().display()),
    })
}

/// `pg_config --bindir` when it names a directory with the server's binaries, else the
/// highest version under `/usr/lib/postgresql`.
fn find_bindir() -> Option<PathBuf> {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    if let Some(dir) = from_pg_config.filter(|dir| has_server(dir)) {
        return Some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let dir = entry.path().join("bin");
            has_server(&dir).then_some((version, dir))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}

/// Whether `dir` holds the three binaries a cluster needs.
fn has_server(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"]
        .iter()
        .all(|name| dir.join(name).is_file())
}
