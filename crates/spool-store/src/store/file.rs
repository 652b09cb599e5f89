//! The store's file as a file: created readable by its owner alone, a warning for one
//! others can read, and the check that the path still names the file the store has
//! open. On Unix a file deleted (or renamed over) while open goes on working for the
//! process that holds it: every later write would be acknowledged and then lost with
//! the process, so each transaction first checks that the path still leads to it.

use std::path::{Path, PathBuf};

use crate::StoreError;

/// Which file a path named when the store opened it: its device and inode (Unix).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct FileId {
    dev: u64,
    ino: u64,
}

/// The file `path` names now; `None` where there is none (deleted), or where the
/// platform does not say.
pub(super) fn identity(path: &Path) -> Option<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// What the store checks before each transaction: that `path` still names the file
/// opened as `opened`.
#[derive(Debug)]
pub(super) struct Watch {
    path: PathBuf,
    opened: Option<FileId>,
}

impl Watch {
    /// Watches `path`, which names the open store's file now.
    pub(super) fn new(path: &Path) -> Watch {
        Watch {
            path: path.to_path_buf(),
            opened: identity(path),
        }
    }

    /// The path watched.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// # Errors
    /// [`StoreError::FileGone`] if the path no longer names the file the store has
    /// open: deleted, or another file put in its place.
    pub(super) fn check(&self) -> Result<(), StoreError> {
        let Some(opened) = self.opened else {
            return Ok(());
        };
        if identity(&self.path) == Some(opened) {
            return Ok(());
        }
        Err(StoreError::FileGone {
            path: self.path.clone(),
        })
    }
}

/// Creates the store's file at `path`, empty and readable and writable by its owner
/// alone (`0600`), if there is none. SQLite gives its `-wal`, `-shm` and `-journal`
/// files beside it the same permissions as the database file.
pub(super) fn create_private(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// The permission bits of `path` (`mode & 0o777`); `None` where there is no file, or
/// where the platform has no such bits.
pub(super) fn mode(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Some(std::fs::metadata(path).ok()?.permissions().mode() & 0o777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Warns (a `tracing` warning) about each of the store's files at `path` (the
/// database, its `-wal` and `-shm`) that others than its owner may
/// read or write (`mode & 0o077` not zero): the store holds every task's input and
/// result.
pub(super) fn warn_if_shared(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let file = PathBuf::from(name);
        if let Some(mode) = mode(&file).filter(|mode| mode & 0o077 != 0) {
            tracing::warn!(
                path = %file.display(),
                mode = format_args!("{mode:04o}"),
                "the store file {} can be read or written by other users than its owner; \
                 it holds every task's input and result: `chmod 600` it",
                file.display()
            );
        }
    }
}
