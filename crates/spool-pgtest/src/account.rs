//! Who runs `initdb`, `pg_ctl` and `postgres`: the test process's own user, or, when
//! that is root (which PostgreSQL refuses), the system user `spool-pg`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::error::PgError;
use crate::install::run_install_script;

/// The system user a root process runs the server as (`SPOOL_PG_USER` overrides it;
/// `scripts/test-deps.sh` reads the same variable).
fn system_user() -> String {
    std::env::var("SPOOL_PG_USER").unwrap_or_else(|_| "spool-pg".to_owned())
}

/// The account the server's programs run as.
#[derive(Debug, Clone)]
pub(crate) enum Account {
    /// The test process's own user (not root).
    Own,
    /// A system user, reached from root with `runuser`.
    System {
        /// Its name.
        name: String,
        /// Its uid, for `chown`.
        uid: u32,
        /// Its primary gid, for `chown`.
        gid: u32,
    },
}

impl Account {
    /// The account for this process: itself, or, as root, the system user (made by the
    /// install script under its lock when missing).
    pub(crate) fn for_this_process() -> Result<Account, PgError> {
        let me = std::fs::metadata("/proc/self").map_err(|source| PgError::Io {
            what: "could not read the process's owner from",
            path: "/proc/self".into(),
            source,
        })?;
        if me.uid() != 0 {
            return Ok(Account::Own);
        }
        let name = system_user();
        if let Some((uid, gid)) = ids(&name)? {
            return Ok(Account::System { name, uid, gid });
        }
        run_install_script()?;
        match ids(&name)? {
            Some((uid, gid)) => Ok(Account::System { name, uid, gid }),
            None => Err(PgError::User {
                user: name,
                reason: "scripts/test-deps.sh postgres ran but did not create it".to_owned(),
            }),
        }
    }

    /// Gives `path` to the account, so that its programs can write there.
    pub(crate) fn take(&self, path: &Path) -> Result<(), PgError> {
        if let Account::System { uid, gid, .. } = self {
            std::os::unix::fs::chown(path, Some(*uid), Some(*gid)).map_err(|source| {
                PgError::Io {
                    what: "could not chown",
                    path: path.to_owned(),
                    source,
                }
            })?;
        }
        Ok(())
    }

    /// A command that runs `program` as the account.
    pub(crate) fn command(&self, program: &Path) -> Command {
        match self {
            Account::Own => Command::new(program),
            Account::System { name, .. } => {
                let mut command = Command::new("runuser");
                command.arg("-u").arg(name).arg("--").arg(program);
                command
            }
        }
    }

    /// The argument list that runs `program` as the account, for a shell line.
    pub(crate) fn shell_prefix(&self) -> String {
        match self {
            Account::Own => String::new(),
            Account::System { name, .. } => format!("runuser -u {} -- ", shell_quote(name)),
        }
    }
}

/// Runs `command` to the end, its standard input closed; an error names the program and
/// carries what it wrote.
pub(crate) fn run(mut command: Command) -> Result<Output, PgError> {
    let program = format!("{command:?}");
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|source| PgError::Spawn {
            program: program.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(PgError::Command {
            program,
            status: output.status,
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
            .trim()
            .to_owned(),
        });
    }
    Ok(output)
}

/// The uid and gid of `name`, or `None` when there is no such user.
fn ids(name: &str) -> Result<Option<(u32, u32)>, PgError> {
    let read = |flag: &str| -> Result<Option<u32>, PgError> {
        let output = Command::new("id")
            .arg(flag)
            .arg(name)
            .stderr(Stdio::null())
            .output()
            .map_err(|source| PgError::Spawn {
                program: "id".to_owned(),
                source,
            })?;
        if !output.status.success() {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&output.stdout);
        text.trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| PgError::User {
                user: name.to_owned(),
                reason: format!("`id {flag}` printed {:?}", text.trim()),
            })
    };
    match (read("-u")?, read("-g")?) {
        (Some(uid), Some(gid)) => Ok(Some((uid, gid))),
        _ => Ok(None),
    }
}

/// `text` in single quotes for `sh`.
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
