#!/usr/bin/env python3
"""Convert InterCode agent runs (princeton-nlp/intercode, MIT) to loopguard `score` input.

InterCode (Yang et al., NeurIPS 2023 Datasets & Benchmarks) published the logs of its own experiments
under `data/results/`: LLM agents solving tasks by issuing commands to a Docker-backed environment
and reading back what the command printed.  We convert three of its environments:

  * bash  - NL2Bash tasks on four prepared file systems (fs_1..fs_4), "Try Again" multi-turn agents
            (7 models, up to 10 turns) and a ReAct agent (thought + action, up to 10 turns);
  * ctf   - picoCTF capture-the-flag tasks solved with bash/python by GPT-4 (up to 10 turns);
  * sql   - Spider questions answered with MySQL queries, multi-turn agents (7 models) and ReAct.

Mapping (one run = one task episode of one agent configuration):
  * the task query given to the agent      -> collaboration user -> agent   (index_map -1)
  * a ReAct thought i                      -> response                     (index_map i)
  * action i + observation i               -> tool_call                    (index_map i)
      bash / ctf command   tool "bash"   args {"command": ...}
      sql query            tool "sql"    args {"query": ...}
      a ReAct action that is neither execute[...] nor submit (rejected by the harness)
                           tool "bash"/"sql" args {"action": <the raw action text>}
      `submit [<flag>]`    tool "submit" args {} or {"flag": ...}
      `skip` (ctf)         tool "skip"   args {}
    result.output = the recorded observation; for the multi-turn bash/sql agents, whose prompt showed
    the reward after every command ("Output: ...\\nReward: r"), the reward is appended as a last line
    "Reward: r" (the CTF and ReAct agents were not shown it, so it is not added there).
    result.is_error = the recording's `valid_action` == false (for bash/ctf: the command's exit code
    was non-zero or it timed out / was malformed; for sql: "Error executing query"; also an agent
    reply without code, answered by the harness's "No ... code was found" message).  Where the
    recording has no usable `valid_action` (ReAct submits, where it is stale), it is guessed from a
    few unambiguous error phrases.
  Dropped, as not the agent's doing: "blocked" placeholder actions (the LLM API call failed, nothing
  was executed) and the ReAct harness's forced final step ("EXCEEDED MAX TURNS: submit").
  Every text is cut at 4,000 characters.

Usage:  python3 convert.py /path/to/intercode [--out DIR] [--seed N]
        (the path may be a checkout or a bare git directory, e.g. the fetched snapshot
         /work/.mirror/princeton-nlp+intercode/repo; files are read from its HEAD commit)

Writes DIR/intercode_all.jsonl, DIR/intercode_half_a.jsonl, DIR/intercode_half_b.jsonl and
DIR/intercode_manifest.jsonl (per-run facts used for sampling: not for labellers).
Standard library only.
"""
import argparse
import collections
import hashlib
import json
import os
import random
import re
import subprocess
import sys

REPO_NAME = "princeton-nlp/intercode"
FAMILY = "intercode"
MAXLEN = 4000
DEFAULT_SEED = 20261128

BASH_MT_MODELS = ["gpt-4", "gpt-3.5", "text-davinci-003", "chat-bison-001", "text-bison-001",
                  "starchat", "vicuna"]
SQL_MT_MODELS = ["gpt-4", "gpt-3.5", "text-davinci-003", "chat-bison-001", "text-bison-001",
                 "starchat", "vicuna"]

# Per half: (env, config) -> (n_repetitive, n_not_repetitive)
QUOTA_BASH = (3, 3)   # each of the 8 bash configs
QUOTA_CTF = (10, 10)  # the single ctf config
QUOTA_SQL = (1, 1)    # each of the 8 sql configs

ERROR_RE = re.compile(
    r"(command not found|No such file or directory|syntax error|Traceback \(most recent call last\)|"
    r"Error executing query|Malformed command|Command timed out|Permission denied|"
    r"did not contain \w+ code|No \w+ code was found)", re.I)


# ----------------------------------------------------------------------------- reading the repo

class Repo:
    def __init__(self, path):
        self.path = path
        gd = os.path.join(path, ".git")
        self.git_dir = gd if os.path.isdir(gd) else path
        try:
            self.commit = self._git("rev-parse", "HEAD").strip()
        except Exception as e:  # noqa: BLE001
            sys.exit(f"cannot read git HEAD of {path}: {e}")

    def _git(self, *args):
        out = subprocess.run(["git", "--git-dir", self.git_dir, *args], capture_output=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr.decode("utf-8", "replace").strip())
        return out.stdout.decode("utf-8")

    def read_json(self, rel):
        try:
            return json.loads(self._git("show", f"HEAD:{rel}"))
        except Exception as e:  # noqa: BLE001
            print(f"warning: {rel}: {e}", file=sys.stderr)
            return None

    def ls(self, prefix):
        return self._git("ls-tree", "-r", "--name-only", "HEAD", prefix).split()


