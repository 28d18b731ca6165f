#!/usr/bin/env python3
"""The HTTP side of .ci/deploy.sh: what a running container, the compose stack or the kube-played
pod must answer. Standard library only (CI has python3 for models/fetch.py).

Each subcommand prints one `ok: ...` line per thing it checked and exits 1 with `FAIL: ...` on
the first thing that is wrong. State a later step compares against is written to a JSON file.

    deploy_checks.py ready URL [SECONDS [REPLICAS]]
    deploy_checks.py reworded-loop URL TASK LOOPGUARD_BIN        # the fixture's reworded failures
    deploy_checks.py save-task URL TASK FILE                     # the task's state, for later
    deploy_checks.py same-task URL TASK FILE                     # still the saved state; then one more event
    deploy_checks.py alternating URL TASK EVENTS                 # through nginx: both replicas, one state
    deploy_checks.py kill-replica URL TASK EVENTS -- COMMAND...  # COMMAND kills a replica mid-stream
    deploy_checks.py probes URL MANIFEST CONTAINER               # the manifest's httpGet probes answer 200
    deploy_checks.py pod-of STATEFULSET                          # its pod 0 as a Pod, on stdout
    deploy_checks.py pod-security PODMAN_CONTAINER MANIFEST CONTAINER  # runs as the manifest says

pod-of, probes and pod-security read YAML: run them with PyYAML (.ci/deploy-requirements.txt).
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE_RUNS = os.path.join(HERE, "..", "tests", "fixtures", "runs.jsonl")
# The fixture run whose failures repeat one error in other words (tests/cli.rs scores it too).
REWORDED_RUN = "reworded-failure-loop"


class Failed(Exception):
    pass


def ok(what):
    print(f"ok: {what}", flush=True)


def request(url, method="GET", body=None, timeout=30):
    """(status, headers, parsed JSON or text) of one request; network errors are status 0."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, headers, raw = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        status, headers, raw = e.code, e.headers, e.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, {}, str(e)
    text = raw.decode(errors="replace")
    try:
        return status, headers, json.loads(text)
    except ValueError:
        return status, headers, text


def expect(status, body, want, what):
    if status != want:
        raise Failed(f"{what}: HTTP {status} (wanted {want}): {body}")


# Events refused with 503 and sent again, over the run: printed, so that a replica that keeps
# refusing work it says it is ready for shows in the log.
REFUSED = []


def post_event(base, task, event, timeout=30):
    """POST one event as a client should: a 503 applied nothing (the model still loading, or the
    store unavailable for a moment), so it is sent again after its Retry-After, for up to ~25 s."""
    for _ in range(100):
        status, headers, verdict = request(base + "/v1/evaluate", "POST", envelope(task, event),
                                           timeout=timeout)
        if status != 503:
            return status, headers, verdict
        REFUSED.append((task, verdict))
        time.sleep(min(float(headers.get("Retry-After") or 1), 1.0) / 4)
    return status, headers, verdict


def refused_note():
    if not REFUSED:
        return ""
    reasons = sorted({v.get("message", str(v)) if isinstance(v, dict) else str(v)
                      for _, v in REFUSED})
    return f" ({len(REFUSED)} answers 503 and sent again: {'; '.join(reasons)})"


def task_path(task):
    return "/v1/tasks/" + urllib.parse.quote(task, safe="")


def envelope(task, event):
    return {"task_id": task, "agent_id": "deploy-check", "event": event}


# Behind the proxy, how long /readyz must have been 200 without a break: longer than nginx's
# fail_timeout (deploy/compose/nginx.conf), for which it keeps a replica it could not reach out.
PROXY_SETTLE_SECS = 6


def ready(base, seconds=120, replicas=1):
    """Wait until /readyz is 200; behind the proxy, from REPLICAS different replicas, and
    without a break for PROXY_SETTLE_SECS (replicas that started before PostgreSQL listen only
    once it answers, and nginx keeps one it was refused by out for a while)."""
    deadline = time.monotonic() + float(seconds)
    replicas = int(replicas)
    settle = 0 if replicas == 1 else PROXY_SETTLE_SECS
    last, answered, since = None, {}, time.monotonic()
    while time.monotonic() < deadline:
        status, headers, body = request(base + "/readyz", timeout=5)
        if status == 200:
            answered[upstream(headers)] = body
            if len(answered) >= replicas and time.monotonic() - since >= settle:
                who = "" if replicas == 1 else f" from {sorted(answered)} for {settle} s"
                ok(f"{base}/readyz is 200{who} ({body})")
                return
            time.sleep(0.1)
        else:
            answered, since = {}, time.monotonic()
            last = (status, upstream(headers), body)
            time.sleep(0.5)
    raise Failed(f"{base}/readyz not 200 from {replicas} replica(s) within {seconds} s; "
                 f"ready: {sorted(map(str, answered))}; last other answer: {last}")


