#!/usr/bin/env bash
# Checks `spool serve` against its own OpenAPI document with schemathesis (a
# property-based API tester from PyPI): schemathesis reads
# /v1/openapi.json, generates requests for every operation (valid and invalid ones),
# and checks each answer against the document (status codes, content types, response
# schemas, no 5xx, invalid input refused, valid input accepted, ...).
#
# It installs schemathesis into a venv under target/ (once), builds spool, starts
# `spool serve` on a temporary store with a known token on a free loopback port, runs
# schemathesis with a bounded number of examples per operation, and exits with its
# status.
#
# Environment:
#   SCHEMATHESIS_MAX_EXAMPLES  examples per operation (default 25)
#   SCHEMATHESIS_SEED          schemathesis's seed (default 14, so runs repeat)
#   SCHEMATHESIS_ARGS          more arguments for `schemathesis run`
#   SPOOL_BIN                  a spool binary to test instead of building one
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
VENV=target/schemathesis-venv
MAX_EXAMPLES=${SCHEMATHESIS_MAX_EXAMPLES:-25}
SEED=${SCHEMATHESIS_SEED:-14}

if [[ ! -x $VENV/bin/schemathesis ]] ||
    [[ $("$VENV/bin/schemathesis" --version 2>/dev/null) != *"$SCHEMATHESIS_VERSION"* ]]; then
    echo "== installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet "schemathesis==$SCHEMATHESIS_VERSION"
fi

if [[ -z ${SPOOL_BIN:-} ]]; then
    echo "== cargo build -p spool-cli"
    cargo build --quiet -p spool-cli
    SPOOL_BIN=target/debug/spool
fi

WORK=$(mktemp -d)
TOKEN=schemathesis-token
echo "$TOKEN" >"$WORK/token"
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

"$SPOOL_BIN" serve --store "$WORK/store" --addr 127.0.0.1:0 --token-file "$WORK/token" \
    2>"$WORK/serve.log" &
SERVER_PID=$!
ADDR=
for _ in $(seq 1 300); do
    ADDR=$(sed -n 's/^listening on http:\/\///p' "$WORK/serve.log" | head -n 1)
    [[ -n $ADDR ]] && break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "spool serve ended before it listened:" >&2
        cat "$WORK/serve.log" >&2
        exit 1
    fi
    sleep 0.1
done
if [[ -z $ADDR ]]; then
    echo "spool serve did not say it listens within 30 s:" >&2
    cat "$WORK/serve.log" >&2
    exit 1
fi
echo "== spool serve on http://$ADDR; schemathesis, $MAX_EXAMPLES examples per operation, seed $SEED"

# Run from target/, where schemathesis keeps its example database (.schemathesis/) and
# its JUnit report (schemathesis-report/), out of the work tree.
STATUS=0
(cd target && "../$VENV/bin/schemathesis" --config-file ../scripts/schemathesis.toml run "http://$ADDR/v1/openapi.json" \
    --header "Authorization: Bearer $TOKEN" \
    --max-examples "$MAX_EXAMPLES" \
    --seed "$SEED" \
    --checks all \
    --request-timeout 10 \
    --report junit \
    --report-dir schemathesis-report \
    ${SCHEMATHESIS_ARGS:-}) || STATUS=$?

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "spool serve died during the run:" >&2
    cat "$WORK/serve.log" >&2
    STATUS=1
fi
exit "$STATUS"
