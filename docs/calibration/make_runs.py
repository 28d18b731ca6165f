#!/usr/bin/env python3
"""Build the labelled runs `loopguard calibrate runs` replays, from the shared data.

No labelled agent runs exist, so this script makes them (deterministically: the same data gives
the same files). Every group and how it is built is described in REPORT.md; in short:

  healthy         178 healthy mini-swe-agent runs, as they are             -> no_loop
  demos           21 SWE-agent demonstrations; eps.traj submits the same
                  wrong flag four times (a real loop, onset at its first
                  repeat, event 20); the others                            -> loop / no_loop
  reworded_calls  each healthy run cut after one of its tool calls, then
                  the same call twice more, reworded the way agents reword
                  shell commands (cd prefix, quote style, python/python3,
                  split flags, `| cat`), with the same output               -> loop
  failure_pairs   each GitBugs pair (a, b) among three failures from other
                  reports of the same project, an edit between each:
                  d1 d2 a d3 b                                             -> loop if a duplicate
  request_pairs   each tau-bench pair among three requests of other tasks,
                  planner -> worker, a reply between each: d1 d2 a d3 b    -> loop if the same task
  response_pairs  each STS-B dev/test pair as four responses
                  a, b, "To repeat: a", "Again: b"                         -> loop if a paraphrase
  error_results   GitBugs pairs as the error output of three different
                  commands: error a, error b, "Error: a"                   -> loop if a duplicate

Usage: make_runs.py DATA_DIR OUT_DIR   (DATA_DIR is ../shared/data; OUT_DIR a temporary directory)
Writes one JSONL file per group into OUT_DIR and prints how many runs each has.
Nothing here is committed: the runs are rebuilt from the shared data every time.
"""

import json
import random
import re
import sys
from pathlib import Path


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return len(rows)


def labelled(run_id, events, label, group, onset=None):
    r = {"id": run_id, "events": events, "label": label, "group": group}
    if onset is not None:
        r["loop_onset"] = onset
    return r


# --- reworded shell commands ------------------------------------------------------------------
# Each rewrite keeps what the command does and adds or removes no digits: loopguard never matches
# texts whose numbers differ (its paging/polling guard), and these loops are meant to test the
# cosine threshold, not that guard.

CD_PREFIX = re.compile(r"^cd\s+\S+\s*&&\s*")
SHORT_FLAGS = re.compile(r"(?<=\s)-([a-zA-Z]{2,4})(?=\s|$)")
PYTHON = re.compile(r"\bpython\b(?!3)")
PYTHON3 = re.compile(r"\bpython3\b")


def cd_prefix(cmd):
    if CD_PREFIX.match(cmd):
        return CD_PREFIX.sub("", cmd, count=1)
    return "cd /testbed && " + cmd


def swap_quotes(cmd):
    if '"' in cmd and "'" not in cmd:
        return cmd.replace('"', "'")
    if "'" in cmd and '"' not in cmd:
        return cmd.replace("'", '"')
    return cmd


def python_version(cmd):
    if PYTHON3.search(cmd):
        return PYTHON3.sub("python", cmd)
    return PYTHON.sub("python3", cmd)


def split_flags(cmd):
    return SHORT_FLAGS.sub(lambda m: " ".join("-" + c for c in m.group(1)), cmd, count=1)


def pipe_cat(cmd):
    if "<<" in cmd or "\n" in cmd or cmd.rstrip().endswith("| cat"):
        return cmd
    return cmd.rstrip() + " | cat"


REWRITES = [cd_prefix, swap_quotes, python_version, split_flags, pipe_cat]

TAGS = re.compile(r"<[^>\s]{1,40}>")


def informative(output):
    """An output that says something (loopguard treats empty or tag-only results as trivial)."""
    return sum(c.isalnum() for c in TAGS.sub("", output)) >= 20