# ----------------------------------------------------------------------------- conversion

def cut(s):
    s = "" if s is None else str(s)
    return s if len(s) <= MAXLEN else s[:MAXLEN]


def fmt_reward(r):
    return f"{r}"


def parse_action(env, style, raw):
    """-> (tool, args, is_code) for one recorded action string."""
    a = raw if isinstance(raw, str) else json.dumps(raw)
    s = a.strip()
    low = s.lower()
    if style == "react":
        m = re.match(r"^execute\[(.*)\]\s*$", s, re.S)
        if m:
            return ("sql" if env == "sql" else "bash"), ({"query": cut(m.group(1))} if env == "sql"
                                                          else {"command": cut(m.group(1))}), True
        if low == "submit" or low.startswith("submit"):
            return "submit", {}, True
        # anything else was rejected by the harness ("did not contain ... code"): keep the raw
        # action under "action" so that it is not confused with a valid execute[...] of the same text
        return ("sql" if env == "sql" else "bash"), {"action": cut(a)}, False
    if low == "submit":
        return "submit", {}, True
    if low.startswith("submit "):
        return "submit", {"flag": cut(s[len("submit "):].strip())}, True
    if low == "skip":
        return "skip", {}, True
    if env == "sql":
        return "sql", {"query": cut(a)}, True
    return "bash", {"command": cut(a)}, True


def convert_run(env, style, model, part, key, rec, rel, commit):
    th = rec.get("turn_history") or {}
    actions = th.get("actions") or []
    obs = th.get("observations") or []
    rewards = th.get("rewards") or []
    valid = th.get("valid_action") or []
    thoughts = th.get("thoughts") or []
    show_reward = style == "multiturn" and env in ("bash", "sql")

    events, imap = [], []
    q = rec.get("query")
    if isinstance(q, str) and q.strip():
        events.append({"type": "collaboration", "from_agent": "user", "to_agent": "agent",
                       "request": cut(q)})
        imap.append(-1)
    dropped = []
    for i, raw in enumerate(actions):
        thought = thoughts[i] if i < len(thoughts) else None
        if isinstance(raw, str) and raw == "blocked" and i >= len(obs):
            dropped.append(i)
            continue
        if style == "react" and isinstance(thought, str) and thought.startswith("EXCEEDED MAX TURNS"):
            dropped.append(i)
            continue
        if i >= len(obs):
            dropped.append(i)
            continue
        if isinstance(thought, str) and thought.strip():
            events.append({"type": "response", "text": cut(thought)})
            imap.append(i)
        tool, args, is_code = parse_action(env, style, raw)
        o = obs[i]
        o = o if isinstance(o, str) else json.dumps(o)
        out = o
        r = rewards[i] if i < len(rewards) else None
        if show_reward and r is not None:
            out = (o if (o == "" or o.endswith("\n")) else o + "\n") + "Reward: " + fmt_reward(r)
        v = valid[i] if i < len(valid) else None
        if style == "react" and tool == "submit":
            v = None  # the recorded flag is left over from the previous command
        if v is False or not is_code:
            is_err = True
        elif v is True:
            is_err = False
        else:
            is_err = bool(ERROR_RE.search(o[:2000]))
        events.append({"type": "tool_call", "tool": tool, "args": args,
                       "result": {"output": cut(out), "is_error": is_err}})
        imap.append(i)

    rid = f"{FAMILY}/{env}/{style}/{model}/{part}/{key}" if part else f"{FAMILY}/{env}/{style}/{model}/{key}"
    run = {"id": rid, "source": f"{REPO_NAME}@{commit}:{rel}#{key}", "events": events, "index_map": imap}

    # facts for sampling (from what was converted)
    calls = [e for e in events if e["type"] == "tool_call"]
    act_sig = [json.dumps([e["tool"], e["args"]], sort_keys=True) for e in calls]
    obs_sig = [obs[imap[k]] if isinstance(obs[imap[k]], str) else json.dumps(obs[imap[k]])
               for k, e in enumerate(events) if e["type"] == "tool_call"]
    ca, co = collections.Counter(act_sig), collections.Counter(obs_sig)
    reworded = any(n >= 3 and len({act_sig[j] for j, x in enumerate(obs_sig) if x == o_}) >= 2
                   for o_, n in co.items())
    summ = rec.get("summary") or {}
    facts = {"id": rid, "env": env, "style": style, "model": model, "part": part, "key": key,
             "query": q, "n_calls": len(calls), "max_same_action": max(ca.values(), default=0),
             "max_same_obs": max(co.values(), default=0), "same_obs_diff_actions": reworded,
             "n_errors": sum(e["result"]["is_error"] for e in calls), "dropped_steps": dropped,
             "max_reward": summ.get("max_reward")}
    facts["repetitive"] = facts["max_same_action"] >= 3 or facts["max_same_obs"] >= 3
    return run, facts


