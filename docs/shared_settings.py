#!/usr/bin/env python3
"""Does one value of a shared setting serve every rule reading it? Regenerates the table of
docs/DETECTION.md "Settings shared by rules" (between the `shared-settings:` markers).

    python3 docs/shared_settings.py [DATA_DIR]      (DATA_DIR defaults to ../shared/data)

For every setting that two rules or more may have their own value for (`loopguard rules --json`:
`own_settings`), and for each of those rules, one `loopguard eval` of every labelled set (and the
InterCode halves when INTERCODE=DIR is set) with the three control files sweeps that rule's own
section (`detect.rule.<id>.<setting>`) over the shared default and the values around it, the
other rules keeping the default. A value "serves the rule better" when it catches at least as many
loops (on time, and at all), raises no more false alarms and flags no more control runs, and is
better in one of them. About 15 minutes on 2 cores (the model's vectors come from the disk cache after the first
run). LOOPGUARD_* environment variables are ignored, so the result depends on the data only.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT.parent / "shared" / "data").resolve()
RUNS = DATA / "runs"
LG = ROOT / "target" / "release" / "loopguard"
ENV = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}

subprocess.run([sys.executable, ROOT / "models" / "fetch.py"], check=True, cwd=ROOT, env=ENV)
subprocess.run(["cargo", "build", "--release", "--quiet"], check=True, cwd=ROOT, env=ENV)

labelled = [RUNS / f for f in (
    "swe_agent_labelled_dev.jsonl",
    "react_hotpotqa_labelled_dev.jsonl",
    "chatdev_collab_labelled_dev.jsonl",
    "autogen_labelled_dev.jsonl",
    "aider_labelled_dev.jsonl",
)]
if os.environ.get("INTERCODE"):
    ic = pathlib.Path(os.environ["INTERCODE"])
    labelled += [ic / "intercode_labelled_half_a.jsonl", ic / "intercode_labelled_half_b.jsonl"]
controls = [RUNS / f for f in (
    "swe_deepseek_healthy.jsonl",
    "taubench_airline.jsonl",
    "sweagent_demos.jsonl",
)]

rules = [json.loads(line) for line in subprocess.run(
    [LG, "rules", "--json"], check=True, capture_output=True, text=True, env=ENV
).stdout.splitlines()]
reference = tomllib.loads((ROOT / "loopguard.toml").read_text())


def default(key):
    value = reference
    for part in key.split("."):
        value = value[part]
    return value


def around(value):
    if isinstance(value, bool):
        return [value, not value]
    if isinstance(value, int):
        return sorted({max(value + d, 1) for d in (-2, -1, 0, 1, 2)})
    return sorted({round(value + d, 2) for d in (-0.06, -0.03, 0, 0.03, 0.06) if value + d < 1})


def toml_value(v):
    return str(v).lower() if isinstance(v, bool) else str(v)


owners = {}
for rule in rules:
    for key in rule["own_settings"]:
        if not key.endswith(".*"):
            owners.setdefault(key, []).append(rule["id"])

rows = []
with tempfile.TemporaryDirectory() as tmp:
    for key, ids in sorted(owners.items()):
        if len(ids) < 2:
            continue
        shared = default(key)
        for rule_id in ids:
            axis = f"detect.rule.{rule_id}.{key.removeprefix('detect.')}"
            values, refused = [], []
            for v in around(shared):
                # A value the checks refuse for this section (beyond another setting's limit) is
                # reported, not swept: one refused point would stop the whole sweep.
                section = pathlib.Path(tmp) / "section.toml"
                section.write_text(f"[detect.rule.{rule_id}]\n{key.removeprefix('detect.')} = {toml_value(v)}\n")
                check = subprocess.run([LG, "config", "--config", section], capture_output=True, text=True, env=ENV)
                (values if check.returncode == 0 else refused).append(v)
            out = pathlib.Path(tmp) / "report.json"
            cmd = [LG, "eval", *labelled, "--log", "error"]
            for c in controls:
                cmd += ["--control", c]
            cmd += ["--sweep", f"{axis}={','.join(toml_value(v) for v in values)}", "--json", out]
            done = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
            if done.returncode != 0:
                sys.exit(f"{' '.join(map(str, cmd))}:\n{done.stderr}")
            points = json.loads(out.read_text())["points"]
            figures = {}
            for p in points:
                m = p["metrics"]
                figures[p["settings"][0]["value"]] = (
                    m["on_time"], m["caught"], m["false_alarms"], sum(p["controls_flagged"]),
                )
            base = figures[toml_value(shared)]
            better = [
                v for v, f in figures.items()
                if f != base and f[0] >= base[0] and f[1] >= base[1] and f[2] <= base[2] and f[3] <= base[3]
            ]
            rows.append((key, rule_id, shared, figures, better, refused))
            print(f"{key} {rule_id}: {figures} better: {better}", file=sys.stderr, flush=True)

table = [
    "| setting (shared value) | rule | on time / caught / false alarms / control runs flagged, at each of the rule's own values | own value that serves it better |",
    "|---|---|---|---|",
]
for key, rule_id, shared, figures, better, refused in rows:
    cells = "; ".join(
        ("**" if v == toml_value(shared) else "") + f"{v}: {f[0]}/{f[1]}/{f[2]}/{f[3]}"
        + ("**" if v == toml_value(shared) else "")
        for v, f in figures.items()
    ) + "".join(f"; {toml_value(v)}: refused" for v in refused)
    table.append(f"| `{key}` ({toml_value(shared)}) | `{rule_id}` | {cells} | {', '.join(better) or 'none'} |")
print("\n".join(table))

doc = ROOT / "docs" / "DETECTION.md"
text = doc.read_text()
begin = "<!-- shared-settings:begin (docs/shared_settings.py writes this table) -->\n\n"
start = text.index(begin) + len(begin)
stop = text.index("<!-- shared-settings:end -->", start)
doc.write_text(text[:start] + "\n".join(table) + "\n\n" + text[stop:])