def fixture_run(run_id):
    with open(FIXTURE_RUNS) as f:
        for line in f:
            run = json.loads(line)
            if run["id"] == run_id:
                return run
    raise Failed(f"no run {run_id!r} in {FIXTURE_RUNS}")


def reworded_loop(base, task, loopguard_bin):
    """Post the fixture's reworded failure loop over HTTP: the container must find the loop, and
    decide every event as the same binary's `loopguard score` does on the host."""
    run = fixture_run(REWORDED_RUN)
    scored = subprocess.run(
        [loopguard_bin, "score", "-"],
        input=json.dumps(run) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    want = json.loads(scored.stdout)["verdicts"]
    got = []
    for i, event in enumerate(run["events"]):
        status, _, verdict = post_event(base, task, event)
        expect(status, verdict, 200, f"event {i} of {REWORDED_RUN}")
        got.append(verdict)
    fields = ("loop", "kind", "counted", "loop_count")
    for i, (g, w) in enumerate(zip(got, want)):
        for field in fields:
            if g.get(field) != w.get(field):
                raise Failed(f"event {i}: {field} is {g.get(field)!r} over HTTP, "
                             f"{w.get(field)!r} from `loopguard score`")
        if g["action"]["type"] != w["action"]["type"]:
            raise Failed(f"event {i}: action {g['action']['type']} over HTTP, "
                         f"{w['action']['type']} from `loopguard score`")
    loops = [(i, v["kind"], v.get("similarity")) for i, v in enumerate(got) if v["loop"]]
    if not loops:
        raise Failed(f"no loop found in {REWORDED_RUN}: {[v['kind'] for v in got]}")
    first, kind, similarity = loops[0]
    if similarity is None:
        raise Failed(f"the first loop (event {first}, {kind}) has no cosine similarity: "
                     "the reworded repeat was not decided by the model")
    ok(f"reworded failure loop found at event {first} ({kind}, cosine {similarity:.3f}); "
       f"actions {[v['action']['type'] for v in got]}, as `loopguard score` decides them")


def task_state(base, task):
    status, _, view = request(base + task_path(task))
    expect(status, view, 200, f"GET {task_path(task)}")
    return view


# What identifies a task's state; `updated_at` and the like are compared through these.
STATE_FIELDS = ("events_total", "loop_count", "pivot_count", "status", "kind_counts", "window")


def state_of(view):
    return {k: view.get(k) for k in STATE_FIELDS}


def save_task(base, task, path):
    view = task_state(base, task)
    with open(path, "w") as f:
        json.dump(view, f)
    ok(f"task {task}: {view['events_total']} events, loop counter {view['loop_count']}, "
       f"status {view['status']} saved")


def same_task(base, task, path):
    with open(path) as f:
        before = json.load(f)
    after = task_state(base, task)
    if state_of(after) != state_of(before):
        raise Failed(f"task {task} changed across the restart:\n  before {state_of(before)}\n"
                     f"  after  {state_of(after)}")
    ok(f"task {task} is as it was: {after['events_total']} events, loop counter "
       f"{after['loop_count']}")
    # The restored state is the one new events build on: the next repeat lands after the saved
    # events, on the saved loop counter, pivots and status (the fixture's loop ends paused, so it
    # is answered "paused" rather than starting afresh).
    run = fixture_run(REWORDED_RUN)
    status, _, verdict = post_event(base, task, run["events"][-1])
    expect(status, verdict, 200, "the event after the restart")
    # seqs count a task's events from 1.
    if verdict["seq"] != before["events_total"] + 1:
        raise Failed(f"the event after the restart got seq {verdict['seq']}, wanted "
                     f"{before['events_total'] + 1} (the next after {before['events_total']})")
    for field in ("status", "pivot_count"):
        if verdict[field] != before[field]:
            raise Failed(f"the repeat after the restart has {field} {verdict[field]!r}, the "
                         f"restored task {before[field]!r}: {verdict}")
    if verdict["loop_count"] < before["loop_count"]:
        raise Failed(f"the repeat after the restart has loop counter {verdict['loop_count']}, "
                     f"below the restored {before['loop_count']}: {verdict}")
    ok(f"the next repeat continues it: seq {verdict['seq']}, loop counter "
       f"{verdict['loop_count']}, status {verdict['status']}, {verdict['action']['type']}")


def work_event(i):
    """A distinct step of work (no loop): each answer's seq says where it landed."""
    return {"type": "tool_call", "tool": "read_file",
            "args": {"path": f"src/module_{i}.rs"},
            "result": {"output": f"contents of module {i}", "is_error": False}}


def upstream(headers):
    return headers.get("X-Loopguard-Upstream") if headers else None


def alternating(base, task, events):
    """Post a task's events through the proxy: they must reach both replicas, and every answer
    and both replicas' view of the task must be one sequence."""
    events = int(events)
    seqs, replicas = [], []
    for i in range(events):
        status, headers, verdict = post_event(base, task, work_event(i))
        expect(status, verdict, 200, f"event {i}")
        seqs.append(verdict["seq"])
        replicas.append(upstream(headers))
    if None in replicas:
        raise Failed("the proxy's answers do not say which replica served them "
                     "(X-Loopguard-Upstream; deploy/compose/nginx.conf)")
    served = sorted(set(replicas))
    if len(served) < 2:
        raise Failed(f"all {events} events went to {served}: the proxy did not alternate")
    if seqs != list(range(seqs[0], seqs[0] + events)):
        raise Failed(f"seqs are not one sequence across replicas: {seqs}")
    ok(f"{events} events of task {task} alternated over {served} "
       f"({sum(r == served[0] for r in replicas)} and {sum(r == served[1] for r in replicas)}); "
       f"seqs {seqs[0]}..{seqs[-1]} in order")
    views = {}
    for _ in range(8):
        status, headers, view = request(base + task_path(task))
        expect(status, view, 200, f"GET {task_path(task)}")
        views.setdefault(upstream(headers), []).append(state_of(view))
    if len(views) < 2:
        raise Failed(f"the task was read from {list(views)} only")
    states = [s for vs in views.values() for s in vs]
    if any(s != states[0] for s in states):
        raise Failed(f"the replicas disagree about task {task}: {views}")
    if states[0]["events_total"] != events:
        raise Failed(f"task {task} holds {states[0]['events_total']} events, {events} were posted")
    ok(f"both replicas show one state of task {task}: {events} events")


def kill_replica(base, task, events, command):
    """Post events one after another through the proxy while COMMAND kills a replica: every
    answered event must be in the task afterwards, in order, and the proxy must keep answering."""
    events = int(events)
    acked, unanswered, errors = [], 0, []

    def kill():
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            errors.append(f"{' '.join(command)}: exit {result.returncode}: {result.stderr}")

    killer = threading.Thread(target=kill)
    for i in range(events):
        if i == events // 3:
            killer.start()
        status, headers, verdict = post_event(base, task, work_event(1000 + i), timeout=15)
        if status == 200:
            acked.append((i, verdict["seq"], upstream(headers)))
        elif status in (0, 502, 504):
            # Not acknowledged: the event may or may not have been applied (a replica killed
            # after its commit and before its answer); the client would retry or give up.
            unanswered += 1
        else:
            raise Failed(f"event {i}: HTTP {status}: {verdict}")
    killer.join()
    if errors:
        raise Failed(errors[0])
    # Only what was in flight at the kill, on the proxy's connections to the killed replica,
    # may be left without an answer.
    if unanswered > 5:
        raise Failed(f"{unanswered} of {events} events went unanswered while one replica "
                     f"was killed")
    seqs = [s for _, s, _ in acked]
    if any(b <= a for a, b in zip(seqs, seqs[1:])):
        raise Failed(f"an acknowledged event was lost or applied twice: seqs {seqs}")
    # Each gap between two acknowledged seqs is an unanswered event that was applied anyway.
    gaps = sum(b - a - 1 for a, b in zip(seqs, seqs[1:]))
    if gaps > unanswered:
        raise Failed(f"seqs skip {gaps} places but only {unanswered} events went unanswered")
    # A fresh task: its seqs count from 1, so it holds at least the last acknowledged seq of
    # events, and at most every event posted.
    view = task_state(base, task)
    if not seqs[-1] <= view["events_total"] <= events:
        raise Failed(f"task {task} holds {view['events_total']} events; the last acknowledged "
                     f"seq was {seqs[-1]}, {events} were posted")
    after = sorted({r for i, _, r in acked if i > events // 3 + 5})
    ok(f"{len(acked)} of {events} events acknowledged while a replica was killed "
       f"({unanswered} unanswered, {gaps} of them applied); none lost: task {task} holds "
       f"{view['events_total']} events; served after the kill by {after}")


def load_yaml(path):
    import yaml  # the validator's venv has PyYAML

    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def pod_spec(manifest):
    doc = load_yaml(manifest)[0]
    return doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]


def container_of(manifest, name):
    return next(c for c in pod_spec(manifest)["containers"] if c["name"] == name)


def pod_of(statefulset):
    """The StatefulSet's first pod as its controller would make it, for `podman kube play`
    (which plays Pods and Deployments only): named NAME-0, each volumeClaimTemplate a claim
    TEMPLATE-NAME-0 (a named volume to podman), and the http port published on 127.0.0.1:8080
    so the host can reach it as a Service would."""
    import yaml

    sts = load_yaml(statefulset)[0]
    if sts["kind"] != "StatefulSet":
        raise Failed(f"{statefulset} holds a {sts['kind']}, not a StatefulSet")
    name = sts["metadata"]["name"] + "-0"
    template = sts["spec"]["template"]
    spec = json.loads(json.dumps(template["spec"]))
    for claim in sts["spec"].get("volumeClaimTemplates", []):
        claim_name = claim["metadata"]["name"]
        spec.setdefault("volumes", []).append(
            {"name": claim_name, "persistentVolumeClaim": {"claimName": f"{claim_name}-{name}"}})
    for ctr in spec["containers"]:
        for port in ctr.get("ports", []):
            if port.get("name") == "http":
                port["hostPort"] = port["containerPort"]
                port["hostIP"] = "127.0.0.1"
    metadata = json.loads(json.dumps(template.get("metadata", {})))
    # Two of podman 4.3's init-container bugs: a "once" init container is removed right after
    # it exits, racing with its exit ("failed to remove once init container ... as it is
    # running"); a kept one ("always") is restarted forever under restartPolicy Always (podman
    # issue 16343). So: kept, and restarted only on failure, as the kubelet treats init
    # containers; a StatefulSet's own pods have to say Always.
    metadata.setdefault("annotations", {})["io.podman.annotations.init.container.type"] = "always"
    spec["restartPolicy"] = "OnFailure"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**metadata, "name": name},
        "spec": {**spec, "hostname": name, "subdomain": sts["spec"].get("serviceName")},
    }
    print(f"# {statefulset}'s pod {name}, made by .ci/deploy_checks.py pod-of")
    print(yaml.safe_dump(pod, sort_keys=False), end="")