def load_runs(repo):
    runs = []   # (run, facts, group)
    spider = repo.read_json("data/sql/spider/ic_spider_dev.json") or []

    def add(rel, env, style, model, part, group_of):
        d = repo.read_json(rel)
        if not isinstance(d, dict):
            return
        for key in sorted(d, key=lambda k: (len(k), k)):
            rec = d[key]
            if not isinstance(rec, dict) or not (rec.get("turn_history") or {}).get("actions"):
                continue
            run, facts = convert_run(env, style, model, part, key, rec, rel, repo.commit)
            if facts["n_calls"] == 0:
                continue
            facts["config"] = f"{env}/{style}/{model}"
            facts["group"] = group_of(key, rec)
            runs.append((run, facts))

    files = set(repo.ls("data/results"))
    for fs in (1, 2, 3, 4):
        for m in BASH_MT_MODELS:
            rel = f"data/results/bash/{m}/ic_bash_multiturn_{m}_10_turns_fs_{fs}.json"
            if rel in files:
                add(rel, "bash", "multiturn", m, f"fs_{fs}", lambda k, r, fs=fs: f"bash/fs_{fs}")
        rel = f"data/results/bash/gpt-3.5/ic_bash_react_10_turns_fs_{fs}.json"
        if rel in files:
            add(rel, "bash", "react", "gpt-3.5", f"fs_{fs}", lambda k, r, fs=fs: f"bash/fs_{fs}")
    def ctf_group(k, r):
        # picoCTF comes in series of near-identical tasks ("Can you crack the password ..." x5,
        # "This vault uses ..." x5, "What integer does this program print ..." x4): keep a series
        # in one half by grouping on the first three words of the task text.
        words = re.findall(r"[a-z0-9]+", (r.get("query") or k).lower())[:3]
        return "ctf/" + "_".join(words)

    add("data/results/ctf/ic_ctf_multiturn_gpt-4_10_turns.json", "ctf", "multiturn", "gpt-4", "",
        ctf_group)

    def sql_group(k, r):
        try:
            ex = spider[int(k)]
            if ex.get("query", "").strip() == (r.get("query") or "").strip():
                return f"sql/db_{ex['db']}"
        except (ValueError, IndexError, KeyError, AttributeError):
            pass
        return "sql/query_" + hashlib.sha256((r.get("query") or k).encode()).hexdigest()[:12]

    for m in SQL_MT_MODELS:
        add(f"data/results/sql/{m}/ic_sql_multiturn_{m}_10_turns.json", "sql", "multiturn", m, "",
            sql_group)
    add("data/results/sql/gpt-3.5/ic_sql_react_10_turns.json", "sql", "react", "gpt-3.5", "",
        sql_group)
    return runs


# ----------------------------------------------------------------------------- sampling and split

def h(seed, s):
    return hashlib.sha256(f"{seed}:{s}".encode()).hexdigest()


def assign_halves(runs, seed):
    """Whole groups (file system / CTF task / database) go to one half; greedy balance per env."""
    by_env = collections.defaultdict(lambda: collections.defaultdict(list))
    for run, f in runs:
        by_env[f["env"]][f["group"]].append(f)
    half_of = {}
    for env, groups in by_env.items():
        tot = {"a": [0, 0], "b": [0, 0]}
        # biggest groups first so that the greedy balance works, ties broken by hash
        order = sorted(groups, key=lambda g: (-len(groups[g]), h(seed, g)))
        for g in order:
            rep = sum(f["repetitive"] for f in groups[g])
            non = len(groups[g]) - rep
            score = {x: (tot[x][0] + rep) ** 2 + (tot[x][1] + non) ** 2 - tot[x][0] ** 2 - tot[x][1] ** 2
                     for x in "ab"}
            pref = "a" if int(h(seed, g), 16) % 2 else "b"
            x = min("ab", key=lambda x: (score[x], x != pref))
            half_of[g] = x
            tot[x][0] += rep
            tot[x][1] += non
    return half_of


