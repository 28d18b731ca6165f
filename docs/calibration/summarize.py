#!/usr/bin/env python3
"""Write docs/calibration/report.json, REPORT.md and recommended.toml from the reports that
`loopguard calibrate` wrote under docs/calibration/ (pairs/, runs-*/).

Usage: summarize.py OUT_DIR [WORK_DIR]

WORK_DIR is run.sh's temporary directory: with it, the run counts, the tau-bench check and the
texts of a few example runs are read from there and kept in report.json; without it, REPORT.md
is regenerated from the committed report.json (to edit the wording without re-running).
"""

import json
import sys
from pathlib import Path

KINDS = ["failure", "collaboration", "response"]
STEPS = [
    ("failure", "runs-failure", "failure_pairs"),
    ("collaboration", "runs-collaboration", "request_pairs"),
    ("response", "runs-response", "response_pairs"),
    ("tool calls", "runs-tool-calls", None),
]
KEYS = [
    ("detect.similarity", "failure"),
    ("detect.similarity", "collaboration"),
    ("detect.similarity", "response"),
    ("detect.similarity", "tool_call"),
    ("detect.similarity", "result"),
    ("detect.repeats", "tool_call"),
]


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def toml_values(path):
    """The key = value lines of a snippet, by table (enough for the files loopguard writes)."""
    table, out = None, {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            table = line.strip("[]")
            continue
        key, value = (x.strip() for x in line.split("=", 1))
        out[(table, key)] = value
    return out


def f(x, d=3):
    return "–" if x is None else f"{x:.{d}f}"


def setting(point, key):
    for s in point["settings"]:
        if s["key"] == key:
            return s["value"]
    return None


def collect(out, work):
    """Gather the numbers REPORT.md needs into one JSON document."""
    pairs = load(out / "pairs" / "report.json")
    report = {
        # Without the machine's path to the model files.
        "model": pairs["model"].split(" from ")[0],
        "pairs": {},
        "runs": {},
    }
    for g in pairs["groups"]:
        kind = g["group"]
        entry = {
            "pairs": g["pairs"],
            "positives": g["positives"],
            "negatives": g["negatives"],
            "ruled_out_positives": g["decided_by_keys"]["ruled_out_positives"],
            "scorers": {},
        }
        for s in g["scorers"]:
            b = s["best_f1"] or {}
            entry["scorers"][s["scorer"]] = {
                "roc_auc": s["roc_auc"],
                "pr_auc": s["pr_auc"],
                "best_f1_threshold": b.get("config_value"),
                "best_f1": b.get("f1"),
                "best_f1_precision": b.get("precision"),
                "best_f1_recall": b.get("recall"),
                "at_fpr": (s["at_target_fpr"] or {}).get("config_value"),
                "at_fpr_recall": (s["at_target_fpr"] or {}).get("recall"),
                "fixed": {fp["name"]: {k: fp[k] for k in ("precision", "recall", "f1", "fpr")} for fp in s["fixed"]},
            }
        report["pairs"][kind] = entry
    report["pairs_target_fpr"] = pairs["target_fpr"]

    runs_by_id = {}
    if work:
        for name in ("request_pairs", "failure_pairs"):
            for r in read_jsonl(work / "runs" / f"{name}.jsonl"):
                runs_by_id[r["id"]] = r

    for name, sub, group in STEPS:
        r = load(out / sub / "report.json")
        rec = r["recommended"]
        chosen = r["points"][rec["point"]] if rec else None
        step = {
            "dir": sub,
            "runs": r["runs"],
            "loops": r["loops"],
            "no_loops": r["no_loops"],
            "false_alarm_slack": r["false_alarm_slack"],
            "axes": r["axes"],
            "recommended": rec["settings"] if rec else None,
            "notes": r["notes"],
            "points": [
                {
                    "settings": {s["key"]: s["value"] for s in p["settings"]},
                    "precision": p["precision"],
                    "recall": p["recall"],
                    "f1": p["f1"],
                    "fpr": p["fpr"],
                    "false_alarms": p["false_alarms"],
                    "early_alarms": p["early_alarms"],
                    "mean_delay": p["delay"]["mean"],
                    "seconds": p["seconds"],
                    "texts_embedded": p["texts_embedded"],
                    "groups": p["groups"],
                    "false_alarm_ids": p["examples"]["false_alarms"],
                }
                for p in r["points"]
            ],
            "chosen": rec["point"] if rec else None,
        }
        # Example false alarms at the chosen point, with their texts, for the report to show.
        if chosen and group and runs_by_id:
            examples = []
            for rid in chosen["examples"]["false_alarms"][:3]:
                run = runs_by_id.get(rid)
                if run:
                    # An event is bare or in its envelope (`{"agent_id": …, "event": {…}}`).
                    events = [e.get("event", e) for e in run["events"]]
                    texts = [e.get("request") or e.get("message") for e in events if e["type"] in ("collaboration", "failure")]
                    examples.append({"id": rid, "texts": texts})
            step["false_alarm_examples"] = examples
        report["runs"][name] = step

    final = toml_values(out / "runs-tool-calls" / "recommended.toml")
    before = toml_values(out / "before.toml")
    report["recommended"] = {f"{t}.{k}": final.get((t, k)) for t, k in KEYS}
    report["before"] = {f"{t}.{k}": before.get((t, k)) for t, k in KEYS}

    if work:
        report["run_counts"] = load(work / "run_counts.json")
        check = {}
        for when in ("before", "after"):
            rows = read_jsonl(work / f"taubench-{when}.jsonl")
            flagged = [r["id"] for r in rows if r["loop"]]
            kinds = {}
            for r in rows:
                if r["loop"]:
                    k = r["kinds"][0]
                    kinds[k] = kinds.get(k, 0) + 1
            check[when] = {"runs": len(rows), "flagged": len(flagged), "flagged_ids": flagged, "first_kinds": kinds}
        report["taubench_check"] = check
    else:
        old = load(out / "report.json")
        for k in ("run_counts", "taubench_check"):
            report[k] = old.get(k)
        for name, _, _ in STEPS:
            if "false_alarm_examples" in old.get("runs", {}).get(name, {}):
                report["runs"][name]["false_alarm_examples"] = old["runs"][name]["false_alarm_examples"]
    return report


def snippet(report):
    lines = [
        "# loopguard's shipped similarity thresholds and tool-call repeat count, as chosen by",
        "# docs/calibration/run.sh (see REPORT.md). loopguard.toml carries the same values; a test",
        "# (tests/calibrate.rs) fails if the two drift apart.",
    ]
    table = None
    for t, k in KEYS:
        if t != table:
            lines += ["", f"[{t}]"]
            table = t
        lines.append(f"{k} = {report['recommended'][f'{t}.{k}']}")
    return "\n".join(lines) + "\n"


def point_row(p, keys):
    return [p["settings"].get(k, "") for k in keys] + [
        f(p["precision"]),
        f(p["recall"]),
        f(p["f1"]),
        str(p["false_alarms"]),
        str(p["early_alarms"]),
        f(p["mean_delay"], 2),
    ]


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def markdown(r):
    rec, before = r["recommended"], r["before"]
    s = []
    w = s.append
    w("# Calibration: where loopguard's thresholds come from\n")
    w("Everything here is produced by [`run.sh`](run.sh) from the labelled data in `../shared/data` "
      "(see its `SOURCES.md`): `docs/calibration/run.sh` rebuilds every report, chart and number below "
      f"on a 2-core machine in about ten minutes. Model: {r['model']}.\n")
    w("## The shipped settings\n")
    rows = []
    why = {
        "detect.similarity.failure": "[failures among distractors](runs-failure/REPORT.md): the best run-level F1 within 1 point of the fewest false alarms",
        "detect.similarity.collaboration": "[requests among distractors](runs-collaboration/REPORT.md): the best run-level F1 (see below why not fewer false alarms)",
        "detect.similarity.response": "[three-response runs](runs-response/REPORT.md): the best run-level F1 within 1 point of the fewest false alarms",
        "detect.similarity.tool_call": "[healthy runs + reworded-call loops](runs-tool-calls/REPORT.md): the best run-level F1 with no false alarm the sweep can avoid",
        "detect.similarity.result": "same sweep (error outputs reworded, healthy runs)",
        "detect.repeats.tool_call": "same sweep",
    }
    for key in rec:
        changed = "" if rec[key] == before[key] else " (changed)"
        rows.append([f"`{key}`", before[key] or "–", f"**{rec[key]}**{changed}", why[key]])
    w(table(["setting", "before", "calibrated", "chosen on"], rows))
    w("\n[`recommended.toml`](recommended.toml) holds these values; [`loopguard.toml`](../../loopguard.toml) "
      "ships them, and `tests/calibrate.rs` fails if the two differ.\n")

    w("## 1. Embeddings against the lexical baselines, on labelled pairs\n")
    w("[`pairs/REPORT.md`](pairs/REPORT.md) has every number and chart. Each pair file stands for one event kind: "
      "GitBugs duplicate bug reports for **failures**, tau-bench requests of the same task for **collaboration requests**, "
      "STS-B paraphrases for **responses**. There are no labelled tool-call pairs (see Limits).\n")
    w("A pair is predicted *the same* when its score ≥ the threshold. `loopguard` is the engine's own rule — equal after "
      "normalisation always matches, texts whose numbers differ never do, otherwise the embedding cosine; `cosine` is the "
      "embedding alone; `exact`, `jaccard` (word Jaccard) and `levenshtein` are the seeds' lexical rules. Best F1 is at the "
      "threshold that maximises F1 on the pairs; the fixed rows are the seeds' own settings.\n")
    head = ["kind", "scorer", "ROC-AUC", "PR-AUC", "best-F1 threshold", "best F1", "F1 at the seed's threshold"]
    rows = []
    seed_of = {"cosine": "seed 000 (0.85)", "jaccard": "seed 004 (0.8)", "levenshtein": "seed 004 (0.8)", "exact": "equal after normalisation"}
    for kind in KINDS:
        g = r["pairs"][kind]
        for name in ("loopguard", "cosine", "exact", "jaccard", "levenshtein"):
            sc = g["scorers"][name]
            seed = sc["fixed"].get(seed_of.get(name, ""), {})
            rows.append([
                f"{kind} ({g['pairs']})" if name == "loopguard" else "",
                f"`{name}`",
                f(sc["roc_auc"]),
                f(sc["pr_auc"]),
                f(sc["best_f1_threshold"], 3) if name != "exact" else "–",
                f(sc["best_f1"]),
                f(seed.get("f1")) if seed else "–",
            ])
    w(table(head, rows))
    fa, co, re_ = (r["pairs"][k] for k in KINDS)
    w("\n- **The embedding wins everywhere.** ROC-AUC of the cosine against the best lexical rule: failures "
      f"{f(fa['scorers']['cosine']['roc_auc'])} vs {f(max(fa['scorers'][x]['roc_auc'] for x in ('jaccard', 'levenshtein', 'exact')))}, "
      f"requests {f(co['scorers']['cosine']['roc_auc'])} vs {f(max(co['scorers'][x]['roc_auc'] for x in ('jaccard', 'levenshtein', 'exact')))}, "
      f"responses {f(re_['scorers']['cosine']['roc_auc'])} vs {f(max(re_['scorers'][x]['roc_auc'] for x in ('jaccard', 'levenshtein', 'exact')))}. "
      "The seeds' lexical rules at their own thresholds (Jaccard 0.8, exact match) catch a few percent of the rewordings.\n")
    w(f"- **The numbers guard costs recall on bug reports.** {fa['ruled_out_positives']} of the {fa['positives']} duplicate "
      "bug reports can never match in loopguard because their numbers differ (versions, issue ids); that is why the `loopguard` "
      f"scorer's ROC-AUC on failures ({f(fa['scorers']['loopguard']['roc_auc'])}) is below the cosine's. For an agent's repeated "
      "failure the guard is what keeps a later page, a moving counter or a different test count apart; the runs below measure "
      "the engine with it.\n")
    w("- **Pair-level best-F1 thresholds are not what loopguard should ship.** They are "
      f"{f(fa['scorers']['loopguard']['best_f1_threshold'])} (failures), {f(co['scorers']['loopguard']['best_f1_threshold'])} "
      f"(requests) and {f(re_['scorers']['loopguard']['best_f1_threshold'])} (responses), with pair-level false-positive rates of "
      "15–20 %. A pair set has one or two negatives per positive; in a run every new event is compared with every earlier one in "
      "the window and one false match is a loop verdict, so false matches compound. The runs below measure that.\n")
    w("\nCharts: " + ", ".join(
        f"{k} [ROC](pairs/pairs-{k}-roc.svg) · [PR](pairs/pairs-{k}-pr.svg) · [cosine histogram](pairs/pairs-{k}-hist.svg) · [F1 by threshold](pairs/pairs-{k}-f1.svg)"
        for k in KINDS) + ".\n")
    w("\n![ROC, failures](pairs/pairs-failure-roc.svg) ![cosine by label, requests](pairs/pairs-collaboration-hist.svg)\n")

    w("\n## 2. Labelled runs, and how they are built\n")
    w("No labelled agent runs exist, so [`make_runs.py`](make_runs.py) builds them at run time (deterministically, in a "
      "temporary directory; nothing derived from the shared data is committed but these reports). Each loop run has a "
      "`loop_onset`, the first event that repeats an earlier one: a loop verdict before it is an *early alarm*, and the delay "
      "is counted from it.\n")
    counts = r.get("run_counts") or {}
    groups = [
        ("healthy", "the 178 healthy mini-swe-agent runs of `swe_deepseek_healthy.jsonl` as they are", "no_loop"),
        ("demos", "the 21 SWE-agent demonstrations; `eps.traj` submits the same wrong flag four times (events 19–22, onset 20)", "1 loop, 20 no_loop"),
        ("reworded_calls", "each healthy run cut after one of its tool calls with an informative output, then the same call twice more, reworded the way agents reword shell commands (a `cd /testbed &&` prefix, the other quote style, `python`/`python3`, split short flags, `| cat`), with the same output", "loop, onset at the first rewording"),
        ("error_results", "each GitBugs pair as the error output of three different commands: a, b, then `Error: ` + a", "loop when a duplicate"),
        ("failure_pairs", "each GitBugs pair (a, b) among three failures from other reports of the same project, an edit between each: d1 d2 a d3 b", "loop when a duplicate (onset at b)"),
        ("request_pairs", "each tau-bench pair among three requests of other tasks, planner → worker, a reply between each: d1 d2 a d3 b", "loop when the same task (onset at b)"),
        ("response_pairs", "each STS-B dev/test pair as three responses: a, b, then `To repeat: ` + a", "loop when a paraphrase (onset at b)"),
    ]
    w(table(["group", "runs", "built from", "label"], [[f"`{g}`", str(counts.get(g, "–")), how, lab] for g, how, lab in groups]))
    w("\nTwo details matter. The distractors put every pair into the situation the engine meets: five failures or requests "
      "in one window, ten comparisons, any one of which can raise a false alarm. And the third response or error output "
      "repeats the first *with a few words added*, not verbatim: an exact repeat takes the engine's fast path, which decides "
      "by keys alone and never compares the middle one (see Limits).\n")

    w("\n## 3. How the defaults are chosen\n")
    w("`loopguard calibrate runs` replays every run at every point of a sweep and counts, at the level of whole runs: a loop "
      "run caught at or after its onset is a true positive, a loop verdict in a `no_loop` run or before an onset a false "
      "positive. False alarms count as much as misses, so the rule is **the best run-level F1** — among the points that do "
      "not raise more false alarms than the quietest point of the sweep plus a slack:\n")
    w("- **no slack where the negatives are real**: the tool-call sweep replays the 178 healthy runs, and no setting may add a "
      "false alarm there that another setting avoids;\n"
      "- **one percentage point for failures and responses**, whose negatives are sampled pairs with label noise "
      "(SOURCES.md: adversarial negatives, some of them duplicates in truth) — below that, every step down in threshold "
      "adds as many alarms on different bugs in the same component as it gains loosely related duplicates;\n"
      "- **no limit for requests**: their sampled negatives are openers of *other* tau-bench tasks, and at high cosine they "
      "are the same request in other words (examples below). No real within-task false alarm is measured there, so a "
      "false-alarm limit would only penalise rewordings; plain best F1 is used, and the check in §5 watches the result.\n")
    w("Ties go to the earlier detection, then to the higher values (more conservative on data not seen here).\n")
    ex = r["runs"]["collaboration"].get("false_alarm_examples") or []
    if ex:
        w("False alarms at the chosen request threshold (the five requests of each run; the labelled pair is the 3rd and the 5th):\n")
        for e in ex:
            w(f"`{e['id']}`\n\n" + "\n".join(f"> {t[:160]}  " for t in e["texts"]) + "\n")

    w("\n## 4. Results per sweep\n")
    for name, sub, _ in STEPS:
        st = r["runs"][name]
        keys = [a["key"] for a in st["axes"]]
        w(f"\n### {name} — [{sub}/REPORT.md]({sub}/REPORT.md)\n")
        w(f"{st['runs']} runs ({st['loops']} loop, {st['no_loops']} no_loop). Sweep: "
          + ", ".join(f"`{a['key']}` ∈ {{{', '.join(a['values'])}}}" for a in st["axes"])
          + f"; false-alarm slack {st['false_alarm_slack']}.\n")
        for n in st["notes"]:
            w(f"\n**{n}**\n")
        rows = []
        for i, p in enumerate(st["points"]):
            row = point_row(p, keys)
            if i == st["chosen"]:
                row = [f"**{c}**" for c in row]
            rows.append(row)
        w(table([f"`{k.split('.', 1)[1]}`" for k in keys] + ["P", "R", "F1", "false alarms", "early alarms", "mean delay"], rows))
        if name == "tool calls" and st["chosen"] is not None:
            p = st["points"][st["chosen"]]
            def group_cell(g):
                parts = []
                if g["loops"]:
                    parts.append(f"{g['caught']}/{g['loops']} loops caught")
                if g["runs"] > g["loops"]:
                    parts.append(f"{g['false_alarms']}/{g['runs'] - g['loops']} false alarms")
                return f"{g['group']} " + ", ".join(parts)
            w("At the chosen point, by group: " + "; ".join(group_cell(g) for g in p["groups"]) + ".\n")
            healthy = lambda p: next((g["false_alarms"] for g in p["groups"] if g["group"] == "healthy"), None)
            by_repeats = {}
            for q in st["points"]:
                by_repeats.setdefault(q["settings"].get("detect.repeats.tool_call"), []).append(q)
            lines = []
            for rep_n, qs in sorted(by_repeats.items()):
                cells = ", ".join(
                    f"{q['settings'].get('detect.similarity.tool_call')}/{q['settings'].get('detect.similarity.result')}: {healthy(q)}"
                    for q in qs)
                lines.append(f"- `repeats.tool_call = {rep_n}` — healthy runs flagged, by `tool_call`/`result`: {cells}")
            w("How many of the 178 healthy runs each point flags (the constraint that decides):\n\n" + "\n".join(lines) + "\n")
            # Only points whose example list is complete (fewer ids than the report keeps).
            complete = [set(q["false_alarm_ids"]) for q in st["points"] if len(q.get("false_alarm_ids") or []) < 10]
            always = set.intersection(*complete) if complete else set()
            always = sorted(i for i in always if "#" not in i and not i.startswith(("error:", "sweagent/")))
            if always:
                w("The healthy run flagged at every `repeats.tool_call = 2` point, so by nothing this sweep controls: "
                  + ", ".join(f"`{i}`" for i in always) + ". It is flagged with the settings before calibration "
                  "too (a `cycle` verdict); docs/DETECTION.md's \"0 of 178\" predates the engine changes that flag it.\n")
            errs = lambda q: next(g for g in q["groups"] if g["group"] == "error_results")
            twin = next((q for q in st["points"] if q["settings"].get("detect.similarity.result") == "0.90"
                         and all(q["settings"][k] == v for k, v in p["settings"].items() if k != "detect.similarity.result")), None)
            if twin and p["settings"].get("detect.similarity.result") == "0.95":
                a, b = errs(p), errs(twin)
                w(f"`result` stays at 0.95: at 0.90 the same point catches {b['caught']} instead of {a['caught']} of the "
                  f"{a['loops']} reworded error outputs but raises {b['false_alarms']} instead of {a['false_alarms']} alarms on "
                  "non-duplicate bug reports, and this sweep allows no added false alarm. Bug reports are a poor stand-in for "
                  "tool errors, so this is the weakest-supported setting here.\n")
            first, later = st["points"][0], st["points"][1:]
            if later:
                secs = sorted(x["seconds"] for x in later)
                w(f"\nOne embedder serves the sweep: the first point took {first['seconds']:.0f} s and needed the "
                  f"model's vectors of {first['texts_embedded']} texts (embedded, or kept on disk by an earlier command); "
                  f"the {len(later)} later points took {secs[len(secs) // 2]:.0f} s each (median) and needed "
                  f"{sum(x['texts_embedded'] for x in later)} more between them.\n")
        w(f"\n![F1]({sub}/runs-f1.svg) ![false alarms]({sub}/runs-false-alarms.svg)\n")

    chk = r.get("taubench_check")
    if chk:
        w("\n## 5. Check on real conversations: tau-bench\n")
        b, a = chk["before"], chk["after"]
        new = [i for i in a["flagged_ids"] if i not in b["flagged_ids"]]
        gone = [i for i in b["flagged_ids"] if i not in a["flagged_ids"]]
        kinds = lambda k: ", ".join(f"`{x}` {n}" for x, n in sorted(k.items()))
        text = (f"The 200 recorded tau-bench airline conversations are unlabelled. `loopguard score` flags {b['flagged']} of them "
                f"with the settings before calibration ([`before.toml`](before.toml)) and **{a['flagged']}** with the calibrated ones "
                f"(kind of the first loop verdict before: {kinds(b['first_kinds'])}; after: {kinds(a['first_kinds'])}).")
        if new:
            text += f" Newly flagged: {', '.join('`' + i + '`' for i in new)}."
        if gone:
            text += f" No longer flagged: {', '.join('`' + i + '`' for i in gone)}."
        w(text + " [docs/DETECTION.md](../DETECTION.md) reads the runs flagged before by hand; a newly flagged run is worth reading the same way before trusting the response threshold further.\n")

    w("\n## Limits\n")
    w("- **No labelled tool-call or tool-result pairs exist.** `tool_call` is chosen on synthetic reworded-call loops inside "
      "real healthy runs, `result` on bug reports used as error outputs; both are checked against the real healthy runs, which "
      "is where a tool-call false alarm would show.\n"
      "- **The pair sets define *the same* differently from the engine.** Duplicate bug reports are rewordings by different "
      "people, looser than an agent's repeated failure; tau-bench labels a request by its task, stricter than the same request "
      "reworded. Both are said where they decide something.\n"
      "- **The exact fast path does not ask the model.** When a new event equals an earlier one by its keys, it is not "
      "compared with the window by cosine; it inherits the identity of the rewordings already matched to what it equals "
      "(*a, b (reworded), a* is three occurrences of one thing), but a rewording the engine never matched stays apart. "
      "This is engine behaviour (src/detect/matching.rs, `inherit_identity`), reported rather than calibrated around.\n"
      "- The healthy runs all come from one agent family (mini-swe-agent with DeepSeek models); other agents' legitimate "
      "repetition may differ.\n")
    # One block per w() call, a blank line between blocks (Markdown needs it around tables).
    return "\n\n".join(x.strip("\n") for x in s) + "\n"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    work = Path(sys.argv[2]) if len(sys.argv) == 3 else None
    report = collect(out, work)
    (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "recommended.toml").write_text(snippet(report), encoding="utf-8")
    (out / "REPORT.md").write_text(markdown(report), encoding="utf-8")
    print(json.dumps(report["recommended"]))


if __name__ == "__main__":
    main()
