#!/usr/bin/env bash
# The deploy files, run (docs/DEPLOY.md, "How CI runs the deploy files"): the image built and
# started with podman, the compose stack (PostgreSQL, two replicas, nginx) under podman-compose,
# the Kubernetes manifests validated against the Kubernetes schemas and the StatefulSet's pod
# played with `podman kube play`. Any failed check fails the script.
#
#   bash .ci/deploy.sh          # as root; installs podman & co. from Debian when missing
#
# No image registry is reachable here, so the base images are made locally: Debian bookworm by
# debootstrap, imported with `podman import` and cached (LOOPGUARD_CI_CACHE, outside the clone);
# PostgreSQL and nginx from Debian's packages on it (.ci/images/). The loopguard images are
# deploy/Dockerfile's host-full and host-slim targets on that base, with the release binary and
# the model from this checkout: the Rust toolchain image cannot be pulled either.
#
# Every command below that DEPLOY.md shows is run through `documented`, which fails when the
# command is not, verbatim, a line of docs/DEPLOY.md. Those commands use the documented names, so
# the script replaces, before and after it runs, any container `loopguard`, volume
# `loopguard-data`, compose project `loopguard` and pod `loopguard-0` (with its volume
# `data-loopguard-0`) on the machine, and needs port 8080 free.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TARGET=$(realpath "${CARGO_TARGET_DIR:-target}")
CACHE=${LOOPGUARD_CI_CACHE:-/var/cache/loopguard-ci}
BASE=localhost/loopguard-ci/debian:bookworm-slim
WORK=$(mktemp -d)
STARTED=$(date +%s)
PASSED=0
CHECKS=(python3 .ci/deploy_checks.py)

step() { printf '\n=== deploy: %s (%d s in)\n' "$*" "$(($(date +%s) - STARTED))"; }

documented() {
    if ! grep -qxF -- "$1" docs/DEPLOY.md; then
        echo "FAIL: this command is not a line of docs/DEPLOY.md: $1" >&2
        exit 1
    fi
    echo "+ $1"
    # Image builds say a lot: their output is shown when they fail.
    if ! eval "$1" >"$WORK/command.log" 2>&1; then
        tail -40 "$WORK/command.log"
        return 1
    fi
    tail -3 "$WORK/command.log"
}

# check DESCRIPTION COMMAND...: one check; its failure ends the run.
check() {
    local what=$1
    shift
    if "$@"; then
        PASSED=$((PASSED + 1))
    else
        echo "FAIL: $what" >&2
        exit 1
    fi
}

# The anonymous volumes of the containers named *NAME* (an image's VOLUME with nothing mounted
# there: the replicas' /var/lib/loopguard): podman-compose 1.0.3's `down -v` and `podman rm`
# leave them behind.
anonymous_volumes() {
    local c v
    for c in $(podman ps -a --filter "name=$1" --format '{{.Names}}'); do
        for v in $(podman inspect --format '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}' "$c"); do
            if [ "$(podman volume inspect --format '{{.Anonymous}}' "$v")" = true ]; then echo "$v"; fi
        done
    done
}

# The containers, pods and volumes this script makes; gone before and after each run (an
# aborted run's leftovers must not hold port 8080 or old state).
teardown() {
    local anonymous
    anonymous=$(anonymous_volumes loopguard 2>/dev/null || true)
    podman rm -f -t 2 loopguard >/dev/null 2>&1 || true
    podman volume rm -f loopguard-data >/dev/null 2>&1 || true
    if [ -f deploy/compose/compose.yaml ] && command -v podman-compose >/dev/null; then
        podman-compose -p loopguard -f deploy/compose/compose.yaml down -v -t 2 >/dev/null 2>&1 || true
        podman volume rm -f loopguard_pgdata >/dev/null 2>&1 || true
    fi
    if [ -f target/deploy/loopguard-0.yaml ]; then
        podman kube down target/deploy/loopguard-0.yaml >/dev/null 2>&1 || true
    fi
    podman volume rm -f data-loopguard-0 >/dev/null 2>&1 || true
    for v in $anonymous; do podman volume rm -f "$v" >/dev/null 2>&1 || true; done
}
on_exit() {
    local status=$?
    if [ "$status" -ne 0 ] && command -v podman >/dev/null; then
        echo "--- containers at the failure, and their last log lines" >&2
        podman ps -a --filter name=loopguard >&2 || true
        for c in $(podman ps -a --filter name=loopguard --format '{{.Names}}' 2>/dev/null); do
            echo "--- $c" >&2
            podman logs --tail 30 "$c" >&2 || true
        done
    fi
    teardown
    rm -rf "$WORK"
    [ "$status" -eq 0 ] || echo "deploy: $PASSED passed, 1 failed"
    exit "$status"
}

# --- Tools ----------------------------------------------------------------------------------
step "tools"
if [ "$(id -u)" -ne 0 ]; then
    echo "FAIL: .ci/deploy.sh runs as root (apt-get, rootful podman, debootstrap)" >&2
    exit 1
