#!/usr/bin/env python3
"""Attach the settled labels (labels.jsonl) to the converted halves: writes
intercode_labelled_half_a.jsonl (our development half) and intercode_labelled_half_b.jsonl (our
hold-out), `loopguard eval` input.

Usage: python3 label.py DIR   (DIR holds convert.py's intercode_half_a/b.jsonl; output goes there)
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else here
labels = {}
with open(os.path.join(here, "labels.jsonl")) as f:
    for line in f:
        row = json.loads(line)
        labels[row["id"]] = row
for half in "ab":
    with open(os.path.join(here, f"half_{half}.txt")) as f:
        wanted = [line.strip() for line in f if line.strip()]
    runs = {}
    with open(os.path.join(out, f"intercode_half_{half}.jsonl")) as f:
        for line in f:
            run = json.loads(line)
            runs[run["id"]] = run
    missing = [i for i in wanted if i not in runs]
    if missing:
        sys.exit(f"half {half}: {len(missing)} runs missing from the conversion, e.g. {missing[0]}")
    with open(os.path.join(out, f"intercode_labelled_half_{half}.jsonl"), "w") as f:
        for run_id in wanted:
            run = runs[run_id]
            lab = labels[run_id]
            for key in ("label", "first_loop_converted", "kind", "reworded", "confidence", "why"):
                run[key] = lab[key]
            f.write(json.dumps(run) + "\n")
    print(f"half {half}: {len(wanted)} runs labelled")
