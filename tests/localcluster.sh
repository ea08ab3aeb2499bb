#!/usr/bin/env bash
# A real multi-node Slurm cluster on one machine, for slurmgen's end-to-end tests.
#
#   tests/localcluster.sh install [--slurm system|24.11|25.11]
#                            # Debian packages (slurm-wlm slurm-client munge iproute2); with a
#                            # version, also builds that Slurm from ../shared/slurm (cached)
#   tests/localcluster.sh up [--slurm system|24.11|25.11] [--profile auto|production|plain]
#                            [--gpus 1,1,2,2] [--nodes N] [--cpus 16] [--mem 32000] [--cred-expire 120]
#                            [--host-names same|other] [--gpu-types T,T,...]
#   tests/localcluster.sh bin --slurm VERSION    # prints the PATH entries of that Slurm's commands
#   tests/localcluster.sh status                  # exit 0 up and healthy, 3 down, 1 broken
#   tests/localcluster.sh node-kill nodeN         # SIGKILL everything of nodeN (slurmd, steps, ranks)
#   tests/localcluster.sh node-restart nodeN      # start nodeN's slurmd again (after a test killed it)
#   tests/localcluster.sh node-slow nodeN link RATE  # nodeN's link both ways at RATE (tc tbf: 200mbit)
#   tests/localcluster.sh node-slow nodeN cpu PERCENT # nodeN's processes, and all they start, at PERCENT
#                                                    # of one CPU (a cpu cgroup's CFS quota)
#   tests/localcluster.sh node-heal nodeN         # undo node-slow
#   tests/localcluster.sh down                    # stop what `up` started, remove what it made
#
# Each node nodeN runs its own slurmd in its own network namespace (address on a private bridge)
# and its own UTS namespace (hostname nodeN), so `hostname` in a job step prints nodeN and jobs on
# different nodes talk TCP to each other through the bridge. GPUs are fake character devices
# (major 195, like /dev/nvidiaN) declared as GRES, so Slurm hands out CUDA_VISIBLE_DEVICES etc.
# Where network namespaces cannot be made (or SLURMGEN_CLUSTER_NONS=1), every slurmd listens on
# 127.0.0.1 on its own port instead (hostnames still nodeN where a UTS namespace can be made).
#
# Profiles: "production" is configured like a real GPU site: task/cgroup with cgroup v1
# (ConstrainDevices, ConstrainCores, ConstrainRAMSpace), CPU binding (task/affinity), memory as a
# consumable (CR_Core_Memory, DefMemPerCPU), and preemption: partition "urgent" (PriorityTier 10)
# over the same nodes preempts jobs of "debug" with REQUEUE after a GraceTime, sending the job's
# --signal first. "plain" enforces none of it (task/none, CR_CPU). "auto" (the default) takes
# production where the kernel has the cgroup v1 controllers it needs, else plain and says why.
# proctrack/cgroup does not start in these node namespaces (no freezer namespace): both profiles
# track processes with proctrack/linuxproc.
#
# up options: --gpus is per node, e.g. 1,1,2,2 (nodes node1..node4), or one count, with --nodes N
# for N such nodes; --cpus and --mem (MB) are per node (declared; the machine may have fewer);
# --cred-expire S is Slurm's AuthInfo cred_expire: a requeued job becomes eligible S+1 s later
# (Slurm's default 120). On an idle cluster a requeued het job also waits for some state change
# before the backfill scheduler starts it; tests nudge it: scontrol update jobid=J StartTime=now.
# --host-names other: node N's host name (what `hostname` prints in a job, and torchrun reports)
# is hostN.cluster.test, Slurm's NodeHostname, while Slurm still calls it nodeN, as on sites whose
# host names are not their node names; "same" (the default) names the host nodeN.
# --gpu-types volta,volta,ampere,ampere: typed GRES, one type per node (gpu:volta:1), so that
# --gpu-type requests (--gres=gpu:T:N) are placed by type; untyped requests take any.
#
# Environment:
#   SLURMGEN_CLUSTER_DIR      state dir: config, logs, pids, spool, fake devices [/tmp/slurmgen-cluster]
#   SLURMGEN_CLUSTER_NET      first three octets of the private /24 [10.213.47]
#   SLURMGEN_CLUSTER_PORT     slurmctld port; slurmd ports follow it [16817]
#   SLURMGEN_CLUSTER_NONS=1   force the 127.0.0.1 fallback (no network namespaces)
#   SLURMGEN_CLUSTER_TIMEOUT  seconds `up` waits for every node to be idle [30]
#   SLURMGEN_CLUSTER_PROFILE  the profile when --profile is not given [auto]
#   SLURMGEN_CLUSTER_PREFIX   names of its bridge, veths and namespaces [sgc]; another prefix makes
#                             a second cluster beside the first (see below)
#   SLURMGEN_CLUSTER_FIRST_JOB  its first job id, and its block of a million ids [1]
#
# The config is written to $SLURMGEN_CLUSTER_DIR/etc/slurm.conf and /etc/slurm/slurm.conf is made
# a symlink to it (an existing file is kept as /etc/slurm/slurm.conf.slurmgen-backup and restored
# by `down`), so plain sbatch/srun/scontrol/sinfo find it from the host shell and inside jobs.
# Needs root.
#
# A second cluster beside the first (CI runs two at once), with its own SLURMGEN_CLUSTER_DIR,
# _NET, _PORT, _PREFIX and _FIRST_JOB (1000001: both share the nodes' cgroup roots, slurm_nodeN,
# and /tmp, which are told apart by job id): it leaves /etc/slurm/slurm.conf and /etc/hosts to the
# first, so its clients need SLURM_CONF=$SLURMGEN_CLUSTER_DIR/etc/slurm.conf, and its nodes see
# its own names through a hosts file mounted over /etc/hosts in their mount namespaces.
#
# Slurm versions: "system" is Debian's (22.05.8). 24.11 and 25.11 are built from the release
# tarballs in $SLURMGEN_SLURM_SOURCES (default: shared/slurm beside or inside the checkout),
# checked against their SHA256SUMS, into $SLURMGEN_SLURM_BUILDS/VERSION-SHA (default
# /var/cache/slurmgen/slurm), so a second install on the same machine does not rebuild. `up`
# puts that version's commands first on PATH for the daemons, links its etc/slurm.conf to the
# cluster's config for its clients, and records the version in the layout. Every node runs its
# own munged (same key) in its own mount namespace: Slurm 23.02+ decodes a launch credential once
# per munged, so one munged shared by all nodes fails every step on all nodes but one.
set -euo pipefail

STATE=${SLURMGEN_CLUSTER_DIR:-/tmp/slurmgen-cluster}
NET=${SLURMGEN_CLUSTER_NET:-10.213.47}
CTLD_PORT=${SLURMGEN_CLUSTER_PORT:-16817}
NONS=${SLURMGEN_CLUSTER_NONS:-0}
UP_TIMEOUT=${SLURMGEN_CLUSTER_TIMEOUT:-30}
PROFILE_DEFAULT=${SLURMGEN_CLUSTER_PROFILE:-auto}
CHECKOUT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLURM_BUILDS=${SLURMGEN_SLURM_BUILDS:-/var/cache/slurmgen/slurm}
SLURM_VERSIONS=(24.11 25.11)    # built from source; "system" is Debian's
BUILD_PACKAGES=(build-essential libmunge-dev pkg-config python3)
# --enable-multiple-slurmd: several slurmds on one machine, each with its own cgroup root
# (slurm_nodeN); without it they share /sys/fs/cgroup/*/slurm and fail each other's steps.
# Built for the tests alone, in under half the CPU time: no static libraries (libtool compiles
# each file twice for them), no optimisation and no debug info (-O0 without -g: `make` took 103 s
# of CPU where -g -O2 with both kinds of library took 287 s; configure and install 35 s each way).
CONFIGURE_FLAGS=(--without-hdf5 --without-rpath --disable-debug --enable-multiple-slurmd --disable-static "CFLAGS=-O0 -pipe")
CGROUP_ROOT=/sys/fs/cgroup
CGROUP_CONTROLLERS=(cpuset memory devices)   # what task/cgroup's Constrain* settings use
GRACE_TIME=30                                 # seconds a preempted job has to checkpoint

