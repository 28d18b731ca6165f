#!/usr/bin/env bash
# Fuzz the service against the OpenAPI document it serves, with schemathesis: every check, every
# phase, a bounded number of examples per operation, once without an auth token and once with
# one. Generic: whatever routes /openapi.json lists are tested. Any finding fails the run.
#
#   bash .ci/schemathesis.sh            # after `python3 models/fetch.py` (the model is needed)
#   SCHEMATHESIS_EXAMPLES=300 SCHEMATHESIS_SEED=$RANDOM bash .ci/schemathesis.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ST_VERSION=4.32.5
EXAMPLES=${SCHEMATHESIS_EXAMPLES:-100}
# A fixed seed keeps CI reproducible; set another to explore.
SEED=${SCHEMATHESIS_SEED:-20261124}
ROOT=$(pwd)
TARGET=$(realpath "${CARGO_TARGET_DIR:-target}")
VENV="$TARGET/schemathesis-venv"

if ! "$VENV/bin/st" --version 2>/dev/null | grep -qF "$ST_VERSION"; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$ST_VERSION"
fi
cargo build --quiet --release --bin loopguard
BIN="$TARGET/release/loopguard"

WORK=$(mktemp -d)
SERVER_PID=""
stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
trap 'stop_server; rm -rf "$WORK"' EXIT

# Is the server at $1 ready? (python3 rather than curl: CI has python3 for models/fetch.py.)
ready() {
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "$1/readyz" 2>/dev/null
}

# run NAME [TOKEN]
run() {
    local name=$1 token=${2:-}
    local args=(serve --addr 127.0.0.1:0 --data-dir "$WORK/$name")
    local headers=()
    if [ -n "$token" ]; then
        args+=(--set "server.auth_token=\"$token\"")
        headers=(-H "Authorization: Bearer $token")
    fi
    LOOPGUARD_LOG=warn "$BIN" "${args[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    SERVER_PID=$!
    local url=""
    for _ in $(seq 1 600); do
        url=$(sed -n 's/^loopguard listening on //p' "$WORK/$name.out")
        [ -n "$url" ] && ready "$url" && break
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/$name.err"; exit 1; }
        sleep 0.1
    done
    ready "$url" || { echo "schemathesis: the server never became ready"; cat "$WORK/$name.err"; exit 1; }
    echo "schemathesis ($name): $url/openapi.json, $EXAMPLES examples per operation, seed $SEED"
    # From a scratch directory: schemathesis keeps an example database in its working directory,
    # which would make a run depend on the ones before it.
    (cd "$WORK" && "$VENV/bin/st" --config-file "$ROOT/.ci/schemathesis.toml" run "$url/openapi.json" \
        --checks all --max-examples "$EXAMPLES" --seed "$SEED" \
        --output-truncate true --no-color ${headers[@]+"${headers[@]}"})
    stop_server
    if grep -qi "panicked" "$WORK/$name.err"; then
        echo "schemathesis ($name): the server panicked"
        cat "$WORK/$name.err"
        exit 1
    fi
}

run no-token
run token "ci-$(date +%s)-token"