fi
# runc, not crun: crun 1.8 refuses this kernel's hybrid cgroup layout ("cgroups in hybrid mode
# not supported, drop all controllers from cgroupv2": v1 controllers, and hugetlb on v2).
need=()
for tool in podman podman-compose buildah debootstrap runc curl; do
    command -v "$tool" >/dev/null || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# podman gives rootful containers 1048576 open files and 4194304 processes by default; raising a
# limit needs CAP_SYS_RESOURCE, which root lacks in this sandbox ("setrlimit RLIMIT_NOFILE:
# Operation not permitted"), so containers get this shell's hard limits instead. Process
# limits above kernel.pid_max were refused too.
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
pid_max=$(cat /proc/sys/kernel/pid_max)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
if [ "$nofile" = unlimited ]; then nofile=1048576; fi
cat >"$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"
podman --version
podman-compose --version 2>/dev/null | grep -i 'podman-compose version' || true
trap on_exit EXIT
teardown
if ss -ltnH 'sport = :8080' | grep -q .; then
    echo "FAIL: port 8080 is taken (the documented commands publish the service there):" >&2
    ss -ltnp 'sport = :8080' >&2
    exit 1
fi

# --- The local Debian base image, cached --------------------------------------------------
step "base image"
# The key is everything the base depends on: change the recipe below and a new one is made.
recipe="debootstrap --variant=minbase bookworm http://deb.debian.org/debian; sources: bookworm bookworm-updates bookworm-security; v1"
key=$(printf '%s' "$recipe" | sha256sum | cut -c1-16)
if ! podman image exists "$BASE-$key"; then
    mkdir -p "$CACHE"
    tarball="$CACHE/debian-bookworm-$key.tar"
    if [ ! -s "$tarball" ]; then
        rootfs="$WORK/rootfs"
        debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 \
            || { tail -20 "$WORK/debootstrap.log"; exit 1; }
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs/etc/apt/sources.list"
        # The same sources as the official image: updates and security fixes too.
        cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
        tar --numeric-owner --sort=name -C "$rootfs" -cf "$tarball.part" .
        mv "$tarball.part" "$tarball"
        rm -rf "$rootfs"
    fi
    podman import --change 'CMD ["bash"]' "$tarball" "$BASE-$key" >/dev/null
fi
podman tag "$BASE-$key" "$BASE"
echo "base $BASE = $BASE-$key"

# --- Images ---------------------------------------------------------------------------------
step "images"
python3 models/fetch.py
cargo build --release --locked
if [ "$TARGET" != "$ROOT/target" ]; then
    install -D "$TARGET/release/loopguard" target/release/loopguard
fi
# As the Dockerfile's build stage does: the line tables make it 130 MB, stripped 20 MB.
strip target/release/loopguard
LOOPGUARD_BIN="$ROOT/target/release/loopguard"
documented 'podman build --pull=never -f deploy/Dockerfile --build-arg RUNTIME_IMAGE=localhost/loopguard-ci/debian:bookworm-slim --target host-full -t loopguard:full .'
documented 'podman build --pull=never -f deploy/Dockerfile --build-arg RUNTIME_IMAGE=localhost/loopguard-ci/debian:bookworm-slim --target host-slim -t loopguard:slim .'
documented 'podman build --pull=never -f .ci/images/postgres.Containerfile --build-arg BASE_IMAGE=localhost/loopguard-ci/debian:bookworm-slim -t localhost/loopguard-ci/postgres:15 .ci/images'
documented 'podman build --pull=never -f .ci/images/nginx.Containerfile --build-arg BASE_IMAGE=localhost/loopguard-ci/debian:bookworm-slim -t localhost/loopguard-ci/nginx .ci/images'