PREFIX=${SLURMGEN_CLUSTER_PREFIX:-sgc}   # names of our bridge (sgcbr0), veths (sgcvN), netns (sgc-nodeN)
[[ $PREFIX =~ ^[a-z][a-z0-9]{0,5}$ ]] || { echo "localcluster: SLURMGEN_CLUSTER_PREFIX wants 1 to 6 lower-case letters and digits (got '$PREFIX')" >&2; exit 2; }
# The first cluster (prefix sgc) owns /etc/slurm/slurm.conf and the /etc/hosts block; others do not.
OWNS_ETC=0
[[ $PREFIX == sgc ]] && OWNS_ETC=1
FIRST_JOB=${SLURMGEN_CLUSTER_FIRST_JOB:-1}
JOB_BLOCK=1000000               # the ids FIRST_JOB.. are this cluster's: its cgroups and /tmp folders
MAX_JOB_ID=67043328             # Slurm's default MaxJobId
if ! [[ $FIRST_JOB =~ ^[1-9][0-9]{0,7}$ ]] || ((FIRST_JOB + JOB_BLOCK > MAX_JOB_ID)); then
    echo "localcluster: SLURMGEN_CLUSTER_FIRST_JOB wants a job id from 1 to $((MAX_JOB_ID - JOB_BLOCK)) (got '$FIRST_JOB')" >&2
    exit 2
fi
BRIDGE=${PREFIX}br0
ETC_CONF=/etc/slurm/slurm.conf
BACKUP=/etc/slurm/slurm.conf.slurmgen-backup
HOSTS=/etc/hosts
HOSTS_BEGIN="# BEGIN slurmgen-cluster (tests/localcluster.sh; removed by 'down')"
HOSTS_END="# END slurmgen-cluster"

CONF=$STATE/etc/slurm.conf
# every client this script runs asks this cluster (a second one's config is not /etc/slurm's)
export SLURM_CONF=$CONF
LAYOUT=$STATE/layout            # written by `up`, removed by `down`: the cluster's shape
RUN=$STATE/run                  # pid files and namespace records

HEALTHY_STATES='idle|mixed|allocated|completing|planned'   # sinfo %T; "idle*" etc. are not
PACKAGES=(slurm-wlm slurm-client munge iproute2)
NEEDED_CMDS=(slurmctld slurmd sbatch srun scontrol sinfo squeue scancel munged ip nsenter unshare)

# exe_of CMD: the binary a command runs (Debian's slurmd is an alternatives link to slurmd-wlm)
exe_of() { readlink -f "$(command -v "$1" || echo "/usr/sbin/$1")"; }

say() { printf '%s\n' "$*"; }
err() { printf 'localcluster: %s\n' "$*" >&2; }
die() { err "$*"; exit 1; }

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

need_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (it creates namespaces, devices and /etc files)"
}

# ---------------------------------------------------------------------------------------------
# install

# slurm_sources: the directory with the release tarballs and their SHA256SUMS
slurm_sources() {
    local d
    for d in "${SLURMGEN_SLURM_SOURCES:-}" "$CHECKOUT/shared/slurm" "$CHECKOUT/../shared/slurm"; do
        [[ -n $d && -f $d/SHA256SUMS ]] && { (cd "$d" && pwd); return 0; }
    done
    return 1
}