def reworded_call_loop(run, rng):
    events = run["events"]
    candidates = []
    for k, e in enumerate(events):
        if k < 2 or e.get("type") != "tool_call":
            continue
        res = e.get("result") or {}
        out = res.get("output")
        cmd = (e.get("args") or {}).get("command")
        if not isinstance(out, str) or not isinstance(cmd, str) or res.get("is_error"):
            continue
        if not informative(out):
            continue
        variants = [f for f in REWRITES if f(cmd) != cmd]
        if len(variants) >= 2:
            candidates.append((k, cmd, variants))
    if not candidates:
        return None
    k, cmd, variants = rng.choice(candidates)
    first, second = rng.sample(variants, 2)
    original = events[k]

    def again(new_cmd):
        e = json.loads(json.dumps(original))
        e["args"]["command"] = new_cmd
        return e

    loop_events = events[: k + 1] + [again(first(cmd)), again(second(cmd))]
    return labelled(run["id"] + "#reworded", loop_events, "loop", "reworded_calls", onset=k + 1)


# --- pairs as runs ----------------------------------------------------------------------------
# A pair alone would compare each text with one other; in a run, every new failure or request is
# compared with everything in the window, and one false match is enough for a loop verdict. So
# each pair is set among three distractors from other reports / other tasks, and the run is
# flagged if *any* two of its five texts match: false alarms compound the way they do in real runs.

EDITS = [
    ("src/service.py", "handle the empty input case"),
    ("src/client.py", "retry the connection when it times out"),
    ("src/config.py", "validate the settings when they are loaded"),
    ("src/handlers.py", "log the request that fails"),
]

REPLIES = [
    "The worker is on it.",
    "The worker sent an answer; the planner is reviewing it.",
    "Still waiting for the worker's reply.",
    "The worker asked for more details.",
]


def bug_reports(p):
    """The project, the two report ids (`hadoop-13279610-13287276-summary[-neg]`: a's, then
    b's) and the text field of a GitBugs pair."""
    first, second = p["id"].removesuffix("-neg").rsplit("-", 3)[1:3]
    return p["project"], (first, second), p["text_field"]


def interleave(texts, make_event, between):
    events = []
    for i, t in enumerate(texts):
        if i:
            events.append(between[i - 1])
        events.append(make_event(t))
    return events


def distractors(rng, pool, exclude, related, k=3):
    """k texts from distinct sources not in `exclude` and not known to be related to each other."""
    picked, sources = [], set(exclude)
    candidates = list(pool)
    rng.shuffle(candidates)
    for text, source in candidates:
        if source in sources or any((source, s) in related for s in sources):
            continue
        picked.append(text)
        sources.add(source)
        if len(picked) == k:
            return picked
    raise SystemExit("not enough distractors")


def failure_runs(bugs):
    duplicates = set()
    pools = {}
    for p in bugs:
        project, (first, second), field = bug_reports(p)
        if p["label"] == 1:
            duplicates |= {(first, second), (second, first)}
        pool = pools.setdefault((project, field), {})
        pool[p["a"]] = first
        pool[p["b"]] = second
    edit = [
        {
            "type": "tool_call",
            "tool": "edit_file",
            "args": {"path": path, "change": change},
            "result": {"output": f"The file {path} has been edited.", "is_error": False},
        }
        for path, change in EDITS
    ]
    runs = []
    for p in bugs:
        project, reports, field = bug_reports(p)
        rng = random.Random(p["id"])
        pool = list(pools[(project, field)].items())
        d = distractors(rng, pool, set(reports), duplicates)
        texts = [d[0], d[1], p["a"], d[2], p["b"]]
        events = interleave(texts, lambda t: {"type": "failure", "message": t}, edit)
        label = "loop" if p["label"] == 1 else "no_loop"
        runs.append(labelled(f"failure:{p['id']}", events, label, "failure_pairs", 8 if label == "loop" else None))
    return runs


