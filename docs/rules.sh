#!/usr/bin/env bash
# Regenerate the rule tables of docs/DETECTION.md (between the `rules:` markers) from the labelled
# runs in the shared data:
#
#   docs/rules.sh [DATA_DIR]      (DATA_DIR defaults to ../shared/data)
#
# For each labelled set — the SWE-agent runs with the three control files, the ReAct runs, the
# ChatDev collaboration chains — `loopguard eval --by-rule --ablate --folds 2 --seed 1` measures
# every rule of the table at the default configuration: the runs it fired first on, the loops
# only it catches on time and the false alarms only it raises (each rule left out in turn), and
# whether each fold's other half keeps it. Then the same with a judge that always says "no
# progress", which is what the judge's questions can add at most. DETECTION.md gets the tables;
# the full reports (JSON and Markdown, with excerpts of the runs, which stay out of the
# repository) go to $RULES_OUT, a temporary directory by default.
#
# The families: every labelled set in one `loopguard eval` (the per-family table, each rule per
# family), the Aider sessions with and without the users' prompts, and the InterCode halves when
# INTERCODE=DIR is set (docs/families/intercode/README.md rebuilds them).
#
# About 8 minutes on 2 cores (466 s on 2026-11-26; most of it the SWE-agent set and its controls, twice).
# LOOPGUARD_* environment variables are ignored, so the result depends on the data only.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$(cd "${1:-../shared/data}" && pwd)
OUT=${RULES_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
for v in $(compgen -e | grep '^LOOPGUARD_' || true); do unset "$v"; done

python3 models/fetch.py
cargo build --release --quiet
LG="./target/release/loopguard --log error"
RUNS=$DATA/runs
started=$SECONDS
step() { echo "== $* ($((SECONDS - started)) s)" >&2; }

measure() { # NAME LABELLED [eval options...]
    local name=$1 labelled=$2
    shift 2
    step "$name"
    $LG eval "$labelled" --by-rule --ablate --folds 2 --seed 1 --json "$OUT/$name.json" "$@" \
        > "$OUT/$name.md"
}

measure swe "$RUNS/swe_agent_labelled_dev.jsonl" \
    --control "$RUNS/swe_deepseek_healthy.jsonl" \
    --control "$RUNS/taubench_airline.jsonl" \
    --control "$RUNS/sweagent_demos.jsonl"
measure react "$RUNS/react_hotpotqa_labelled_dev.jsonl"
measure chatdev "$RUNS/chatdev_collab_labelled_dev.jsonl"
measure autogen "$RUNS/autogen_labelled_dev.jsonl"
measure aider "$RUNS/aider_labelled_dev.jsonl"
# Every family in one evaluation: the per-family table and each rule per family. The Aider
# sessions are measured twice, with the users' prompts and without them (as a recorder that
# keeps only the agent's side sends them); the InterCode halves (docs/families/intercode) when
# $INTERCODE names the directory label.py wrote them to.
step "families"
noprompts="$OUT/aider_no_prompts.jsonl"
python3 - "$RUNS/aider_labelled_dev.jsonl" "$noprompts" <<'PY'
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        run = json.loads(line)
        keep = [i for i, e in enumerate(run["events"]) if e.get("event", e)["type"] != "collaboration"]
        flc = run.get("first_loop_converted")
        if flc is not None:
            run["first_loop_converted"] = next((k for k, i in enumerate(keep) if i >= flc), len(keep) - 1)
        run["events"] = [run["events"][i] for i in keep]
        run["id"] = "no-prompts/" + run["id"]
        out.write(json.dumps(run) + "\n")
PY
families=("$RUNS/swe_agent_labelled_dev.jsonl" "$RUNS/react_hotpotqa_labelled_dev.jsonl"
          "$RUNS/chatdev_collab_labelled_dev.jsonl" "$RUNS/autogen_labelled_dev.jsonl"
          "$RUNS/aider_labelled_dev.jsonl" "aider_no_prompts=$noprompts")
if [ -n "${INTERCODE:-}" ]; then
    families+=("intercode_dev=$INTERCODE/intercode_labelled_half_a.jsonl"
               "intercode_holdout=$INTERCODE/intercode_labelled_half_b.jsonl")
fi
$LG eval "${families[@]}" --by-rule --json "$OUT/families.json" \
    --control "$RUNS/swe_deepseek_healthy.jsonl" \
    --control "$RUNS/taubench_airline.jsonl" \
    --control "$RUNS/sweagent_demos.jsonl" > "$OUT/families.md"
measure swe-judge "$RUNS/swe_agent_labelled_dev.jsonl" --judge-always no-progress \
    --control "$RUNS/swe_deepseek_healthy.jsonl" \
    --control "$RUNS/taubench_airline.jsonl" \
    --control "$RUNS/sweagent_demos.jsonl"
measure react-judge "$RUNS/react_hotpotqa_labelled_dev.jsonl" --judge-always no-progress

step "DETECTION.md"
$LG rules > "$OUT/rules.md"
python3 - "$OUT" docs/DETECTION.md <<'PY'
import sys
out, doc = sys.argv[1], sys.argv[2]


def splice(text, begin, end, block):
    if begin not in text or end not in text:
        sys.exit(f"{doc}: the markers {begin!r} are missing")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n\n{block}\n{end}{tail}"


sets = [
    ("swe", "SWE-agent dev set (150 runs) with the three control files, no judge"),
    ("react", "ReAct dev set (64 runs), no judge"),
    ("chatdev", "ChatDev collaboration chains (36 runs), no judge"),
    ("autogen", "AutoGen chats (63 runs), no judge"),
    ("aider", "Aider sessions with the users' prompts (28 runs), no judge"),
    ("swe-judge", "SWE-agent dev set and controls, a judge that always says \"no progress\""),
    ("react-judge", "ReAct dev set, a judge that always says \"no progress\""),
]
parts = []
for name, title in sets:
    md = open(f"{out}/{name}.md").read()
    headline = md.split("\n\n")[2] if md.count("\n\n") > 2 else ""
    rules = md[md.index("## Rules"):md.index("## Definitions")].split("\n", 1)[1].strip()
    parts.append(f"#### {title}\n\n{headline}\n\n{rules}\n")
text = open(doc).read()
text = splice(text, "<!-- rules:begin (docs/rules.sh writes this part) -->", "<!-- rules:end -->",
              "\n".join(parts))
fam = open(f"{out}/families.md").read()
per_family = fam[fam.index("## Per family"):fam.index("The figures below pool")].split("\n", 1)[1].strip()
per_rule = fam[fam.index("### Rules per family"):fam.index("## Definitions")].split("\n", 1)[1].strip()
text = splice(text, "<!-- families:begin (docs/rules.sh writes this part) -->", "<!-- families:end -->",
              f"{per_family}\n\nEach rule per family:\n\n{per_rule}\n")
text = splice(text, "<!-- rules-list:begin (`loopguard rules` prints this table) -->",
              "<!-- rules-list:end -->", open(f"{out}/rules.md").read())
open(doc, "w").write(text)
PY
step "done (reports in $OUT)"
