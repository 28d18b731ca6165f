#!/usr/bin/env python3
"""Failure-line pairs from public logs: same template, other variables (label 1) against another
template of the same system (label 0) — what "the same failure" means for log lines.

    python3 docs/calibration/log_pairs.py LOGHUB_DIR > log_pairs.jsonl
    loopguard calibrate pairs failure=log_pairs.jsonl --out-dir docs/calibration/log-pairs

LOGHUB_DIR is a checkout of https://github.com/logpai/loghub (its `*/*_2k.log_structured.csv`:
2,000 lines per system, each with the template it was mined to, `EventId`). The data is not
committed here (loghub's licence asks every distribution to refer to its repository); the
report is. Pairs are drawn with a fixed seed, so the file is the same on every run:
PER_SYSTEM positives (two lines of one template whose texts differ) and as many negatives (two
lines of two templates of the same system, so both read alike in style) per system.
"""

import csv
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

PER_SYSTEM = 60
SEED = 20261124


def lines(path: Path):
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        for row in csv.DictReader(f):
            content = (row.get("Content") or "").strip()
            if content:
                yield row["EventId"], content


def main() -> None:
    root = Path(sys.argv[1])
    rng = random.Random(SEED)
    for path in sorted(root.glob("*/*_2k.log_structured.csv")):
        system = path.parent.name
        by_template = defaultdict(list)
        for event, content in lines(path):
            by_template[event].append(content)
        # Distinct texts per template: two identical lines are an exact match, not a test.
        templates = {e: sorted(set(t)) for e, t in by_template.items()}
        varied = [e for e, t in templates.items() if len(t) >= 2]
        if len(templates) < 2 or not varied:
            continue
        names = sorted(templates)
        for _ in range(PER_SYSTEM):
            e = rng.choice(sorted(varied))
            a, b = rng.sample(templates[e], 2)
            print(json.dumps({"a": a, "b": b, "label": 1, "source": system}))
            e1, e2 = rng.sample(names, 2)
            print(
                json.dumps(
                    {
                        "a": rng.choice(templates[e1]),
                        "b": rng.choice(templates[e2]),
                        "label": 0,
                        "source": system,
                    }
                )
            )


if __name__ == "__main__":
    main()
