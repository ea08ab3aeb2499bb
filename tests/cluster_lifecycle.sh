#!/usr/bin/env bash
# Lifecycle checks for tests/localcluster.sh: down / up / down / up cycles, idempotence, a job
# killed by `down`, a pre-existing slurm.conf kept and restored, another layout, the 127.0.0.1
# fallback, a broken cluster repaired by `up`, the production profile (cgroups, memory, preemption)
# where the kernel allows it and the plain one on request, and after every `down`: no daemon,
# namespace, link, hosts line, config link or cgroup of ours is left. Needs root. Prints "N passed, M failed" and
# exits 1 on any failure. The cluster ends as it started: up (same layout) or down.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
LC=$HERE/localcluster.sh
STATE=${SLURMGEN_CLUSTER_DIR:-/tmp/slurmgen-cluster}
ETC_CONF=/etc/slurm/slurm.conf
BACKUP=/etc/slurm/slurm.conf.slurmgen-backup
WORK=$(mktemp -d /tmp/cluster-lifecycle.XXXXXX)
PASS=0
FAIL=0

ok() { PASS=$((PASS + 1)); printf 'ok    %s\n' "$1"; }
bad() { FAIL=$((FAIL + 1)); printf 'FAIL  %s\n' "$1"; [[ -n ${2:-} ]] && printf '%s\n' "$2" | sed 's/^/      /'; }

# check DESCRIPTION CMD...: one assertion
check() {
    local what=$1 out
    shift
    if out=$("$@" 2>&1); then ok "$what"; else bad "$what" "$out"; fi
}

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# lc ARGS...: run localcluster.sh, output in $WORK/lc.out, rc in LC_RC, ms in LC_MS
lc() {
    local t0
    t0=$(date +%s%N)
    "$LC" "$@" >"$WORK/lc.out" 2>&1
    LC_RC=$?
    LC_MS=$(ms_since "$t0")
}

