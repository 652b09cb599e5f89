#!/usr/bin/env python3
"""Runs what `cargo test --workspace` runs, with several test binaries at a time.

`cargo test` runs a workspace's test binaries one after another. Many of spool's spend
most of their time waiting rather than computing (a minute of the clock under a rate
limit, processes killed and restarted, PostgreSQL clusters starting), so on a 2-core
machine running a few at once finishes in much less time, and every test still runs,
in the process it would have had under `cargo test`.

Steps: `cargo test --workspace --no-run` builds every test binary (arguments to this
script are passed to it); each binary is then run as cargo would run it (working
directory: its package's root; `CARGO`, `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME` set;
the build scripts' library directories on `LD_LIBRARY_PATH`), `--jobs` at a time
(default 3, or `SPOOL_TEST_JOBS`; `SPOOL_CI_PATH`, when set, is the PATH they get), the slowest known first; then the doctests
(`cargo test --workspace --doc`) run beside them. Each binary's output is printed
whole when it ends, and a table of wall and CPU seconds at the end. The exit status
is 1 when any binary or the doctests failed; every binary runs regardless.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

# Binaries that take longest (name as cargo prints it in "Running tests/NAME.rs"):
# started first so that none of them is left running alone at the end.
SLOW_FIRST = [
    "spool-py:python",
    "spool:store",
    "spool-cli:spool",
    "spool-cli:serve_cluster_limits",
    "spool-cli:crash",
    "spool-cli:damage",
    "spool:facade",
    "spool-cli:schedule_crash",
    "spool:snapshot",
    "spool:durable",
    "spool-cli:web",
    "spool-cli:serve_cluster_kill",
    "spool-test:sim",
    "spool-cli:serve_crash",
    "spool-postgres:postgres",
    "spool-cli:top_tmux",
    "spool-cli:docs",
    "spool:core",
]


def build(cargo, extra):
    """Builds the test binaries; returns them (key, executable, package root, name)
    and the build scripts' library directories."""
    command = [cargo, "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics", *extra]
    proc = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    binaries, libdirs = [], []
    for line in proc.stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") == "build-script-executed":
            for path in message.get("linked_paths", []):
                path = path.split("=", 1)[-1]
                if path not in libdirs:
                    libdirs.append(path)
        elif (
            message.get("reason") == "compiler-artifact"
            and message.get("executable")
            and message["profile"]["test"]
        ):
            root = os.path.dirname(message["manifest_path"])
            package = read_package_name(message["manifest_path"]) or os.path.basename(root)
            key = f"{package}:{message['target']['name']}"
            if any(b[0] == key for b in binaries):
                key += f" ({message['target']['kind'][0]})"
            binaries.append((key, message["executable"], root, package))
    return binaries, libdirs


def read_package_name(manifest):
    """The `name` of the manifest's `[package]` table (None when it has none)."""
    in_package = False
    with open(manifest, encoding="utf-8") as file:
        for line in file:
            line = line.strip()
            if line.startswith("["):
                in_package = line == "[package]"
            elif in_package and line.startswith("name") and "=" in line:
                return line.split("=", 1)[1].strip().strip('"')
    return None


def run(key, argv, cwd, env, log):
    """Runs one binary (or the doctests) with its output in `log`; returns
    (key, status, wall seconds, CPU seconds)."""
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    return key, proc.returncode, wall, usage.ru_utime + usage.ru_stime


def main():
    # A `python3` that is a pyenv shim runs this script with its own directory put first
    # on PATH; cargo and the tests get the caller's PATH back (pyo3's build script runs
    # again, and what depends on it is compiled again, whenever PATH changes).
    if "SPOOL_CI_PATH" in os.environ:
        os.environ["PATH"] = os.environ.pop("SPOOL_CI_PATH")
    cargo = os.environ.get("CARGO", "cargo")
    jobs = int(os.environ.get("SPOOL_TEST_JOBS", "3"))
    extra = sys.argv[1:]
    started = time.monotonic()
    binaries, libdirs = build(cargo, extra)
    target = subprocess.run(
        [cargo, "metadata", "--format-version=1", "--no-deps"], stdout=subprocess.PIPE, text=True, check=True
    )
    target_dir = json.loads(target.stdout)["target_directory"]
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], stdout=subprocess.PIPE, text=True, check=True)
    libdirs += [
        os.path.join(target_dir, "debug", "deps"),
        os.path.join(target_dir, "debug"),
        os.path.join(sysroot.stdout.strip(), "lib"),
    ]
    if os.environ.get("LD_LIBRARY_PATH"):
        libdirs.append(os.environ["LD_LIBRARY_PATH"])

    rank = {key: i for i, key in enumerate(SLOW_FIRST)}
    queue = sorted(binaries, key=lambda b: rank.get(b[0], len(rank)))
    logs = tempfile.mkdtemp(prefix="spool-ci-tests-")
    # The doctests: cargo builds and runs them (its lock is free: every binary is built).
    doctests = ("doctests", [cargo, "test", "--workspace", "--doc", *extra], os.getcwd(), None)
    slow = sum(1 for b in queue if b[0] in rank)
    work = queue[:slow] + [doctests] + queue[slow:]

    results = {}
    lock = threading.Lock()
    pending = list(work)

    def worker():
        while True:
            with lock:
                if not pending:
                    return
                key, executable, root, package = pending.pop(0)
            env = dict(os.environ)
            argv = executable if isinstance(executable, list) else [executable]
            # The doctests are cargo's to run, in this script's environment; a binary
            # gets what cargo would give it.
            if package is not None:
                env["CARGO"] = cargo
                env["LD_LIBRARY_PATH"] = ":".join(libdirs)
                env["CARGO_MANIFEST_DIR"] = root
                env["CARGO_PKG_NAME"] = package
            log = os.path.join(logs, key.replace(":", "--").replace("/", "-") + ".log")
            result = run(key, argv, root, env, log)
            with lock:
                results[key] = result
                _, status, wall, cpu = result
                print(f"\n===== {key} ({'ok' if status == 0 else f'FAILED, exit {status}'}, "
                      f"{wall:.1f} s wall, {cpu:.1f} s CPU)", flush=True)
                with open(log, encoding="utf-8", errors="replace") as file:
                    sys.stdout.write(file.read())
                sys.stdout.flush()

    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    print(f"\n===== {len(results)} runs, {jobs} at a time, "
          f"{time.monotonic() - started:.0f} s with the build")
    failed = []
    for key, status, wall, cpu in sorted(results.values(), key=lambda r: -r[2]):
        print(f"{wall:8.1f} s wall {cpu:8.1f} s CPU  {'ok    ' if status == 0 else 'FAILED'}  {key}")
        if status != 0:
            failed.append(key)
    if failed:
        print("failed: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
