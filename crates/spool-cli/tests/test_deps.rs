//! `scripts/test-deps.sh` run by two callers at once, as two tests of one binary do
//! when both find a tool missing: the second waits for the first instead of running
//! the package manager beside it (which fails on apt's lock), then finds the tool
//! installed. The package manager is a stub on a `PATH` of stubs, so the test installs
//! nothing and runs the same with or without the real tools on the machine.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A stub `apt-get`: `update` takes apt's lock (a directory) or fails as apt does, and
/// holds it until the test creates `release`; `install` puts each package it is given
/// (a stub of that name) on the PATH.
const APT_GET: &str = r#"#!/bin/sh
case "$1" in
update)
    if ! mkdir "$STUB/apt.lock" 2>/dev/null; then
        echo "E: Unable to lock directory /var/lib/apt/lists/" >&2
        exit 100
    fi
    echo update >> "$STUB/calls"
    n=0
    while [ ! -e "$STUB/release" ] && [ "$n" -lt 3000 ]; do
        sleep 0.01
        n=$((n + 1))
    done
    rmdir "$STUB/apt.lock"
    ;;
install)
    echo install >> "$STUB/calls"
    for arg in "$@"; do
        case "$arg" in
        -*|install) ;;
        *) printf '#!/bin/sh\n' > "$STUB/$arg"; chmod +x "$STUB/$arg" ;;
        esac
    done
    ;;
esac
"#;

fn write_exe(path: &Path, text: &str) {
    std::fs::write(path, text).expect("a stub");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The stub directory: `apt-get`, `sudo`, `tmux`, and links to the few real tools the
/// script and the stubs use.
fn stubs(dir: &Path) -> PathBuf {
    let stub = dir.join("bin");
    std::fs::create_dir(&stub).expect("the stub directory");
    write_exe(&stub.join("apt-get"), APT_GET);
    write_exe(&stub.join("sudo"), "#!/bin/sh\nexec \"$@\"\n");
    write_exe(&stub.join("tmux"), "#!/bin/sh\n");
    for tool in ["flock", "id", "mkdir", "rmdir", "sleep", "chmod"] {
        let real = ["/usr/bin", "/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(tool))
            .find(|path| path.is_file())
            .unwrap_or_else(|| panic!("{tool} is on this machine"));
        std::os::unix::fs::symlink(real, stub.join(tool)).expect("a link");
    }
    stub
}

fn start(stub: &Path, lock: &Path) -> Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-deps.sh");
    Command::new("/bin/bash")
        .arg(script)
        .env_clear()
        .env("PATH", stub)
        .env("STUB", stub)
        .env("SPOOL_TEST_DEPS_LOCK", lock)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs the script")
}

/// Polls `done` every 10 ms until it holds or `limit` has passed.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

#[test]
fn two_callers_at_once_install_once_and_both_succeed() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let stub = stubs(dir.path());
    let lock = dir.path().join("test-deps.lock");
    let calls = stub.join("calls");

    let first = start(&stub, &lock);
    assert!(
        wait_for(Duration::from_secs(30), || calls.exists()),
        "the first caller runs apt-get update"
    );
    // The first holds apt's lock now. The second either fails on it at once (callers
    // not serialised) or waits for the first; it is given a second to fail.
    let mut second = start(&stub, &lock);
    wait_for(Duration::from_secs(1), || {
        second.try_wait().is_ok_and(|s| s.is_some())
    });
    std::fs::write(stub.join("release"), "").expect("the release file");

    let first = first.wait_with_output().expect("the first caller ends");
    let second = second.wait_with_output().expect("the second caller ends");
    assert!(
        first.status.success(),
        "first: {:?} {}",
        first.status,
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        second.status.success(),
        "second: {:?} {}",
        second.status,
        String::from_utf8_lossy(&second.stderr)
    );
    let calls = std::fs::read_to_string(&calls).expect("the calls");
    assert_eq!(calls, "update\ninstall\n");
}