def sample(runs, half_of, seed):
    rng = random.Random(seed)
    quotas = {}
    for m in BASH_MT_MODELS:
        quotas[f"bash/multiturn/{m}"] = QUOTA_BASH
    quotas["bash/react/gpt-3.5"] = QUOTA_BASH
    quotas["ctf/multiturn/gpt-4"] = QUOTA_CTF
    for m in SQL_MT_MODELS:
        quotas[f"sql/multiturn/{m}"] = QUOTA_SQL
    quotas["sql/react/gpt-3.5"] = QUOTA_SQL

    chosen = {"a": [], "b": []}
    for half in "ab":
        task_uses = collections.Counter()
        pool = [(r, f) for r, f in runs if half_of[f["group"]] == half]
        for cfg in sorted(quotas):
            nrep, nnon = quotas[cfg]
            cands = [(r, f) for r, f in pool if f["config"] == cfg]
            cands.sort(key=lambda rf: h(seed, rf[1]["id"]))
            rng.shuffle(cands)

            def take(items, n):
                out = []
                for r, f in items:
                    if len(out) >= n:
                        break
                    tk = (f["env"], f["part"], f["key"])
                    if task_uses[tk] >= 2 or any(f["id"] == g["id"] for _, g in out):
                        continue
                    out.append((r, f))
                    task_uses[tk] += 1
                return out

            rep = [rf for rf in cands if rf[1]["repetitive"]]
            rew = [rf for rf in rep if rf[1]["same_obs_diff_actions"]]
            exa = [rf for rf in rep if not rf[1]["same_obs_diff_actions"]]
            got = take(rew, (nrep + 1) // 2)
            got += take([rf for rf in exa + rew if rf not in got], nrep - len(got))
            non = [rf for rf in cands if not rf[1]["repetitive"]]
            non_long = [rf for rf in non if rf[1]["n_calls"] >= 3]
            got2 = take(non_long, nnon)
            got2 += take([rf for rf in non if rf not in got2 and rf[1]["n_calls"] >= 2], nnon - len(got2))
            if len(got) < nrep or len(got2) < nnon:
                print(f"note: half {half} {cfg}: repetitive {len(got)}/{nrep}, "
                      f"not repetitive {len(got2)}/{nnon}", file=sys.stderr)
            chosen[half] += got + got2
    for half in "ab":
        chosen[half].sort(key=lambda rf: rf[1]["id"])
    return chosen


# ----------------------------------------------------------------------------- checks

def check_run(run):
    assert isinstance(run["id"], str) and run["id"]
    assert len(run["events"]) == len(run["index_map"])
    for e in run["events"]:
        t = e["type"]
        if t == "tool_call":
            assert isinstance(e["tool"], str) and e["tool"]
            assert "args" in e
            json.dumps(e["args"])
            res = e.get("result")
            if res is not None:
                assert isinstance(res["output"], (str, dict, list))
                assert isinstance(res["is_error"], bool)
                if isinstance(res["output"], str):
                    assert len(res["output"]) <= MAXLEN
        elif t == "response":
            assert isinstance(e["text"], str) and e["text"] and len(e["text"]) <= MAXLEN
        elif t == "collaboration":
            for k in ("from_agent", "to_agent", "request"):
                assert isinstance(e[k], str) and e[k] and len(e[k]) <= 65536
        else:
            raise AssertionError(f"unexpected event type {t}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", help="path to a checkout or bare git dir of princeton-nlp/intercode")
    ap.add_argument("--out", required=True, help="where the converted runs go (never the repository: they are third-party data)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    a = ap.parse_args()

    repo = Repo(a.repo)
    runs = load_runs(repo)
    ids = [r["id"] for r, _ in runs]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for r, _ in runs:
        check_run(r)
    half_of = assign_halves(runs, a.seed)
    chosen = sample(runs, half_of, a.seed)

    os.makedirs(a.out, exist_ok=True)

    def write(name, items):
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as fp:
            for r, _ in items:
                fp.write(json.dumps(r, ensure_ascii=False) + "\n")

    allr = sorted(chosen["a"] + chosen["b"], key=lambda rf: rf[1]["id"])
    write(f"{FAMILY}_all.jsonl", allr)
    write(f"{FAMILY}_half_a.jsonl", chosen["a"])
    write(f"{FAMILY}_half_b.jsonl", chosen["b"])
    with open(os.path.join(a.out, f"{FAMILY}_manifest.jsonl"), "w", encoding="utf-8") as fp:
        for half in "ab":
            for _, f in chosen[half]:
                g = dict(f)
                g["half"] = half
                g.pop("query", None)
                g.pop("max_reward", None)
                fp.write(json.dumps(g) + "\n")

    print(f"commit {repo.commit}; converted {len(runs)} runs available; wrote {len(allr)} "
          f"(half a {len(chosen['a'])}, half b {len(chosen['b'])})")
    for half in "ab":
        c = collections.Counter((f["env"], f["repetitive"]) for _, f in chosen[half])
        ev = sum(len(r["events"]) for r, _ in chosen[half])
        groups = sorted({f["group"] for _, f in chosen[half] if f["env"] != "ctf"})
        print(f"half {half}: {dict(sorted(c.items()))} events={ev} groups(non-ctf)={groups}")


if __name__ == "__main__":
    main()