# --- One container --------------------------------------------------------------------------
step "one container"
documented 'podman run -d --name loopguard -p 8080:8080 -v loopguard-data:/var/lib/loopguard loopguard:full'
URL=http://127.0.0.1:8080
check "ready" "${CHECKS[@]}" ready "$URL"
# The unprivileged user: the service's own process, read from /proc on the host.
runs_as_10001() {
    local pid
    pid=$(podman inspect --format '{{.State.Pid}}' "$1")
    if awk '/^(Uid|Gid):/ { for (i = 2; i <= 5; i++) if ($i != 10001) bad = 1 } END { exit bad }' "/proc/$pid/status"; then
        echo "ok: $1 runs as uid and gid 10001 ($(grep -E '^(Uid|Gid):' "/proc/$pid/status" | tr -s '\t' ' ' | tr '\n' ';'))"
    else
        grep -E '^(Uid|Gid):' "/proc/$pid/status"
        return 1
    fi
}
check "unprivileged user" runs_as_10001 loopguard
check "reworded loop" "${CHECKS[@]}" reworded-loop "$URL" deploy-reworded "$LOOPGUARD_BIN"
check "save state" "${CHECKS[@]}" save-task "$URL" deploy-reworded "$WORK/task.json"
# SIGTERM: `podman stop` sends it and waits 10 s before SIGKILL (exit 137).
stops_cleanly() {
    local t0 code
    t0=$(date +%s%N)
    documented 'podman stop loopguard' || return 1
    code=$(podman inspect --format '{{.State.ExitCode}}' "$1")
    if [ "$code" != 0 ] || ! podman logs "$1" 2>&1 | grep -q 'state flushed; bye'; then
        echo "exit code $code; last log lines:"
        podman logs --tail 5 "$1" 2>&1
        return 1
    fi
    echo "ok: $1 stopped on SIGTERM in $((($(date +%s%N) - t0) / 1000000)) ms, exit code 0, 'state flushed; bye' logged"
}
check "SIGTERM" stops_cleanly loopguard
# A new container on the same volume: the state is the volume's, not the container's.
podman rm loopguard >/dev/null
documented 'podman run -d --name loopguard -p 8080:8080 -v loopguard-data:/var/lib/loopguard loopguard:full'
check "ready again" "${CHECKS[@]}" ready "$URL"
check "state kept on the volume" "${CHECKS[@]}" same-task "$URL" deploy-reworded "$WORK/task.json"
podman rm -f -t 10 loopguard >/dev/null
podman volume rm loopguard-data >/dev/null

# --- Compose: PostgreSQL, two replicas, nginx -----------------------------------------------
step "compose"
documented 'POSTGRES_IMAGE=localhost/loopguard-ci/postgres:15 NGINX_IMAGE=localhost/loopguard-ci/nginx podman-compose -p loopguard -f deploy/compose/compose.yaml up -d'
check "compose ready" "${CHECKS[@]}" ready "$URL" 180 2
check "one task state across replicas" "${CHECKS[@]}" alternating "$URL" deploy-alternating 20
# A crash: the replica's process killed from the host (`podman kill` would count as a stop, and
# the restart policy would leave it down). It comes back by that policy and serves the same task.
# shellcheck disable=SC2016 # expanded by that sh, when it kills
check "a killed replica loses nothing acknowledged" \
    "${CHECKS[@]}" kill-replica "$URL" deploy-kill 60 -- \
    sh -c 'kill -KILL "$(podman inspect --format "{{.State.Pid}}" loopguard_loopguard-a_1)"'
restarted() {
    local count
    count=$(podman inspect --format '{{.RestartCount}}' "$1")
    [ "$count" -ge 1 ] && echo "ok: $1 was restarted by its restart policy ($count restart)"
}
check "replica back" "${CHECKS[@]}" ready "$URL" 120 2
check "replica restarted" restarted loopguard_loopguard-a_1
check "one task state after the kill" "${CHECKS[@]}" alternating "$URL" deploy-kill-after 10
anonymous=$(anonymous_volumes loopguard_)
documented 'podman-compose -p loopguard -f deploy/compose/compose.yaml down -v'
for v in $anonymous; do podman volume rm -f "$v" >/dev/null; done

# --- Kubernetes -----------------------------------------------------------------------------
step "kubernetes"
venv="$TARGET/venv-deploy"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r .ci/deploy-requirements.txt
export PATH="$venv/bin:$PATH"
documented 'kubernetes-validate --strict -k 1.30.0 deploy/k8s/*.yaml deploy/k8s/postgres/*.yaml'
documented 'kubernetes-validate --strict -k 1.37.0 deploy/k8s/*.yaml deploy/k8s/postgres/*.yaml'
PASSED=$((PASSED + 2))
# podman plays Pods and Deployments, not StatefulSets: the StatefulSet's pod, as its controller
# would make it (loopguard-0 with the claim data-loopguard-0), published on 127.0.0.1:8080.
mkdir -p target/deploy
documented 'python3 .ci/deploy_checks.py pod-of deploy/k8s/statefulset.yaml > target/deploy/loopguard-0.yaml'
documented 'podman kube play target/deploy/loopguard-0.yaml'
check "pod ready" "${CHECKS[@]}" ready "$URL"
check "probes answer" "${CHECKS[@]}" probes "$URL" deploy/k8s/statefulset.yaml loopguard
check "pod's security context" "${CHECKS[@]}" pod-security loopguard-0-loopguard deploy/k8s/statefulset.yaml loopguard
check "reworded loop in the pod" "${CHECKS[@]}" reworded-loop "$URL" deploy-pod "$LOOPGUARD_BIN"
check "save pod state" "${CHECKS[@]}" save-task "$URL" deploy-pod "$WORK/pod-task.json"
documented 'podman kube down target/deploy/loopguard-0.yaml'
documented 'podman kube play target/deploy/loopguard-0.yaml'
check "pod ready again" "${CHECKS[@]}" ready "$URL"
check "state kept on the claim" "${CHECKS[@]}" same-task "$URL" deploy-pod "$WORK/pod-task.json"

podman image prune -f >/dev/null
step "done"
echo "deploy: $PASSED passed, 0 failed"
