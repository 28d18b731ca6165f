#!/usr/bin/env bash
# Reproduce docs/calibration/ from the shared labelled data:
#
#   docs/calibration/run.sh [DATA_DIR]      (DATA_DIR defaults to ../shared/data)
#
# 1. `loopguard calibrate pairs` on the three pair files, one event kind each   -> pairs/
# 2. make_runs.py builds labelled runs from the pairs and the recorded runs, in a temporary
#    directory (nothing derived from the shared data is committed but the reports)
# 3. `loopguard calibrate runs`, one sweep per kind; each starts from the previous one's
#    recommended.toml, so the last one holds every chosen setting              -> runs-*/
# 4. the recorded tau-bench runs scored with the settings before and after (a false-alarm
#    check on real, unlabelled conversations)
# 5. summarize.py writes report.json, REPORT.md and recommended.toml
#
# About 10 minutes on 2 cores, most of it embedding the healthy runs' texts once. LOOPGUARD_*
# environment variables are ignored, so the result depends on the data only.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=$(cd "${1:-../shared/data}" && pwd)
OUT=docs/calibration
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for v in $(compgen -e | grep '^LOOPGUARD_' || true); do unset "$v"; done

python3 models/fetch.py
cargo build --release --quiet
# --log error: the engine logs every gate it triggers, thousands in a sweep.
LG="./target/release/loopguard --log error"
started=$SECONDS
step() { echo "== $* ($((SECONDS - started)) s)" >&2; }

step "labelled pairs"
rm -rf "$OUT/pairs" "$OUT"/runs-*
$LG calibrate pairs \
    "failure=$DATA/pairs/gitbugs_duplicates.jsonl" \
    "collaboration=$DATA/pairs/taubench_user_requests.jsonl" \
    "response=$DATA/pairs/stsb.jsonl" \
    --out-dir "$OUT/pairs"

step "building labelled runs"
python3 "$OUT/make_runs.py" "$DATA" "$WORK/runs" > "$WORK/run_counts.json"
R=$WORK/runs

# How much a recommended point may raise false alarms above the quietest point of its sweep
# (REPORT.md, "How the defaults are chosen"): none where the negatives are real healthy runs;
# one percentage point where they are sampled pairs with label noise; no limit for requests,
# whose sampled negatives are mostly the same request from another task.
step "failures: sweep detect.similarity.failure"
$LG calibrate runs "$R/failure_pairs.jsonl" \
    --sweep detect.similarity.failure=0.70:0.98:0.02 \
    --false-alarm-slack 0.01 --out-dir "$OUT/runs-failure"

step "requests: sweep detect.similarity.collaboration"
$LG --config "$OUT/runs-failure/recommended.toml" calibrate runs "$R/request_pairs.jsonl" \
    --sweep detect.similarity.collaboration=0.70:0.98:0.02 \
    --false-alarm-slack 1 --out-dir "$OUT/runs-collaboration"

step "responses: sweep detect.similarity.response"
$LG --config "$OUT/runs-collaboration/recommended.toml" calibrate runs "$R/response_pairs.jsonl" \
    --sweep detect.similarity.response=0.70:0.98:0.02 \
    --false-alarm-slack 0.01 --out-dir "$OUT/runs-response"

step "tool calls: sweep tool_call x repeats.tool_call x result over healthy and loop runs"
$LG --config "$OUT/runs-response/recommended.toml" calibrate runs \
    "$R/healthy.jsonl" "$R/demos.jsonl" "$R/reworded_calls.jsonl" "$R/error_results.jsonl" \
    --sweep detect.similarity.tool_call=0.74:0.94:0.04 \
    --sweep detect.repeats.tool_call=1,2 \
    --sweep detect.similarity.result=0.90,0.95 \
    --jobs 16 --out-dir "$OUT/runs-tool-calls"

step "false-alarm check: tau-bench conversations before and after"
for when in before after; do
    cfg=$OUT/before.toml
    [ "$when" = after ] && cfg=$OUT/runs-tool-calls/recommended.toml
    $LG --config "$cfg" score --summary "$DATA/runs/taubench_airline.jsonl" > "$WORK/taubench-$when.jsonl"
done

step "summary"
python3 "$OUT/summarize.py" "$OUT" "$WORK"
step "done"