# record what is ours before a `down`: daemon pids and the node namespaces
snapshot() {
    cat "$STATE"/run/*.pid 2>/dev/null >"$WORK/pids" || : >"$WORK/pids"
    cat "$STATE/run/namespaces" 2>/dev/null >"$WORK/namespaces" || : >"$WORK/namespaces"
}

# nothing_left: no daemon, process in our namespaces, netns, link, hosts block or conf link
nothing_left() {
    local p ns problems=()
    while read -r p; do
        [[ -n $p && -d /proc/$p && -n $(readlink "/proc/$p/exe" 2>/dev/null) ]] &&
            problems+=("pid $p still running: $(tr '\0' ' ' <"/proc/$p/cmdline")")
    done <"$WORK/pids"
    local exe daemons
    daemons=" $(for p in slurmctld slurmd munged; do readlink -f "$(command -v "$p")"; done | tr '\n' ' ')"
    for p in /proc/[0-9]*; do
        exe=$(readlink "$p/exe" 2>/dev/null) || continue
        if [[ $daemons == *" $exe "* ]] && tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$STATE/"; then
            problems+=("process ${p#/proc/} mentions $STATE: $(tr '\0' ' ' <"$p/cmdline")")
        fi
        while read -r ns; do
            [[ -n $ns ]] || continue
            [[ $(readlink "$p/ns/${ns%%:*}" 2>/dev/null) == "$ns" ]] &&
                problems+=("process ${p#/proc/} still in $ns: $(tr '\0' ' ' <"$p/cmdline")")
        done <"$WORK/namespaces"
    done
    ip netns list 2>/dev/null | grep -qE '^sgc-' && problems+=("netns left: $(ip netns list | grep -E '^sgc-' | tr '\n' ' ')")
    ip -o link show 2>/dev/null | grep -qE ': sgc' && problems+=("links left: $(ip -o link show | grep -E ': sgc' | cut -d: -f2 | tr '\n' ' ')")
    grep -q 'slurmgen-cluster' /etc/hosts && problems+=("hosts block left in /etc/hosts")
    grep -qE '\snode[0-9]+(\s|$)' /etc/hosts && problems+=("node names left in /etc/hosts")
    [[ -L $ETC_CONF && $(readlink "$ETC_CONF") == "$STATE"/* ]] && problems+=("$ETC_CONF still links to $STATE")
    [[ -e $STATE/run ]] && problems+=("$STATE/run left")
    compgen -G '/sys/fs/cgroup/*/slurm_node*' >/dev/null &&
        problems+=("cgroups left: $(compgen -G '/sys/fs/cgroup/*/slurm_node*' | tr '\n' ' ')")
    if [[ ${#problems[@]} -gt 0 ]]; then
        printf '%s\n' "${problems[@]}"
        return 1
    fi
}

# munged_per_node N: N live munged of ours, each in another mount namespace than this shell
munged_per_node() {
    local f pid n=0
    for f in "$STATE"/run/munged-node*.pid; do
        pid=$(cat "$f" 2>/dev/null) || continue
        [[ -d /proc/$pid ]] || continue
        [[ $(readlink "/proc/$pid/ns/mnt") != "$(readlink /proc/$$/ns/mnt)" ]] || { echo "munged $pid shares our mount namespace"; return 1; }
        n=$((n + 1))
    done
    [[ $n -eq $1 ]] || { echo "$n munged of ours, wanted $1"; return 1; }
}

rc_is() { [[ $LC_RC -eq $1 ]] || { echo "rc $LC_RC, wanted $1"; cat "$WORK/lc.out"; return 1; }; }

status_is() {
    local rc
    "$LC" status >"$WORK/status.out" 2>&1
    rc=$?
    [[ $rc -eq $1 ]] || { echo "status rc $rc, wanted $1"; cat "$WORK/status.out"; return 1; }
}

# hostnames_are N: `srun -N N hostname` prints node1..nodeN
hostnames_are() {
    local want got
    want=$(seq -f 'node%g' 1 "$1" | tr '\n' ' ')
    got=$(timeout 60 srun -N "$1" hostname 2>&1 | sort -V | tr '\n' ' ')
    [[ $got == "$want" ]] || { echo "srun -N$1 hostname: '$got', wanted '$want'"; return 1; }
}

layout_mode_is() { grep -qx "MODE=$1" "$STATE/layout" || { cat "$STATE/layout"; return 1; }; }
layout_profile_is() { grep -qx "PROFILE=$1" "$STATE/layout" || { cat "$STATE/layout"; return 1; }; }

# production_here: the kernel has read-write cgroup v1 controllers for task/cgroup
production_here() {
    local c
    for c in cpuset memory devices; do
        awk -v m="/sys/fs/cgroup/$c" '$2 == m && $3 == "cgroup" && $4 ~ /(^|,)rw(,|$)/ { ok = 1 } END { exit !ok }' /proc/mounts || return 1
    done
}

# job_cgroup_exists JOB: task/cgroup made the job's device cgroup on some node
job_cgroup_exists() { compgen -G "/sys/fs/cgroup/devices/slurm_node*/uid_*/job_$1" >/dev/null; }

down_and_check() {
    snapshot
    lc down
    check "down ($1) exits 0 [${LC_MS} ms]" rc_is 0
    check "after down ($1): nothing of ours is left" nothing_left
    check "after down ($1): status says down (3)" status_is 3
}

# --- start ------------------------------------------------------------------------------------
[[ $(id -u) -eq 0 ]] || { echo "cluster_lifecycle.sh needs root"; exit 1; }
was_up=0 was_gpus="" was_nons=0
if "$LC" status >/dev/null 2>&1; then
    was_up=1
    was_gpus=$(sed -n 's/^GPUS=//p' "$STATE/layout" | tr ' ' ',')
    grep -qx 'MODE=loopback' "$STATE/layout" && was_nons=1
fi
echo "cluster was $([[ $was_up == 1 ]] && echo "up (GPUs $was_gpus)" || echo down) at the start"
conf_before=""
[[ -e $ETC_CONF && ! -L $ETC_CONF ]] && conf_before=$(cat "$ETC_CONF")

down_and_check "from the start"
lc down
check "second down is a no-op (exits 0) [${LC_MS} ms]" rc_is 0
check "after the second down: nothing left" nothing_left

# --- default layout ---------------------------------------------------------------------------
lc up
check "up (default 1,1,2,2) exits 0 [${LC_MS} ms]" rc_is 0
check "status after up exits 0" status_is 0
if production_here; then
    check "the default profile is production where the kernel allows it" layout_profile_is production
    check "production: task/cgroup, CR_Core_Memory, preemption, cgroup.conf" grep -q \
        -e 'TaskPlugin=task/cgroup,task/affinity' "$STATE/etc/slurm.conf"
    check "production: an urgent partition preempts debug" grep -q 'PartitionName=urgent .*PriorityTier=10' "$STATE/etc/slurm.conf"
    check "production: devices, cores and memory constrained" grep -q 'ConstrainDevices=yes' "$STATE/etc/cgroup.conf"
else
    check "without cgroup v1 the default falls back to plain and says why" grep -q 'cannot run here' "$WORK/lc.out"
fi
check "jobs run on node1..node4 with their own hostnames" hostnames_are 4
check "$ETC_CONF links to the state dir" test "$(readlink "$ETC_CONF")" = "$STATE/etc/slurm.conf"
check "one munged per node, each in the node's mount namespace" munged_per_node 4
lc up
check "up again says already up and exits 0 [${LC_MS} ms]" grep -q 'already up' "$WORK/lc.out"
lc up --gpus 2,2
check "up --gpus 2,2 while up with 1,1,2,2 is refused" test "$LC_RC" -ne 0

# a job running at down: its processes must go too
job=$(sbatch --parsable -N2 -o /dev/null --wrap "srun bash -c 'echo \$\$ >> $WORK/job.pids; sleep 300'")
for _ in $(seq 1 100); do [[ $(wc -l 2>/dev/null <"$WORK/job.pids" || echo 0) -ge 2 ]] && break; sleep 0.1; done
check "a 2-node job is running (pids recorded)" test "$(wc -l 2>/dev/null <"$WORK/job.pids" || echo 0)" -ge 2
if production_here; then
    check "production: the running job has its own device cgroup" job_cgroup_exists "$job"
fi
last_job=$job
down_and_check "with a running job"
job_gone() {
    local p
    while read -r p; do
        [[ -d /proc/$p && -n $(readlink "/proc/$p/exe" 2>/dev/null) ]] && { echo "job process $p survived"; return 1; }
    done <"$WORK/job.pids"
    return 0
}
check "the running job's processes are gone" job_gone

# --- a pre-existing slurm.conf is kept and restored; another layout ------------------------------
made_conf=0
if [[ ! -e $ETC_CONF && ! -e $BACKUP ]]; then
    mkdir -p /etc/slurm
    printf '# sentinel from cluster_lifecycle.sh %s\n' "$$" >"$ETC_CONF"
    made_conf=1
fi
before=$(cat "$ETC_CONF" 2>/dev/null)
lc up --gpus 2,2 --profile plain
check "up --gpus 2,2 --profile plain exits 0 [${LC_MS} ms]" rc_is 0
check "plain profile: task/none, no cgroup.conf" test "$(grep -c 'TaskPlugin=task/none' "$STATE/etc/slurm.conf")" = 1 -a ! -e "$STATE/etc/cgroup.conf"
check "2-node layout: node1 node2" hostnames_are 2
check "sinfo shows gpu:2 on both nodes" test "$(sinfo -h -N -o '%G' | sort -u)" = "gpu:2"
job=$(sbatch --parsable -o /dev/null --wrap true)
check "job ids keep growing across down/up ($last_job -> $job)" test "$job" -gt "$last_job"
last_job=$job
down_and_check "2,2"
check "the earlier $ETC_CONF is restored" test "$(cat "$ETC_CONF" 2>/dev/null)" = "$before"
[[ $made_conf == 1 ]] && rm -f "$ETC_CONF"

# --- 127.0.0.1 fallback -------------------------------------------------------------------------
t0=$(date +%s%N)
SLURMGEN_CLUSTER_NONS=1 "$LC" up --gpus 1,2 >"$WORK/lc.out" 2>&1
LC_RC=$?
LC_MS=$(ms_since "$t0")
check "fallback up (SLURMGEN_CLUSTER_NONS=1, --gpus 1,2) exits 0 [${LC_MS} ms]" rc_is 0
check "fallback runs in loopback mode" layout_mode_is loopback
check "fallback status exits 0" status_is 0
check "fallback jobs see node1 node2" hostnames_are 2
down_and_check "fallback"

# --- a broken cluster: status says 1, up repairs it ---------------------------------------------
lc up
check "up again after the cycles exits 0 [${LC_MS} ms]" rc_is 0
check "netns mode" layout_mode_is netns
kill -KILL "$(cat "$STATE/run/slurmd-node2.pid")" 2>/dev/null
sleep 0.2
check "status with a dead slurmd exits 1" status_is 1
lc up
check "up repairs a broken cluster [${LC_MS} ms]" rc_is 0
check "status after repair exits 0" status_is 0
check "jobs run on node1..node4 after repair" hostnames_are 4

# --- a second cluster beside the first (CI runs two at once) ------------------------------------
SECOND=$WORK/second
second() {
    env SLURMGEN_CLUSTER_DIR="$SECOND" SLURMGEN_CLUSTER_NET=10.213.49 SLURMGEN_CLUSTER_PORT=17017 \
        SLURMGEN_CLUSTER_PREFIX=sgt SLURMGEN_CLUSTER_FIRST_JOB=2000001 SLURM_CONF="$SECOND/etc/slurm.conf" "$@"
}
# second_names: its nodes are host1/host2.cluster.test and resolve its own names to its own addresses
second_names() {
    local got want
    # shellcheck disable=SC2016  # expands in the job
    got=$(second timeout 60 srun -N2 bash -c 'a=$(getent hosts node1) b=$(getent hosts host2.cluster.test)
        echo "$(hostname) ${a%% *} ${b%% *}"' 2>&1 | sort)
    want=$'host1.cluster.test 10.213.49.11 10.213.49.12\nhost2.cluster.test 10.213.49.11 10.213.49.12'
    [[ $got == "$want" ]] || { printf 'got:\n%s\nwanted:\n%s\n' "$got" "$want"; return 1; }
}
job_running() { [[ $(squeue -h -j "$1" -o %T 2>&1) == RUNNING ]] || { squeue -j "$1"; return 1; }; }
nothing_of_the_second() {
    local left=()
    ip netns list 2>/dev/null | grep -qE '^sgt-' && left+=("netns")
    ip -o link show 2>/dev/null | grep -qE ': sgt' && left+=("links")
    [[ -e $SECOND/run ]] && left+=("$SECOND/run")
    compgen -G '/sys/fs/cgroup/*/slurm_node*/uid_*/job_2[0-9][0-9][0-9][0-9][0-9][0-9]' >/dev/null && left+=("its job cgroups")
    pgrep -f -- "-f $SECOND/etc/slurm.conf" >/dev/null && left+=("its daemons")
    [[ ${#left[@]} -eq 0 ]] || { echo "left: ${left[*]}"; return 1; }
}
hosts_before=$(cat /etc/hosts)
t0=$(date +%s%N)
second "$LC" up --gpus 1,1 --host-names other >"$WORK/lc.out" 2>&1
LC_RC=$?
LC_MS=$(ms_since "$t0")
check "a second cluster up beside the first (its own prefix, network, port, job ids) [${LC_MS} ms]" rc_is 0
check "the second's nodes resolve its own names to its own addresses" second_names
check "the first's /etc/hosts block and $ETC_CONF are left as they were" \
    test "$(cat /etc/hosts)" = "$hosts_before" -a "$(readlink "$ETC_CONF")" = "$STATE/etc/slurm.conf"
first_job=$(sbatch --parsable -N2 -o /dev/null --wrap "srun sleep 300")
second_job=$(second sbatch --parsable -N2 -o /dev/null --wrap "srun sleep 300")
check "the second's job ids start at its first ($second_job)" test "${second_job:-0}" -ge 2000001
for _ in $(seq 1 100); do
    [[ $(squeue -h -j "$first_job" -o %T) == RUNNING && $(second squeue -h -j "$second_job" -o %T) == RUNNING ]] && break
    sleep 0.1
done
if production_here; then
    both_cgroups() {  # the job cgroups appear as the steps start: wait up to 5 s
        local i
        for ((i = 0; i < 50; i++)); do
            job_cgroup_exists "$first_job" && job_cgroup_exists "$second_job" && return 0
            sleep 0.1
        done
        compgen -G '/sys/fs/cgroup/devices/slurm_node*/uid_*/job_*'
        return 1
    }
    check "each cluster's job has its own cgroup under the shared node roots" both_cgroups
fi
t0=$(date +%s%N)
second "$LC" down >"$WORK/lc.out" 2>&1
LC_RC=$?
LC_MS=$(ms_since "$t0")
check "down of the second cluster exits 0 [${LC_MS} ms]" rc_is 0
check "after the second's down: nothing of it is left" nothing_of_the_second
check "after the second's down: the first's job still runs" job_running "$first_job"
if production_here; then
    check "after the second's down: the first's job keeps its cgroup" job_cgroup_exists "$first_job"
fi
check "after the second's down: the first's status exits 0" status_is 0
scancel "$first_job"
down_and_check "after repair and a second cluster"

# --- back to how it was ----------------------------------------------------------------------------
if [[ $was_up == 1 ]]; then
    if [[ $was_nons == 1 ]]; then
        SLURMGEN_CLUSTER_NONS=1 "$LC" up --gpus "$was_gpus" >"$WORK/lc.out" 2>&1
        LC_RC=$?
    else
        lc up --gpus "$was_gpus"
    fi
    check "cluster back up as at the start (GPUs $was_gpus)" rc_is 0
    check "status exits 0 at the end" status_is 0
fi
if [[ -n $conf_before ]]; then
    check "$ETC_CONF content as at the start" test "$(cat "$ETC_CONF")" = "$conf_before"
fi

rm -rf "$WORK"
echo "$PASS passed, $FAIL failed"
[[ $FAIL -eq 0 ]]