def quantity_bytes(q):
    """A Kubernetes memory quantity (512Mi, 1Gi, 1G, 1000) in bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6,
             "G": 10**9, "T": 10**12}
    for unit, factor in units.items():
        if str(q).endswith(unit):
            return int(float(str(q)[: -len(unit)]) * factor)
    return int(q)


def quantity_nano_cpus(q):
    """A Kubernetes CPU quantity (2, 0.5, 500m) in billionths of a CPU, as podman keeps it."""
    q = str(q)
    return int(q[:-1]) * 10**6 if q.endswith("m") else int(float(q) * 10**9)


def podman_inspect(name, template):
    return subprocess.run(["podman", "inspect", "--format", template, name],
                          capture_output=True, text=True, check=True).stdout.strip()


def pod_security(podman_name, manifest, container):
    """The played container runs as the manifest asks: its user, no capabilities, no privilege
    escalation, a read-only root filesystem, its environment, the model the init container
    copied, and the data volume writable."""
    ctr = container_of(manifest, container)
    spec = pod_spec(manifest)
    pid = podman_inspect(podman_name, "{{.State.Pid}}")
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    uid = spec["securityContext"]["runAsUser"]
    if any(int(u) != uid for u in status["Uid"].split()):
        raise Failed(f"Uid {status['Uid']}, the manifest says runAsUser {uid}")
    if int(status["CapEff"], 16) != 0:
        raise Failed(f"effective capabilities {status['CapEff']}; the manifest drops ALL")
    if status.get("NoNewPrivs") != "1":
        raise Failed(f"NoNewPrivs is {status.get('NoNewPrivs')}; allowPrivilegeEscalation: false")
    ok(f"{podman_name} runs as uid {uid}, no capabilities, no new privileges")
    if ctr["securityContext"].get("readOnlyRootFilesystem"):
        write = subprocess.run(["podman", "exec", podman_name, "touch", "/written"],
                               capture_output=True, text=True)
        if write.returncode == 0 or "Read-only file system" not in write.stderr:
            raise Failed(f"writing / gave exit {write.returncode}: {write.stderr.strip()}")
        ok("its root filesystem is read-only")
    limits = ctr.get("resources", {}).get("limits", {})
    if limits:
        memory = int(podman_inspect(podman_name, "{{.HostConfig.Memory}}"))
        nano_cpus = int(podman_inspect(podman_name, "{{.HostConfig.NanoCpus}}"))
        want_memory = quantity_bytes(limits["memory"]) if "memory" in limits else 0
        want_cpus = quantity_nano_cpus(limits["cpu"]) if "cpu" in limits else 0
        if (memory, nano_cpus) != (want_memory, want_cpus):
            raise Failed(f"limits: memory {memory} B and {nano_cpus / 1e9} CPUs, the manifest "
                         f"says {limits}")
        ok(f"its limits are the manifest's ({limits})")
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(v.decode().split("=", 1) for v in f.read().split(b"\0") if b"=" in v)
    for var in ctr.get("env", []):
        if "value" in var and env.get(var["name"]) != var["value"]:
            raise Failed(f"{var['name']} is {env.get(var['name'])!r}, the manifest sets "
                         f"{var['value']!r}")
    ok(f"its environment has the manifest's {sum('value' in v for v in ctr.get('env', []))} values")
    data_dir = env["LOOPGUARD_SERVER__DATA_DIR"]
    probe = subprocess.run(
        ["podman", "exec", podman_name, "sh", "-c",
         f'ls "$LOOPGUARD_MODEL__DIR" "$(dirname "$ORT_DYLIB_PATH")" && touch {data_dir}/.w '
         f"&& rm {data_dir}/.w"],
        capture_output=True, text=True)
    if probe.returncode != 0 or "model.onnx" not in probe.stdout:
        raise Failed(f"the model volume or the data volume is not as expected: {probe.stdout} "
                     f"{probe.stderr}")
    ok(f"the model volume holds what the init container copied ({' '.join(probe.stdout.split())}); "
       f"{data_dir} is writable")


def probes(base, manifest, container):
    """GET every httpGet probe of CONTAINER in MANIFEST (a Pod, or the pod template of a
    workload) through BASE: each must answer 200, as the kubelet needs."""
    ctr = container_of(manifest, container)
    ports = {p.get("name"): p["containerPort"] for p in ctr.get("ports", [])}
    checked = []
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = ctr.get(kind)
        if not probe:
            continue
        get = probe["httpGet"]
        port = ports.get(get["port"], get["port"])
        if port != 8080:
            raise Failed(f"{kind} probes port {get['port']} ({port}), the service listens on 8080")
        status, _, body = request(base + get["path"])
        expect(status, body, 200, f"{kind} GET {get['path']}")
        checked.append(f"{kind} {get['path']}")
    if not checked:
        raise Failed(f"container {container} in {manifest} has no httpGet probe")
    ok(f"{', '.join(checked)} answer 200")


def main(argv):
    commands = {
        "ready": ready,
        "reworded-loop": reworded_loop,
        "save-task": save_task,
        "same-task": same_task,
        "alternating": alternating,
        "probes": probes,
        "pod-of": pod_of,
        "pod-security": pod_security,
    }
    if not argv:
        sys.exit(__doc__)
    name, args = argv[0], argv[1:]
    try:
        if name == "kill-replica":
            sep = args.index("--")
            kill_replica(*args[:sep], args[sep + 1:])
        elif name in commands:
            commands[name](*args)
        else:
            sys.exit(f"unknown check {name!r}\n{__doc__}")
    except Failed as e:
        print(f"FAIL: {e}{refused_note()}", flush=True)
        sys.exit(1)
    if REFUSED:
        print(f"note:{refused_note()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
