#!/usr/bin/env bash
# Installs what the tests need beyond cargo, from Debian's packages, if it is missing:
# tmux (the `spool top` end-to-end test drives it in a real terminal), chromium
# (the web page's test loads it headless), curl (the docs' examples, which the
# docs test runs as written) and postgresql (the PostgreSQL backend's tests start
# throwaway clusters with its binaries, see docs/postgres.md). Run by `.ci/run`
# before the tests; run it by hand once on a fresh machine before
# `cargo test --workspace`. Needs root (or sudo) the first time; does nothing once
# all are there.
#
# `scripts/test-deps.sh postgres` sees to PostgreSQL alone: its binaries, the `openssl`
# command (the TLS tests make their certificates with it) and, when run as root, the
# system user `spool-pg` that initdb and postgres run as (they refuse to run as root).
# spool-pgtest calls it so when a test finds any of them missing.
#
# `scripts/test-deps.sh python VENV` sees to Python alone: it makes the virtual
# environment VENV with `python3` (3.9 or newer) and installs into it, from PyPI, the
# pinned packages of `crates/spool-py/requirements-test.txt` (maturin, pytest), which
# the Python package's test (`crates/spool-py/tests/python.rs`) builds and tests the
# wheel with. It does nothing when VENV already has those versions.
#
# Callers are serialised on a lock file (`SPOOL_TEST_DEPS_LOCK`, by default
# `spool-test-deps.lock` in the temporary directory): tests running at once in one
# binary may each find a tool missing, and two package managers at once fail on
# apt's own lock. The second caller waits for the first, looks again, and finds the
# tools installed.
set -euo pipefail

lock=${SPOOL_TEST_DEPS_LOCK:-${TMPDIR:-/tmp}/spool-test-deps.lock}
exec 9>>"$lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi

if [[ ${1:-} == python ]]; then
    venv=${2:?usage: scripts/test-deps.sh python VENV}
    requirements="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/crates/spool-py/requirements-test.txt"
    if ! command -v python3 >/dev/null 2>&1; then
        echo "test-deps: python3 is not on PATH; the Python package's tests need CPython 3.9 or newer" >&2
        exit 1
    fi
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
        echo "test-deps: $(command -v python3) is $(python3 -V 2>&1); the Python package's tests need 3.9 or newer" >&2
        exit 1
    fi
    # A venv whose interpreter no longer runs (python3 upgraded or removed) is made anew.
    if ! "$venv/bin/python" -c '' >/dev/null 2>&1; then
        rm -rf "$venv"
        if ! python3 -m venv "$venv"; then
            echo "test-deps: python3 -m venv $venv failed (on Debian: apt-get install python3-venv)" >&2
            exit 1
        fi
    fi
    # Exit status 0 when every pinned NAME==VERSION is installed at that version.
    if "$venv/bin/python" - "$requirements" <<'EOF'
import sys
from importlib import metadata

for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    try:
        if metadata.version(name.strip()) != version.strip():
            sys.exit(1)
    except metadata.PackageNotFoundError:
        sys.exit(1)
EOF
    then
        exit 0
    fi
    echo "== installing $(grep -v '^#' "$requirements" | xargs) from PyPI into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
    exit 0
fi

# Debian's PostgreSQL binaries live in /usr/lib/postgresql/VERSION/bin, off PATH.
have_postgres() {
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null 2>&1 ||
        { command -v pg_config >/dev/null 2>&1 && [[ -x "$(pg_config --bindir)/initdb" ]]; }
}

# The user a root test process runs initdb and postgres as.
pg_user=${SPOOL_PG_USER:-spool-pg}
if [[ $(id -u) -eq 0 ]] && ! id -u "$pg_user" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$pg_user"
fi

need=()
if [[ ${1:-} != postgres ]]; then
    command -v tmux >/dev/null 2>&1 || need+=(tmux)
    command -v chromium >/dev/null 2>&1 || need+=(chromium)
    command -v curl >/dev/null 2>&1 || need+=(curl)
fi
have_postgres || need+=(postgresql)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [[ ${#need[@]} -eq 0 ]]; then
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    sudo=(sudo)
fi
echo "== installing ${need[*]} from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