def request_runs(requests):
    pool = {}
    for p in requests:
        pool[p["a"]] = p["task_a"]
        pool[p["b"]] = p["task_b"]
    pool = list(pool.items())
    runs = []
    for i, p in enumerate(requests):
        rng = random.Random(p["id"])
        d = distractors(rng, pool, {p["task_a"], p["task_b"]}, set())
        texts = [d[0], d[1], p["a"], d[2], p["b"]]
        run_id = f"request:{p['id']}"
        # The notes between the requests are the planner's own (its agent named): an event
        # nobody is named for would be the worker's answer, and the pair a request answered.
        reply = [
            {"task_id": run_id, "agent_id": "planner", "event": {"type": "response", "text": t}}
            for t in REPLIES
        ]
        events = interleave(
            texts,
            lambda t: {"type": "collaboration", "from_agent": "planner", "to_agent": "worker", "request": t},
            reply,
        )
        label = "loop" if p["label"] == 1 else "no_loop"
        runs.append(labelled(run_id, events, label, "request_pairs", 8 if label == "loop" else None))
    return runs


# The same-error detector needs two earlier matches, the response detector three
# (detect.repeats.response), and a pair has two texts. The later events repeat the pair with a
# few words added, as a model repeating itself does: a run a, b, a', b' is a loop exactly when b
# is a rewording of a. (Not a, b, a, b: an exact repeat takes loopguard's fast path, which
# compares it by keys alone, so b would never be looked at.)


def response_run(p):
    texts = (p["a"], p["b"], "To repeat: " + p["a"], "Again: " + p["b"])
    events = [{"type": "response", "text": t} for t in texts]
    label = "loop" if p["label"] == 1 else "no_loop"
    return labelled(f"response:{p['id']}", events, label, "response_pairs", 1 if label == "loop" else None)


ERROR_COMMANDS = [
    "python reproduce_issue.py",
    "python -m pytest tests/ -x -q",
    "bash scripts/run_checks.sh",
]


def error_run(p):
    # Three different commands ending in error a, then b, then a again (see above).
    outputs = [p["a"], p["b"], "Error: " + p["a"]]
    events = [
        {
            "type": "tool_call",
            "tool": "bash",
            "args": {"command": cmd},
            "result": {"output": out, "is_error": True},
        }
        for cmd, out in zip(ERROR_COMMANDS, outputs)
    ]
    label = "loop" if p["label"] == 1 else "no_loop"
    return labelled(f"error:{p['id']}", events, label, "error_results", 1 if label == "loop" else None)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    counts = {}

    healthy = read_jsonl(data / "runs" / "swe_deepseek_healthy.jsonl")
    counts["healthy"] = write_jsonl(
        out / "healthy.jsonl",
        [labelled(r["id"], r["events"], "no_loop", "healthy") for r in healthy],
    )

    demos = []
    for r in read_jsonl(data / "runs" / "sweagent_demos.jsonl"):
        if r["id"].endswith("/eps.traj"):
            # Events 19..22 submit the same wrong flag; 20 is the first repeat.
            demos.append(labelled(r["id"], r["events"], "loop", "demos", onset=20))
        else:
            demos.append(labelled(r["id"], r["events"], "no_loop", "demos"))
    counts["demos"] = write_jsonl(out / "demos.jsonl", demos)

    loops = []
    for r in healthy:
        # One generator per run, seeded by its id: adding runs does not move the others' loops.
        loop = reworded_call_loop(r, random.Random(r["id"]))
        if loop:
            loops.append(loop)
    counts["reworded_calls"] = write_jsonl(out / "reworded_calls.jsonl", loops)

    bugs = read_jsonl(data / "pairs" / "gitbugs_duplicates.jsonl")
    counts["failure_pairs"] = write_jsonl(out / "failure_pairs.jsonl", failure_runs(bugs))
    counts["error_results"] = write_jsonl(out / "error_results.jsonl", [error_run(p) for p in bugs])
    requests = read_jsonl(data / "pairs" / "taubench_user_requests.jsonl")
    counts["request_pairs"] = write_jsonl(out / "request_pairs.jsonl", request_runs(requests))
    # The dev and test splits only: the pairs report covers all of STS-B, and replaying every
    # pair would add three minutes of embedding for no new kind of evidence.
    stsb = [p for p in read_jsonl(data / "pairs" / "stsb.jsonl") if p.get("split") in ("dev", "test")]
    counts["response_pairs"] = write_jsonl(out / "response_pairs.jsonl", [response_run(p) for p in stsb])
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
