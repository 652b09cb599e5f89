//! The Python package's tests: builds the wheel with maturin into a virtual environment
//! of the test's own (`scripts/test-deps.sh python` makes it from PyPI's pinned
//! packages), installs it as a user would, and runs the pytest suite on it
//! (`crates/spool-py/tests/python`, and `examples/python` when it is there).
//!
//! It fails, never skips, when any of that cannot be done, saying which step and what
//! the tool printed. Runs of this test at once (two `cargo test` in one tree) take turns
//! on a lock file, so that one never installs into the venv another is testing with.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use nix::fcntl::{Flock, FlockArg};

/// The workspace's root, two levels above this crate.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// Runs `command`, and panics with `step`, the command and everything it printed if it
/// cannot be started or exits with an error; returns its output otherwise.
fn run(step: &str, command: &mut Command) -> Output {
    let started = Instant::now();
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{step}: could not run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{step} failed ({}): {command:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    eprintln!("{step}: {:.1} s", started.elapsed().as_secs_f64());
    output
}

#[test]
fn pytest_suite_passes_on_the_built_wheel() {
    let root = workspace();
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("spool-py");
    fs::create_dir_all(&base).expect("CARGO_TARGET_TMPDIR is writable");
    let lock_path = base.join("lock");
    let lock_file = File::create(&lock_path)
        .unwrap_or_else(|e| panic!("cannot create the lock file {}: {e}", lock_path.display()));
    // Held until the end of the test: the venv and the wheel directory are ours alone.
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("cannot lock {}: {e}", lock_path.display()));

    let venv = base.join("venv");
    run(
        "making the venv (scripts/test-deps.sh python)",
        Command::new("bash")
            .arg(root.join("scripts/test-deps.sh"))
            .arg("python")
            .arg(&venv),
    );
    let python = venv.join("bin/python");

    // A wheel directory emptied first, so the one wheel in it is this build's.
    let wheels = base.join("wheels");
    if wheels.exists() {
        fs::remove_dir_all(&wheels)
            .unwrap_or_else(|e| panic!("cannot empty {}: {e}", wheels.display()));
    }
    let mut maturin = Command::new(venv.join("bin/maturin"));
    // Without the variables cargo set for this test (CARGO_PKG_NAME, CARGO_MANIFEST_DIR,
    // ...): build scripts that watch them (ring's does) would otherwise run again, and
    // their crates and dependents be compiled again, here and in the next plain build.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_")
            || [
                "CARGO",
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_MANIFEST_LINKS",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&name.as_ref())
        {
            maturin.env_remove(name.as_ref());
        }
    }
    let built = run(
        "building the wheel (maturin build)",
        maturin
            // The dev profile, in the workspace's target directory: the dependencies
            // built there by `cargo test` are reused where their features agree.
            // Stripped (the final library only; the dependencies are untouched): with
            // its debug info the library is some 350 MB, slow to zip and to install.
            .args(["build", "--strip", "--interpreter"])
            .arg(&python)
            .arg("--out")
            .arg(&wheels)
            .current_dir(root.join("crates/spool-py")),
    );
    // What cargo compiled for the wheel (shown with --nocapture, or on a failure).
    eprintln!("{}", String::from_utf8_lossy(&built.stderr));
    let wheel = fs::read_dir(&wheels)
        .unwrap_or_else(|e| panic!("maturin made no {}: {e}", wheels.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .unwrap_or_else(|| panic!("maturin made no wheel in {}", wheels.display()));
    run(
        "installing the wheel (pip install)",
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "--force-reinstall",
            ])
            .arg(&wheel),
    );

    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg("crates/spool-py/tests/python")
        .current_dir(&root)
        // The installed wheel is what is tested, never the source tree's package; and
        // no __pycache__ is left in the source tree.
        .env_remove("PYTHONPATH")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    if root.join("examples/python").is_dir() {
        pytest.arg("examples/python");
    }
    let output = run("running the pytest suite", &mut pytest);
    eprintln!("{}", String::from_utf8_lossy(&output.stdout));
}