# slurm_release VERSION: sets REL_TARBALL, REL_FULL (24.11.7), REL_SHA and REL_PREFIX
slurm_release() {
    local version=$1 src line
    [[ " ${SLURM_VERSIONS[*]} " == *" $version "* ]] ||
        die "--slurm wants system or one of ${SLURM_VERSIONS[*]} (got '$version')"
    src=$(slurm_sources) || die "--slurm $version: no Slurm sources (SHA256SUMS and tarballs) in \$SLURMGEN_SLURM_SOURCES, $CHECKOUT/shared/slurm or $CHECKOUT/../shared/slurm"
    line=$(grep -E "  slurm-${version//./\\.}\.[0-9]+\.tar\.gz\$" "$src/SHA256SUMS" | tail -n1) ||
        die "--slurm $version: $src/SHA256SUMS lists no slurm-$version.N.tar.gz"
    REL_SHA=${line%% *}
    REL_TARBALL=$src/${line##* }
    REL_FULL=${line##* slurm-}
    REL_FULL=${REL_FULL%.tar.gz}
    # the prefix names the sources and the configure flags: either changed means another build
    REL_PREFIX=$SLURM_BUILDS/$REL_FULL-${REL_SHA:0:12}-$(printf '%s ' "${CONFIGURE_FLAGS[@]}" | sha256sum | cut -c1-8)
}

# build_slurm VERSION: configure, make, install into REL_PREFIX unless a finished build is there
build_slurm() {
    slurm_release "$1"
    if [[ -f $REL_PREFIX/.slurmgen-built ]]; then
        say "Slurm $REL_FULL already built in $REL_PREFIX"
        return 0
    fi
    [[ -f $REL_TARBALL ]] || die "missing $REL_TARBALL"
    echo "$REL_SHA  $REL_TARBALL" | sha256sum --check --status ||
        die "$REL_TARBALL does not match its SHA256SUMS entry"
    local work t0=$SECONDS
    work=$(mktemp -d)
    rm -rf "$REL_PREFIX"
    mkdir -p "$REL_PREFIX"
    say "building Slurm $REL_FULL into $REL_PREFIX (about 2 minutes on 2 cores; log $REL_PREFIX/build.log)"
    if ! {
        tar -xzf "$REL_TARBALL" -C "$work" &&
            (cd "$work" && ./configure --prefix="$REL_PREFIX" --sysconfdir="$REL_PREFIX/etc" \
                "${CONFIGURE_FLAGS[@]}" && make -j"$(nproc)" && make install)
    } >"$REL_PREFIX/build.log.tmp" 2>&1; then
        mv "$REL_PREFIX/build.log.tmp" "$work.log"
        rm -rf "$work" "$REL_PREFIX"
        tail -n 20 "$work.log" >&2
        die "building Slurm $REL_FULL failed (full log: $work.log)"
    fi
    mv "$REL_PREFIX/build.log.tmp" "$REL_PREFIX/build.log"
    rm -rf "$work"
    mkdir -p "$REL_PREFIX/etc"
    touch "$REL_PREFIX/.slurmgen-built"
    say "built Slurm $REL_FULL in $((SECONDS - t0)) s"
}

apt_install() {
    # Keep the packages' init scripts from starting system daemons: we run our own.
    local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
    fi
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
                "$@" >/dev/null
    } || rc=$?
    [[ $made_policy -eq 1 ]] && rm -f "$policy"
    [[ $rc -eq 0 ]] || die "apt-get failed (rc=$rc)"
}

cmd_install() {
    need_root
    local version=system
    while [[ $# -gt 0 ]]; do
        case $1 in
            --slurm) version=${2:?--slurm needs a value}; shift 2 ;;
            --slurm=*) version=${1#*=}; shift ;;
            *) die "install: unknown option '$1' (see $0 --help)" ;;
        esac
    done
    install_system
    [[ $version == system ]] && return 0
    slurm_release "$version"
    if [[ ! -f $REL_PREFIX/.slurmgen-built ]]; then
        local missing=() p
        for p in "${BUILD_PACKAGES[@]}"; do
            dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
        done
        if [[ ${#missing[@]} -gt 0 ]]; then
            say "installing build dependencies: ${missing[*]}"
            apt_install "${missing[@]}"
        fi
    fi
    build_slurm "$version"
}

install_system() {
    local missing=() c
    for c in "${NEEDED_CMDS[@]}"; do
        command -v "$c" >/dev/null 2>&1 || missing+=("$c")
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        say "slurm, munge and iproute2 already installed ($("$(exe_of slurmd)" -V 2>/dev/null))"
        return 0
    fi
    say "installing ${PACKAGES[*]} (missing: ${missing[*]})"
    apt_install "${PACKAGES[@]}"
    say "installed: $("$(exe_of slurmd)" -V 2>/dev/null)"
}

# ---------------------------------------------------------------------------------------------
# small helpers

# pid_alive PIDFILE EXE: true when the pid in PIDFILE runs the binary EXE (guards against reuse)
pid_alive() {
    local pidfile=$1 exe=$2 pid
    [[ -s $pidfile ]] || return 1
    pid=$(head -n1 "$pidfile" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -d /proc/$pid ]] || return 1
    [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$exe" ]]
}

# stop_pidfile PIDFILE EXE WHAT: SIGTERM, wait up to 5 s, then SIGKILL; by recorded pid only
stop_pidfile() {
    local pidfile=$1 exe=$2 what=$3 pid i
    if pid_alive "$pidfile" "$exe"; then
        pid=$(head -n1 "$pidfile")
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            pid_alive "$pidfile" "$exe" || break
            sleep 0.1
        done
        if pid_alive "$pidfile" "$exe"; then
            err "$what (pid $pid) ignored SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.1
        fi
        say "stopped $what (pid $pid)"
    fi
    rm -f "$pidfile"
}

# pids_in_ns NSID...: pids of processes whose net or uts namespace is one of NSID (net:[N], uts:[N])
pids_in_ns() {
    # find fails on processes that end while it looks: its status does not matter
    { find /proc/[0-9]*/ns/net /proc/[0-9]*/ns/uts -maxdepth 0 -printf '%p %l\n' 2>/dev/null || true; } |
        awk -v ids="$*" 'BEGIN { n = split(ids, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
            ($2 in want) { split($1, p, "/"); print p[3] }' | sort -un
}

# kill_in_ns NSID...: stop every process in these namespaces: slurmstepd and job processes that
# our slurmds started (they outlive slurmd). SIGTERM, up to 2 s, then SIGKILL. The namespaces of
# this shell (the host's) are refused.
kill_in_ns() {
    local ids=() id pids i
    for id in "$@"; do
        [[ $id =~ ^(net|uts):\[[0-9]+\]$ ]] || continue
        [[ $id == "$(readlink "/proc/$$/ns/${id%%:*}")" ]] && continue
        ids+=("$id")
    done
    [[ ${#ids[@]} -gt 0 ]] || return 0
    pids=$(pids_in_ns "${ids[@]}")
    [[ -n $pids ]] || return 0
    # shellcheck disable=SC2086  # one pid per word
    kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
        sleep 0.1
        pids=$(pids_in_ns "${ids[@]}")
        [[ -n $pids ]] || return 0
    done
    err "SIGKILL to process(es) left in the node namespaces: $(printf '%s' "$pids" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
}

short_host() {
    local h
    h=$(uname -n)
    printf '%s\n' "${h%%.*}"
}

# expand_layout GPUS NODES: prints the per-node GPU counts, space separated
expand_layout() {
    local gpus=$1 nodes=$2 out=() g i
    [[ $gpus =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--gpus wants a number or a comma list like 1,1,2,2 (got '$gpus')"
    IFS=, read -r -a out <<<"$gpus"
    if [[ -n $nodes ]]; then
        [[ $nodes =~ ^[1-9][0-9]*$ ]] || die "--nodes wants a positive number (got '$nodes')"
        if [[ ${#out[@]} -eq 1 ]]; then
            g=${out[0]}
            out=()
            for ((i = 0; i < nodes; i++)); do out+=("$g"); done
        elif [[ ${#out[@]} -ne $nodes ]]; then
            die "--nodes $nodes but --gpus lists ${#out[@]} nodes"
        fi
    fi
    for g in "${out[@]}"; do
        ((10#$g <= 16)) || die "at most 16 GPUs per node (got $g)"
    done
    [[ ${#out[@]} -le 200 ]] || die "at most 200 nodes"
    printf '%s\n' "${out[*]}"
}

hosts_block_present() { grep -qxF "$HOSTS_BEGIN" "$HOSTS" 2>/dev/null; }

# hosts_without_block: /etc/hosts without the first cluster's block
hosts_without_block() {
    awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '
        $0 == b { skip = 1; next }
        skip && $0 == e { skip = 0; next }
        !skip { print }' "$HOSTS"
}

remove_hosts_block() {
    hosts_block_present || return 0
    local tmp
    tmp=$(mktemp)
    hosts_without_block >"$tmp"
    # rewrite in place: /etc/hosts is often a bind mount that cannot be renamed over
    cat "$tmp" >"$HOSTS"
    rm -f "$tmp"
    say "removed node names from $HOSTS"
}

add_hosts_block() {
    # add_hosts_block "ADDR NAME" ...
    remove_hosts_block >/dev/null
    {
        printf '%s\n' "$HOSTS_BEGIN"
        printf '%s\n' "$@"
        printf '%s\n' "$HOSTS_END"
    } >>"$HOSTS"
}

conf_is_ours() { [[ -L $ETC_CONF && $(readlink "$ETC_CONF") == "$CONF" ]]; }

install_conf_link() {
    mkdir -p /etc/slurm
    if [[ -L $ETC_CONF ]]; then
        local target
        target=$(readlink "$ETC_CONF")
        if [[ $target != "$CONF" ]]; then
            if grep -q 'slurmgen-cluster' "$target" 2>/dev/null; then
                die "$ETC_CONF points to another local cluster ($target): run 'down' with its SLURMGEN_CLUSTER_DIR first"
            fi
            [[ -e $BACKUP || -L $BACKUP ]] || mv "$ETC_CONF" "$BACKUP"
        fi
    elif [[ -e $ETC_CONF ]]; then
        [[ -e $BACKUP ]] && die "$ETC_CONF exists and so does $BACKUP: sort them out by hand"
        mv "$ETC_CONF" "$BACKUP"
        say "kept the existing $ETC_CONF as $BACKUP (restored by 'down')"
    fi
    ln -sfn "$CONF" "$ETC_CONF"
}

restore_conf() {
    if conf_is_ours; then
        rm -f "$ETC_CONF"
        if [[ -e $BACKUP || -L $BACKUP ]]; then
            mv "$BACKUP" "$ETC_CONF"
            say "restored $ETC_CONF from $BACKUP"
        else
            say "removed $ETC_CONF"
        fi
    fi
}

load_layout() {
    # sets MODE, GPUS (space list), NODES, CPUS, MEM, NET, CTLD_PORT, USE_UTS from the layout file
    [[ -f $LAYOUT ]] || return 1
    local k v
    while IFS='=' read -r k v; do
        case $k in
            MODE) MODE=$v ;;
            GPUS) GPUS=$v ;;
            NODES) NODES=$v ;;
            CPUS) CPUS=$v ;;
            MEM) MEM=$v ;;
            NET) NET=$v ;;
            CTLD_PORT) CTLD_PORT=$v ;;
            USE_UTS) USE_UTS=$v ;;
            PROFILE) PROFILE=$v ;;
            SLURM) SLURM=$v ;;
            SLURM_PREFIX) SLURM_PREFIX=$v ;;
            HOST_NAMES) HOST_NAMES=$v ;;
            GPU_TYPES) GPU_TYPES=$v ;;
        esac
    done <"$LAYOUT"
    use_slurm_prefix
}

# use_slurm_prefix: the built version's commands first on PATH (nothing for Debian's)
use_slurm_prefix() {
    [[ -n ${SLURM_PREFIX:-} ]] && PATH=$SLURM_PREFIX/bin:$SLURM_PREFIX/sbin:$PATH
    return 0
}

# slurm_version: the running daemons' version, e.g. 25.11.7
slurm_version() { "$(exe_of slurmd)" -V 2>/dev/null | awk '{ print $2 }'; }

node_names() {
    local i
    for ((i = 1; i <= NODES; i++)); do printf 'node%d\n' "$i"; done
}

# names of every network namespace and veth of ours that exists now (whatever the layout was)
our_netns() { ip netns list 2>/dev/null | awk -v p="^$PREFIX-node[0-9]+\$" '$1 ~ p { print $1 }'; }
our_links() {
    ip -o link show 2>/dev/null | awk -F': ' -v p="^$PREFIX(br0|v[0-9]+)(@.*)?\$" '$2 ~ p { sub(/@.*/, "", $2); print $2 }'
}

ctld_alive() { pid_alive "$RUN/slurmctld.pid" "$(exe_of slurmctld)"; }

leftovers() {
    # true if anything of ours exists: live daemons, namespaces, links, hosts block, conf link, cgroups
    local f
    for f in "$RUN"/*.pid; do
        [[ -e $f ]] || continue
        [[ -d /proc/$(head -n1 "$f" 2>/dev/null || echo x) ]] && return 0
    done
    [[ -n $(our_netns) || -n $(our_links) ]] && return 0
    [[ $OWNS_ETC == 1 ]] && hosts_block_present && return 0
    conf_is_ours && return 0
    [[ -n $(our_cgroups) ]] && return 0
    return 1
}

# why_no_production: prints why the production profile cannot run here (nothing when it can)
why_no_production() {
    local c probe
    for c in "${CGROUP_CONTROLLERS[@]}"; do
        if ! awk -v m="$CGROUP_ROOT/$c" '$2 == m && $3 == "cgroup" && $4 ~ /(^|,)rw(,|$)/ { ok = 1 } END { exit !ok }' /proc/mounts; then
            printf 'no read-write cgroup v1 %s controller at %s/%s\n' "$c" "$CGROUP_ROOT" "$c"
            return
        fi
        probe=$CGROUP_ROOT/$c/slurmgen-probe-$$
        if ! mkdir "$probe" 2>/dev/null; then
            printf 'cannot create cgroups under %s/%s\n' "$CGROUP_ROOT" "$c"
            return
        fi
        rmdir "$probe" 2>/dev/null || true
    done
}

# own_job ID: the job id is in this cluster's block (FIRST_JOB and the JOB_BLOCK ids after it)
own_job() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 >= FIRST_JOB && 10#$1 < FIRST_JOB + JOB_BLOCK)); }

# other_clusters_up: a slurmctld of another local cluster (another config) runs on this machine
other_clusters_up() {
    local line
    while read -r line; do
        [[ -n $line && $line != *" -f $CONF"* ]] && return 0
    done < <(pgrep -af -- 'slurmctld -c -f ' || true)
    return 1
}

# our_cgroups: the cgroups our slurmds made (task/cgroup, one slurm_nodeN root per slurmd): our
# jobs' (uid_U/job_J), and the roots themselves unless another local cluster shares them
our_cgroups() {
    local d shared=1
    other_clusters_up && shared=0
    local root
    for root in "$CGROUP_ROOT"/*/slurm_node[0-9]*; do
        [[ -d $root ]] || continue
        if [[ $shared == 1 ]]; then printf '%s\n' "$root"; continue; fi
        for d in "$root"/uid_*/job_*; do
            [[ -d $d ]] && own_job "${d##*/job_}" && printf '%s\n' "$d"
        done
    done
    return 0
}

# remove_cgroups: rmdir each of our cgroup trees, deepest first (their processes are gone by now)
remove_cgroups() {
    local root left=()
    for root in $(our_cgroups); do
        find "$root" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [[ -d $root ]] && left+=("$root")
    done
    [[ ${#left[@]} -eq 0 ]] || err "cgroups left behind (processes still in them?): ${left[*]}"
}

# node_states: "name state" per node, from sinfo (long state names, e.g. idle, mixed, down*)
node_states() { timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u -V; }

all_nodes_in() {
    # all_nodes_in REGEX: true when sinfo lists exactly NODES nodes, all in a state matching REGEX
    local states n=0 name st
    states=$(node_states) || return 1
    while read -r name st; do
        [[ -n $name ]] || continue
        [[ $st =~ ^($1)$ ]] || return 1
        n=$((n + 1))
    done <<<"$states"
    [[ $n -eq $NODES ]]
}

# ---------------------------------------------------------------------------------------------
# up

write_conf() {
    local ctld_addr=$1 host i g port addr
    host=$(short_host)
    local first_job=$FIRST_JOB
    [[ -s $STATE/next_job_id ]] && first_job=$(cat "$STATE/next_job_id")
    own_job "$first_job" || first_job=$FIRST_JOB
    mkdir -p "$STATE/etc"
    {
        cat <<EOF
# slurmgen-cluster: written by tests/localcluster.sh up; state dir $STATE
ClusterName=slurmgen
SlurmctldHost=$host($ctld_addr)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket.2,cred_expire=$CRED_EXPIRE
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# profile $PROFILE; proctrack/cgroup does not start in the node namespaces (no freezer namespace)
ProctrackType=proctrack/linuxproc
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
GresTypes=gpu
EOF
        if [[ $PROFILE == production ]]; then
            cat <<EOF
TaskPlugin=task/cgroup,task/affinity
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((MEM / CPUS))
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
EOF
            # the preempted job gets its --signal first; 23.02 renamed the setting
            if [[ ${SLURM:-system} == system ]]; then
                say "SlurmctldParameters=preempt_send_user_signal"
            else
                say "PreemptParameters=send_user_signal"
            fi
        else
            printf 'TaskPlugin=task/none\nSelectTypeParameters=CR_CPU\n'
        fi
        cat <<EOF
# nodes may declare more CPUs and memory than the machine has
SlurmdParameters=config_overrides
# het jobs are started only by the backfill scheduler: run it every second
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
MinJobAge=3600
JobRequeue=1
ReturnToService=2
FirstJobId=$first_job
MpiDefault=none
InactiveLimit=0
KillWait=5
SlurmdTimeout=30
Waittime=0
EOF
        # 23.02+ has no switch/none plugin (no SwitchType is the same)
        [[ ${SLURM:-system} == system ]] && say "SwitchType=switch/none"
        for ((i = 1; i <= NODES; i++)); do
            g=${GPU_LIST[i - 1]}
            addr=$(node_addr "$i")
            port=""
            [[ $MODE == loopback ]] && port=" Port=$((CTLD_PORT + i))"
            printf 'NodeName=node%d%s NodeAddr=%s%s CPUs=%d RealMemory=%d%s State=UNKNOWN\n' \
                "$i" "$(other_host_name "$i" " NodeHostname=")" "$addr" "$port" "$CPUS" "$MEM" \
                "$([[ $g -gt 0 ]] && printf ' Gres=gpu:%s%d' "$(gpu_type_of "$i" :)" "$g")"
        done
        if [[ $PROFILE == production ]]; then
            printf 'PartitionName=debug Nodes=node[1-%d] Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=%d\n' "$NODES" "$GRACE_TIME"
            printf 'PartitionName=urgent Nodes=node[1-%d] MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF\n' "$NODES"
        else
            printf 'PartitionName=debug Nodes=node[1-%d] Default=YES MaxTime=INFINITE State=UP\n' "$NODES"
        fi
    } >"$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
    if [[ $PROFILE == production ]]; then
        cat >"$STATE/etc/cgroup.conf" <<EOF
# slurmgen-cluster: written by tests/localcluster.sh up (profile production)
CgroupPlugin=cgroup/v1
CgroupMountpoint=$CGROUP_ROOT
ConstrainDevices=yes
ConstrainCores=yes
ConstrainRAMSpace=yes
EOF
    else
        rm -f "$STATE/etc/cgroup.conf"
    fi

    # fake GPUs: character devices with NVIDIA's major number, shared by all nodes (same machine)
    local maxg=0
    for g in "${GPU_LIST[@]}"; do ((g > maxg)) && maxg=$g; done
    mkdir -p "$STATE/dev"
    for ((i = 0; i < maxg; i++)); do
        [[ -c $STATE/dev/nvidia$i ]] || mknod -m 666 "$STATE/dev/nvidia$i" c 195 "$i"
    done
    # exactly those: a bigger layout's devices left here would look like GPUs no job was given
    for f in "$STATE"/dev/nvidia*; do
        [[ -e $f && ${f##*/nvidia} -ge $maxg ]] && rm -f "$f"
    done
    {
        printf 'AutoDetect=off\n'
        for ((i = 1; i <= NODES; i++)); do
            g=${GPU_LIST[i - 1]}
            [[ $g -gt 0 ]] || continue
            if [[ $g -eq 1 ]]; then
                printf 'NodeName=node%d Name=gpu%s File=%s/dev/nvidia0\n' "$i" "$(gpu_type_of "$i" "" " Type=")" "$STATE"
            else
                printf 'NodeName=node%d Name=gpu%s File=%s/dev/nvidia[0-%d]\n' "$i" "$(gpu_type_of "$i" "" " Type=")" "$STATE" "$((g - 1))"
            fi
        done
    } >"$STATE/etc/gres.conf"
}

# gpu_type_of I SUFFIX [PREFIX]: node I's --gpu-types type between PREFIX and SUFFIX, else nothing
gpu_type_of() {
    local types
    read -r -a types <<<"${GPU_TYPES:-}"
    [[ -n ${types[$1 - 1]:-} ]] && printf '%s%s%s' "${3:-}" "${types[$1 - 1]}" "$2"
    return 0
}

# other_host_name I PREFIX: PREFIX and node I's host name under --host-names other, else nothing
other_host_name() {
    [[ ${HOST_NAMES:-same} == other ]] && printf '%shost%d.cluster.test' "$2" "$1"
    return 0
}

node_addr() {
    if [[ $MODE == netns ]]; then printf '%s.%d\n' "$NET" "$((10 + $1))"; else printf '127.0.0.1\n'; fi
}

start_munged() {
    local keydir=$STATE/munge-key sockdir=$STATE/munge
    mkdir -p "$keydir" "$sockdir"
    chmod 0700 "$keydir"
    chmod 0755 "$sockdir"
    if [[ ! -s $keydir/munge.key ]]; then
        dd if=/dev/urandom of="$keydir/munge.key" bs=1024 count=1 status=none
    fi
    chmod 0600 "$keydir/munge.key"
    munged --force --socket="$sockdir/munge.socket.2" --key-file="$keydir/munge.key" \
        --pid-file="$RUN/munged.pid" --log-file="$STATE/log/munged.log" \
        --seed-file="$keydir/munged.seed" >"$STATE/log/munged.stdout" 2>&1 9>&- ||
        die "munged failed to start: $(tail -n 5 "$STATE/log/munged.log" "$STATE/log/munged.stdout" 2>/dev/null)"
    wait_for 5 "munged" pid_alive "$RUN/munged.pid" "$(exe_of munged)"
}

# wait_for SECONDS WHAT CMD...: poll CMD every 0.05 s
wait_for() {
    local secs=$1 what=$2 deadline
    shift 2
    deadline=$((SECONDS + secs))
    until "$@"; do
        if ((SECONDS >= deadline)); then
            fail_up "timed out after ${secs}s waiting for $what"
        fi
        sleep 0.05
    done
}

fail_up() {
    err "$1"
    local f
    for f in "$STATE"/log/slurmctld.log "$STATE"/log/slurmd-*.log "$STATE"/log/*.stdout "$STATE"/log/munged.log; do
        [[ -s $f ]] || continue
        err "---- tail $f"
        tail -n 15 "$f" >&2
    done
    err "---- sinfo"
    timeout 5 sinfo -N >&2 2>&1 || true
    err "the cluster is left as it is for inspection; clean up with: $0 down"
    exit 1
}

# try to build the bridge and per-node namespaces; return 1 (after undoing) where it is not allowed
setup_netns() {
    local i ns veth addr
    {
        ip link add "$BRIDGE" type bridge &&
            ip addr add "$NET.1/24" dev "$BRIDGE" &&
            ip link set "$BRIDGE" up
    } 2>"$STATE/log/netns-setup.err" || return 1
    for ((i = 1; i <= NODES; i++)); do
        ns=$PREFIX-node$i
        veth=${PREFIX}v$i
        addr=$NET.$((10 + i))
        {
            ip netns add "$ns" &&
                ip link add "$veth" type veth peer name "${PREFIX}p$i" &&
                ip link set "${PREFIX}p$i" netns "$ns" &&
                ip link set "$veth" master "$BRIDGE" &&
                ip link set "$veth" up &&
                ip -n "$ns" link set "${PREFIX}p$i" name eth0 &&
                ip -n "$ns" addr add "$addr/24" dev eth0 &&
                ip -n "$ns" link set eth0 up &&
                ip -n "$ns" link set lo up &&
                nsenter --net="/run/netns/$ns" true
        } 2>>"$STATE/log/netns-setup.err" || return 1
    done
    return 0
}

teardown_net() {
    local ns l
    for ns in $(our_netns); do
        ip netns del "$ns" 2>/dev/null || err "could not delete netns $ns"
    done
    for l in $(our_links); do
        ip link del "$l" 2>/dev/null || true
    done
}

start_slurmd() {
    # start_slurmd I: munged and slurmd for nodeI, in the node's own namespaces (mount, and net
    # and uts where allowed); both daemonize and write their pid files
    local i=$1 name=node$1 sd md
    sd=$(command -v slurmd)
    md=$(command -v munged)
    mkdir -p "$STATE/munge-$name"
    chmod 0755 "$STATE/munge-$name"
    local -a pre=()
    [[ $MODE == netns ]] && pre=(nsenter "--net=/run/netns/$PREFIX-node$i")
    local -a uts=()
    [[ $USE_UTS == 1 ]] && uts=(--uts)
    local hosts=""
    [[ $OWNS_ETC == 1 ]] || hosts=$STATE/etc/hosts
    # shellcheck disable=SC2016  # $1.. expand in the inner shell
    "${pre[@]}" unshare --mount --propagation private "${uts[@]}" -- sh -c '
        name=$1 state=$2 run=$3 sd=$4 md=$5 conf=$6 uts=$7 hosts=$9
        mount --bind "$state/munge-$name" "$state/munge" || exit 1
        [ -z "$hosts" ] || mount --bind "$hosts" /etc/hosts || exit 1
        "$md" --force --socket="$state/munge/munge.socket.2" --key-file="$state/munge-key/munge.key" \
            --pid-file="$run/munged-$name.pid" --log-file="$state/log/munged-$name.log" \
            --seed-file="$state/munge-key/munged-$name.seed" || exit 1
        [ "$uts" = 1 ] && { hostname "${8:-$name}" || exit 1; }
        exec "$sd" -f "$conf" -N "$name"' \
        sh "$name" "$STATE" "$RUN" "$sd" "$md" "$CONF" "$USE_UTS" "$(other_host_name "$i" "")" "$hosts" \
        >"$STATE/log/slurmd-$name.stdout" 2>&1 9>&-
}

cmd_up() {
    need_root
    local gpus_arg=1,1,2,2 nodes_arg="" cpus_arg=16 mem_arg=32000 cred_arg=120 names_arg=same types_arg=""
    local explicit_gpus=0 profile_arg=$PROFILE_DEFAULT slurm_arg=${SLURMGEN_SLURM:-system}
    while [[ $# -gt 0 ]]; do
        case $1 in
            --slurm) slurm_arg=${2:?--slurm needs a value}; shift 2 ;;
            --slurm=*) slurm_arg=${1#*=}; shift ;;
            --profile) profile_arg=${2:?--profile needs a value}; shift 2 ;;
            --profile=*) profile_arg=${1#*=}; shift ;;
            --gpus) gpus_arg=${2:?--gpus needs a value}; explicit_gpus=1; shift 2 ;;
            --gpus=*) gpus_arg=${1#*=}; explicit_gpus=1; shift ;;
            --nodes) nodes_arg=${2:?--nodes needs a value}; explicit_gpus=1; shift 2 ;;
            --nodes=*) nodes_arg=${1#*=}; explicit_gpus=1; shift ;;
            --cpus) cpus_arg=${2:?--cpus needs a value}; shift 2 ;;
            --cpus=*) cpus_arg=${1#*=}; shift ;;
            --mem) mem_arg=${2:?--mem needs a value}; shift 2 ;;
            --mem=*) mem_arg=${1#*=}; shift ;;
            --cred-expire) cred_arg=${2:?--cred-expire needs a value}; shift 2 ;;
            --cred-expire=*) cred_arg=${1#*=}; shift ;;
            --host-names) names_arg=${2:?--host-names needs a value}; shift 2 ;;
            --host-names=*) names_arg=${1#*=}; shift ;;
            --gpu-types) types_arg=${2:?--gpu-types needs a value}; shift 2 ;;
            --gpu-types=*) types_arg=${1#*=}; shift ;;
            -h | --help) usage; return 0 ;;
            *) die "up: unknown option '$1' (see $0 --help)" ;;
        esac
    done
    [[ $cpus_arg =~ ^[1-9][0-9]*$ ]] || die "--cpus wants a positive number"
    [[ $mem_arg =~ ^[1-9][0-9]*$ ]] || die "--mem wants megabytes (a positive number)"
    [[ $cred_arg =~ ^[1-9][0-9]*$ ]] || die "--cred-expire wants seconds"
    [[ $names_arg =~ ^(same|other)$ ]] || die "--host-names wants same or other (got '$names_arg')"
    [[ -z $types_arg || $types_arg =~ ^[a-z0-9]+(,[a-z0-9]+)*$ ]] || die "--gpu-types wants lower-case names, one per node (got '$types_arg')"
    [[ $profile_arg =~ ^(auto|production|plain)$ ]] || die "--profile wants auto, production or plain (got '$profile_arg')"
    [[ $NET =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "SLURMGEN_CLUSTER_NET wants three octets like 10.213.47"
    local want
    want=$(expand_layout "$gpus_arg" "$nodes_arg")
    local want_prefix=""
    if [[ $slurm_arg != system ]]; then
        slurm_release "$slurm_arg"
        [[ -f $REL_PREFIX/.slurmgen-built ]] || die "Slurm $slurm_arg is not built: run '$0 install --slurm $slurm_arg' first"
        want_prefix=$REL_PREFIX
    fi

    local c
    for c in "${NEEDED_CMDS[@]}"; do
        command -v "$c" >/dev/null 2>&1 || die "'$c' not found: run '$0 install' first"
    done

    SLURM=system SLURM_PREFIX=""
    if load_layout && ctld_alive; then
        if [[ $slurm_arg != "$SLURM" ]]; then
            die "already up with Slurm $SLURM; run '$0 down' first to change it to $slurm_arg"
        fi
        if [[ $explicit_gpus == 1 && $want != "$GPUS" ]]; then
            die "already up with GPUs ${GPUS// /,}; run '$0 down' first to change the layout to ${want// /,}"
        fi
        if [[ $profile_arg != auto && $profile_arg != "${PROFILE:-plain}" ]]; then
            die "already up with the ${PROFILE:-plain} profile; run '$0 down' first to change it to $profile_arg"
        fi
        if [[ $names_arg != "${HOST_NAMES:-same}" ]]; then
            die "already up with --host-names ${HOST_NAMES:-same}; run '$0 down' first to change it to $names_arg"
        fi
        if [[ -n $types_arg && ${types_arg//,/ } != "${GPU_TYPES:-}" ]]; then
            die "already up with --gpu-types '${GPU_TYPES:-}'; run '$0 down' first to change them"
        fi
        local problems
        problems=$(health_problems)
        if [[ -z $problems ]]; then
            say "already up ($MODE mode, GPUs ${GPUS// /,})"
            print_usage
            return 0
        fi
        err "up, but broken ($problems): restarting it"
        [[ $explicit_gpus == 1 ]] || want=$GPUS
        node_states >&2 || true
    fi
    if leftovers; then
        say "cleaning up what a previous run left"
        cmd_down >/dev/null
    fi

    local t0ns i
    t0ns=$(date +%s%N)
    SLURM=$slurm_arg SLURM_PREFIX=$want_prefix
    use_slurm_prefix
    GPUS=$want
    read -r -a GPU_LIST <<<"$GPUS"
    NODES=${#GPU_LIST[@]}
    CPUS=$cpus_arg
    MEM=$mem_arg
    CRED_EXPIRE=$cred_arg
    HOST_NAMES=$names_arg
    GPU_TYPES=${types_arg//,/ }
    read -r -a TYPE_LIST <<<"$GPU_TYPES"
    [[ ${#TYPE_LIST[@]} -eq 0 || ${#TYPE_LIST[@]} -eq $NODES ]] || die "--gpu-types names ${#TYPE_LIST[@]} types for $NODES nodes"
    local why
    why=$(why_no_production)
    PROFILE=$profile_arg
    if [[ $PROFILE == auto ]]; then
        PROFILE=production
        if [[ -n $why ]]; then
            PROFILE=plain
            err "the production profile cannot run here ($why): using the plain profile (no cgroups, no memory limits, no preemption)"
        fi
    elif [[ $PROFILE == production && -n $why ]]; then
        die "--profile production: $why"
    fi
    remove_cgroups   # a previous cluster's, if it was not taken down

    rm -rf "$STATE/log" "$STATE/spool" "$RUN"
    mkdir -p "$STATE/log" "$STATE/spool/ctld" "$RUN"
    for ((i = 1; i <= NODES; i++)); do mkdir -p "$STATE/spool/node$i"; done

    # network: one namespace per node where allowed, else the 127.0.0.1 fallback
    MODE=loopback
    if [[ $NONS != 1 ]]; then
        if setup_netns; then
            MODE=netns
        else
            err "network namespaces not available ($(tail -n1 "$STATE/log/netns-setup.err")): using the 127.0.0.1 fallback"
            teardown_net
        fi
    fi
    USE_UTS=0
    unshare --uts -- true 2>/dev/null && USE_UTS=1
    if [[ $HOST_NAMES == other && ($MODE != netns || $USE_UTS != 1) ]]; then
        teardown_net
        die "--host-names other needs a network and a UTS namespace per node, which cannot be made here"
    fi
    {
        printf 'MODE=%s\nGPUS=%s\nNODES=%s\nCPUS=%s\nMEM=%s\nNET=%s\nCTLD_PORT=%s\nUSE_UTS=%s\nPROFILE=%s\nSLURM=%s\nSLURM_PREFIX=%s\nHOST_NAMES=%s\nGPU_TYPES=%s\n' \
            "$MODE" "$GPUS" "$NODES" "$CPUS" "$MEM" "$NET" "$CTLD_PORT" "$USE_UTS" "$PROFILE" "$SLURM" "$SLURM_PREFIX" "$HOST_NAMES" "$GPU_TYPES"
    } >"$LAYOUT"

    local lines=()
    if [[ $MODE == netns ]]; then
        for ((i = 1; i <= NODES; i++)); do lines+=("$(node_addr "$i") node$i$(other_host_name "$i" " ")"); done
    else
        lines=("127.0.0.1 $(node_names | tr '\n' ' ')")
    fi
    mkdir -p "$STATE/etc"
    if [[ $OWNS_ETC == 1 ]]; then
        add_hosts_block "${lines[@]}"
    else
        # the nodes' own /etc/hosts: this cluster's names first, then the machine's without the
        # first cluster's block (its node names are the same)
        { printf '%s\n' "${lines[@]}"; hosts_without_block; } >"$STATE/etc/hosts"
    fi

    local ctld_addr=127.0.0.1
    [[ $MODE == netns ]] && ctld_addr=$NET.1
    write_conf "$ctld_addr"
    if [[ $OWNS_ETC == 1 ]]; then
        install_conf_link
        # a built Slurm's clients read their own etc/slurm.conf
        [[ -n $SLURM_PREFIX ]] && ln -sfn "$CONF" "$SLURM_PREFIX/etc/slurm.conf"
    fi

    start_munged
    slurmctld -c -f "$CONF" >"$STATE/log/slurmctld.stdout" 2>&1 9>&- || fail_up "slurmctld failed to start"
    wait_for 10 "slurmctld to answer" ctld_answers

    local pids=()
    for ((i = 1; i <= NODES; i++)); do
        start_slurmd "$i" &
        pids+=($!)
    done
    local p
    for p in "${pids[@]}"; do wait "$p" || fail_up "a slurmd failed to start"; done

    # record each slurmd's namespaces: `down` kills whatever (slurmstepd, jobs) is still in them
    local sd pidf
    sd=$(exe_of slurmd)
    : >"$RUN/namespaces"
    for ((i = 1; i <= NODES; i++)); do
        pidf=$RUN/slurmd-node$i.pid
        wait_for 10 "slurmd on node$i" pid_alive "$pidf" "$sd"
        p=$(head -n1 "$pidf")
        if [[ $MODE == netns ]]; then readlink "/proc/$p/ns/net" >>"$RUN/namespaces"; fi
        if [[ $USE_UTS == 1 ]]; then readlink "/proc/$p/ns/uts" >>"$RUN/namespaces"; fi
    done

    wait_for "$UP_TIMEOUT" "every node to be idle" all_nodes_in idle
    local ms=$((($(date +%s%N) - t0ns) / 1000000))
    say "up in ${ms} ms: $NODES node(s), GPUs ${GPUS// /,}, $CPUS CPUs and $MEM MB each ($MODE mode, $PROFILE profile, Slurm $(slurm_version))"
    print_usage
}

ctld_answers() { timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; }

print_usage() {
    cat <<EOF
  state dir: $STATE  (logs in $STATE/log, config in $STATE/etc)
  config:    $(if [[ $OWNS_ETC == 1 ]]; then echo "$ETC_CONF -> $CONF  (plain sbatch/srun/scontrol/sinfo find it)"; else echo "$CONF  (a second cluster: export SLURM_CONF=$CONF)"; fi)
  nodes:     $(node_names | tr '\n' ' ')partition debug (default), MaxTime=INFINITE
EOF
    if [[ $MODE == netns ]]; then
        say "  network:   bridge $BRIDGE $NET.1/24, node i at $NET.(10+i), names in $([[ $OWNS_ETC == 1 ]] && echo "$HOSTS" || echo "$STATE/etc/hosts (the nodes' /etc/hosts)")"
    else
        say "  network:   127.0.0.1 fallback, slurmd ports $((CTLD_PORT + 1))..$((CTLD_PORT + NODES))"
    fi
    cat <<EOF
  try:       sinfo -N -o '%N %T %G'; srun -N$NODES hostname; sbatch --parsable job.sh
  status:    $0 status     stop: $0 down
EOF
}

# ---------------------------------------------------------------------------------------------
# down

record_next_job_id() {
    # keep job ids growing across up/down cycles (slurmctld starts with -c, clean state)
    local max=0 n
    if [[ -s $STATE/next_job_id ]]; then max=$(($(cat "$STATE/next_job_id") - 1)); fi
    for n in $( { timeout 5 scontrol show job -o 2>/dev/null || true; cat "$STATE/log/slurmctld.log" 2>/dev/null || true; } |
        grep -oE '(JobId|HetJobId)=[0-9]+' | cut -d= -f2 | sort -n | tail -n1); do
        ((n > max)) && max=$n
    done
    printf '%d\n' "$((max + 1))" >"$STATE/next_job_id"
}

cancel_all_jobs() {
    local ids i
    ids=$(timeout 5 squeue -h -o '%F' 2>/dev/null | sort -u) || return 0
    [[ -n $ids ]] || return 0
    # shellcheck disable=SC2086  # word splitting of the id list is wanted
    timeout 10 scancel $ids 2>/dev/null || true
    for ((i = 0; i < 10; i++)); do
        [[ -z $(timeout 5 squeue -h -t R,CG,S -o '%A' 2>/dev/null) ]] && break
        sleep 0.1
    done
    say "cancelled jobs: $(printf '%s' "$ids" | tr '\n' ' ')"
}

cmd_down() {
    need_root
    # best effort: every step runs even when one fails (set -e is restored on return)
    local -
    set +e
    MODE=unknown NODES=0 SLURM_PREFIX=""
    load_layout || true
    local sd ns f
    sd=$(exe_of slurmd)

    if ctld_alive; then
        cancel_all_jobs
        record_next_job_id
    fi
    for f in "$RUN"/slurmd-*.pid; do
        [[ -e $f ]] || continue
        f=${f##*/}
        f=${f%.pid}
        stop_pidfile "$RUN/$f.pid" "$sd" "slurmd ${f#slurmd-}" &
    done
    wait
    # slurmstepd and job processes live on in the node namespaces: stop them too, and whatever is
    # in a namespace of ours that is still mounted (state dir lost, or a partial up)
    local nsids=()
    [[ -f $RUN/namespaces ]] && mapfile -t nsids <"$RUN/namespaces"
    for ns in $(our_netns); do
        nsids+=("net:[$(stat -L -c %i "/run/netns/$ns" 2>/dev/null)]")
    done
    kill_in_ns "${nsids[@]}"
    for f in "$RUN"/munged-node*.pid; do
        [[ -e $f ]] || continue
        f=${f##*/}
        f=${f%.pid}
        stop_pidfile "$RUN/$f.pid" "$(exe_of munged)" "munged for ${f#munged-}"
    done
    stop_pidfile "$RUN/slurmctld.pid" "$(exe_of slurmctld)" slurmctld
    stop_pidfile "$RUN/munged.pid" "$(exe_of munged)" munged
    if [[ -n $(our_cgroups) ]]; then
        remove_cgroups
        say "removed the nodes' cgroups"
    fi
    for f in "$CPU_CGROUP/$PREFIX"-node*; do  # node-slow cpu's
        release_cpu_cgroup "$f"
    done

    if [[ -n $(our_netns) || -n $(our_links) ]]; then
        teardown_net
        say "removed network namespaces and links"
    fi
    if [[ $OWNS_ETC == 1 ]]; then
        remove_hosts_block
        restore_conf
        [[ -n ${SLURM_PREFIX:-} && $(readlink "$SLURM_PREFIX/etc/slurm.conf" 2>/dev/null) == "$CONF" ]] &&
            rm -f "$SLURM_PREFIX/etc/slurm.conf"
    fi
    rm -rf "$RUN" "$STATE/spool" "$LAYOUT" "$STATE"/munge-node*
    # the nodes' /tmp is this machine's: node beat folders (slurmgen-beats-JOB-...) of our jobs'
    # ranks that were killed outright
    for f in "${TMPDIR:-/tmp}"/slurmgen-beats-*; do
        f=${f##*/slurmgen-beats-}
        own_job "${f%%-*}" && rm -rf "${TMPDIR:-/tmp}/slurmgen-beats-$f"
    done
    say "down (logs kept in $STATE/log)"
}

# ---------------------------------------------------------------------------------------------
# status

cmd_status() {
    MODE=unknown NODES=0 GPUS="" PROFILE="" SLURM_PREFIX=""
    load_layout || true
    if ! ctld_alive; then
        if leftovers; then
            say "broken: slurmctld is not running but parts of the cluster are left; run: $0 down"
            return 1
        fi
        say "down"
        return 3
    fi
    if ! load_layout; then
        say "broken: slurmctld runs but $LAYOUT is missing"
        return 1
    fi
    local problems
    problems=$(health_problems)
    say "up ($MODE mode, ${PROFILE:-plain} profile, Slurm $(slurm_version), GPUs ${GPUS// /,}, state dir $STATE)"
    timeout 10 sinfo -N -o '%N %9T %C %G' 2>&1 || true
    if [[ -n $problems ]]; then
        say "broken: $problems; restart with: $0 down && $0 up"
        return 1
    fi
    return 0
}

# health_problems: prints what is wrong with a running cluster (nothing when healthy)
health_problems() {
    local f out=()
    pid_alive "$RUN/munged.pid" "$(exe_of munged)" || out+=("munged is not running")
    for ((f = 1; f <= NODES; f++)); do
        pid_alive "$RUN/slurmd-node$f.pid" "$(exe_of slurmd)" || out+=("slurmd for node$f is not running")
        pid_alive "$RUN/munged-node$f.pid" "$(exe_of munged)" || out+=("munged for node$f is not running")
    done
    all_nodes_in "$HEALTHY_STATES" || out+=("not every node is idle/mixed/allocated")
    local IFS=';'
    printf '%s' "${out[*]}"
}

# ---------------------------------------------------------------------------------------------

cmd_bin() {
    # bin --slurm VERSION: PATH entries for that Slurm's commands (nothing for Debian's)
    local version=system
    [[ ${1:-} == --slurm ]] && version=${2:?--slurm needs a value}
    [[ ${1:-} == --slurm=* ]] && version=${1#*=}
    [[ $version == system ]] && return 0
    slurm_release "$version"
    printf '%s/bin:%s/sbin\n' "$REL_PREFIX" "$REL_PREFIX"
}

lock() {
    # one up/down at a time (several test sessions may call `up` at once); every daemon is
    # started with fd 9 closed, or it would hold the lock for its whole life
    mkdir -p "$(dirname "$STATE")"
    exec 9>"$STATE.lock"
    flock -w 120 9 || die "another localcluster.sh holds $STATE.lock"
}

cmd_node_restart() {
    # node-restart nodeN: a new munged and slurmd for a node whose slurmd was killed; Slurm (with
    # ReturnToService=2) gives the node jobs again once it registers
    local name=${1:-} i sd
    [[ $name =~ ^node([0-9]+)$ ]] || die "node-restart wants a node name like node3 (got '$name')"
    i=${BASH_REMATCH[1]}
    need_root
    load_layout || die "not up"
    use_slurm_prefix
    (( i >= 1 && i <= NODES )) || die "no $name: the cluster has node1..node$NODES"
    sd=$(exe_of slurmd)
    pid_alive "$RUN/slurmd-$name.pid" "$sd" && { say "$name: slurmd is running"; return 0; }
    stop_pidfile "$RUN/munged-$name.pid" "$(exe_of munged)" "munged for $name" >/dev/null || true
    start_slurmd "$i" || die "slurmd for $name failed to start"
    wait_for 10 "slurmd on $name" pid_alive "$RUN/slurmd-$name.pid" "$sd"
    local p
    p=$(head -n1 "$RUN/slurmd-$name.pid")
    [[ $USE_UTS == 1 ]] && readlink "/proc/$p/ns/uts" >>"$RUN/namespaces"
    say "$name: slurmd started again"
}

cmd_node_kill() {
    # node-kill nodeN: the node as if its power went: every process in its network namespace (in
    # the 127.0.0.1 fallback: its slurmd, munged and all they started) gets SIGKILL at once
    local name=${1:-} pids
    [[ $name =~ ^node[0-9]+$ ]] || die "node-kill wants a node name like node3 (got '$name')"
    need_root
    load_layout || die "not up"
    if [[ $MODE == netns ]]; then
        pids=$(ip netns pids "$PREFIX-$name")
    else
        pids=$(descendants "$(head -n1 "$RUN/slurmd-$name.pid")"; head -n1 "$RUN/munged-$name.pid")
    fi
    [[ -n $pids ]] || die "$name: no process to kill"
    # shellcheck disable=SC2086  # one pid per word
    kill -KILL $pids 2>/dev/null || true
    say "$name: killed $(wc -w <<<"$pids") process(es)"
}

# cpu cgroup v1 of a slowed node (node-slow cpu); not one Slurm knows, so its steps inherit it
CPU_CGROUP=$CGROUP_ROOT/cpu

cmd_node_slow() {
    # node-slow nodeN link RATE | cpu PERCENT: a degraded node, for the network check and the
    # straggler watch (netem, for delays, is not in every kernel; tbf and CFS bandwidth are)
    local name=${1:-} what=${2:-} value=${3:-} i pid
    [[ $name =~ ^node([0-9]+)$ ]] || die "node-slow wants a node name like node3 (got '$name')"
    i=${BASH_REMATCH[1]}
    need_root
    load_layout || die "not up"
    [[ $MODE == netns ]] || die "node-slow needs the nodes' network namespaces"
    case $what in
        link)
            [[ $value =~ ^[0-9]+[kmg]?bit$ ]] || die "node-slow $name link wants a rate like 200mbit (got '$value')"
            tc qdisc replace dev "${PREFIX}v$i" root tbf rate "$value" burst 64kb latency 500ms
            ip netns exec "$PREFIX-$name" tc qdisc replace dev eth0 root tbf rate "$value" burst 64kb latency 500ms
            say "$name: link at $value both ways" ;;
        cpu)
            if ! [[ $value =~ ^[0-9]+$ ]] || (( value < 1 )); then
                die "node-slow $name cpu wants a percentage of one CPU (got '$value')"
            fi
            mkdir -p "$CPU_CGROUP/$PREFIX-$name"
            echo 100000 >"$CPU_CGROUP/$PREFIX-$name/cpu.cfs_period_us"
            echo $((value * 1000)) >"$CPU_CGROUP/$PREFIX-$name/cpu.cfs_quota_us"
            for pid in $(ip netns pids "$PREFIX-$name"); do
                echo "$pid" >"$CPU_CGROUP/$PREFIX-$name/cgroup.procs" 2>/dev/null || true
            done
            say "$name: its processes at $value% of one CPU" ;;
        *) die "node-slow $name wants link RATE or cpu PERCENT (got '$what')" ;;
    esac
}

cmd_node_heal() {
    local name=${1:-} i
    [[ $name =~ ^node([0-9]+)$ ]] || die "node-heal wants a node name like node3 (got '$name')"
    i=${BASH_REMATCH[1]}
    need_root
    load_layout || die "not up"
    tc qdisc del dev "${PREFIX}v$i" root 2>/dev/null || true
    ip netns exec "$PREFIX-$name" tc qdisc del dev eth0 root 2>/dev/null || true
    release_cpu_cgroup "$CPU_CGROUP/$PREFIX-$name"
    say "$name: healed"
}

release_cpu_cgroup() {  # DIR: its processes back to the root cpu cgroup, and the cgroup removed
    local pid
    [[ -d $1 ]] || return 0
    while read -r pid; do echo "$pid" >"$CPU_CGROUP/cgroup.procs" 2>/dev/null || true; done <"$1/cgroup.procs"
    rmdir "$1" 2>/dev/null || err "could not remove $1"
}

descendants() {  # PID: it and every process below it
    local child
    echo "$1"
    for child in $(pgrep -P "$1"); do descendants "$child"; done
}

main() {
    local cmd=${1:-}
    [[ $# -gt 0 ]] && shift
    case $cmd in
        install) cmd_install "$@" ;;
        bin) cmd_bin "$@" ;;
        up) lock; cmd_up "$@" ;;
        down) lock; cmd_down "$@" ;;
        status) cmd_status "$@" ;;
        node-restart) lock; cmd_node_restart "$@" ;;
        node-kill) lock; cmd_node_kill "$@" ;;
        node-slow) lock; cmd_node_slow "$@" ;;
        node-heal) lock; cmd_node_heal "$@" ;;
        -h | --help | help) usage ;;
        *) usage >&2; exit 2 ;;
    esac
}

main "$@"
