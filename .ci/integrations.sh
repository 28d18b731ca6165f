#!/usr/bin/env bash
# Where agents already run (docs/INTEGRATIONS.md): the suites that need more than cargo.
#
#   1. The OpenTelemetry Python SDK (pinned: tests/otel/requirements.txt, in a venv under
#      target/) exports the GenAI spans of a looping agent to a real `loopguard serve` over
#      OTLP/HTTP protobuf; the loop must show in /v1/tasks/{id}.
#   2. The TypeScript client (clients/typescript): `npm ci` from its pinned lockfile, then its
#      tests under Node against a real `loopguard serve` (types checked against
#      docs/openapi.json, the Vercel AI SDK example end to end).
#
# The Claude Code and Gemini CLI hooks are tested by cargo (tests/integrations.rs). Both parts
# here use the binary cargo built, with the real model; any failure fails the run, nothing is
# skipped.
#
#   bash .ci/integrations.sh            # after `python3 models/fetch.py` (the model is needed)
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=$(realpath "${CARGO_TARGET_DIR:-target}")
cargo build --quiet --release --bin loopguard
export LOOPGUARD_BIN="$TARGET/release/loopguard"

# --- 1. The OpenTelemetry Python SDK → POST /v1/traces -------------------------------------
venv="$TARGET/venv-otel"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r tests/otel/requirements.txt
# The Python client's LocalServer starts the server; it is pure Python, read from the checkout.
status=0
PYTHONPATH=clients/python/src PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/otel || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests in tests/otel: that is a failure here" >&2
    exit 1
fi
[ "$status" -eq 0 ] || exit "$status"

# --- 2. The TypeScript client under Node ----------------------------------------------------
if ! command -v npm >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm >/dev/null
fi
(
    cd clients/typescript
    npm ci --no-audit --no-fund --loglevel=error
    npm run --silent build
    npm test
)
