# shellcheck shell=bash
# slurmgen's job runtime: what a generated batch script does around its launch lines. The script
# sets the settings below, defines one launch function per component (component_0, ...), sources
# this file (the path `python3 -m slurmgen.job.runtime` prints) and calls run_job with them. It runs
# in the batch shell on the job's first node, where Slurm's signals arrive.
#
# Settings: PYTHON LOGS MAX_RESTARTS MAX_FAILURES STOP_WAIT STOP_GRACE HANG_TIMEOUT, MASTER_PORT
# or PORT_LOW and PORT_SPAN, MASTER_ADDR_IP MASTER_IFACE IFACE_PATTERN; arrays PREFLIGHT (KIND
# TARGET MODEL; empty: no preflight), COMPONENT_NAMES COMPONENT_NODES COMPONENT_GPUS, and
# CONTAINER_SRUN CONTAINER_EXEC (the steps' container words) where a container is used. From the
# environment: SLURMGEN_WORLD_SIZE, EARLY_WARNING (1: a warning came before run_job).

RUNTIME_DIR=$(dirname "${BASH_SOURCE[0]}")
POLL_SECONDS=${SLURMGEN_POLL_SECONDS:-1}
SETTLE_SECONDS=${SLURMGEN_SETTLE_SECONDS:-10}  # the others' time to end after the first failure

run_job() {  # LAUNCH_FUNCTION... (one per component, in order)
    count_layout
    find_rendezvous || exit 1
    begin_run
    (( ${#PREFLIGHT[@]} == 0 )) || run_preflight
    start_monitor
    local i
    for i in "${!COMPONENT_NAMES[@]}"; do
        start_component "${COMPONENT_NAMES[i]}" "$(component_nodes "$i")" "${@:$((i + 1)):1}"
    done
    if (( HANG_TIMEOUT )); then  # a rank idle that long: all stacks to $LOGS/hang-report-JOB.txt, then a retry
        "$PYTHON" -m slurmgen.job.hangs "$HANG_TIMEOUT" "$SLURMGEN_WORLD_SIZE" "$HANG_GROUPS" &
        HANG_WATCH=$!
    fi
    watch_components
}

count_layout() {  # NODES; HET (1: a het job); RETRY_LAYOUT: GPUS:NODES per component; HANG_GROUPS: HET_GROUP:NODES per srun
    local i retry=() hang=()
    NODES=0 HET=$(( ${#COMPONENT_NAMES[@]} > 1 ))
    for i in "${!COMPONENT_NODES[@]}"; do
        NODES=$(( NODES + COMPONENT_NODES[i] ))
        retry+=("${COMPONENT_GPUS[i]}:${COMPONENT_NODES[i]}")
        hang+=("$( (( HET )) && echo "$i" || echo -):${COMPONENT_NODES[i]}")
    done
    RETRY_LAYOUT=$(IFS=,; echo "${retry[*]}") HANG_GROUPS=$(IFS=,; echo "${hang[*]}")
}

het_group() {  # I: srun's flag for component I of a heterogeneous job, nothing for one component
    (( ! HET )) || echo "--het-group=$1"
}

component_nodes() {  # I: component I's node list (empty outside an allocation)
    local var=SLURM_JOB_NODELIST
    (( ! HET )) || var=SLURM_JOB_NODELIST_HET_GROUP_$1
    echo "${!var:-}"
}

# ---- rendezvous: rank 0's node (the first of component 0) hosts it --------------------------------

node_iface() {  # NCCL's prefixes to this node's exact interface name, for gloo (every step runs it)
    GLOO_SOCKET_IFNAME=$(sed -n 's/^ *\([^:]*\):.*/\1/p' /proc/net/dev | LC_ALL=C sort | grep -m1 -E "$IFACE_PATTERN") ||
        { echo "slurmgen: --nccl-socket-ifname $NCCL_SOCKET_IFNAME: no interface of $(hostname) starts so" >&2; return 1; }
    export GLOO_SOCKET_IFNAME
}

find_rendezvous() {
    local iface=$MASTER_IFACE first
    if [[ -n $IFACE_PATTERN ]]; then  # nodes may name their interfaces differently
        export IFACE_PATTERN
        export -f node_iface
        node_iface || return 1
        iface=$GLOO_SOCKET_IFNAME
    fi
    first=$(component_nodes 0)
    MASTER_ADDR=$(scontrol show hostnames "${first:?not in a Slurm job}" | head -n 1)
    if (( MASTER_ADDR_IP )); then  # an IPv4 address: names may not resolve on the fast network
        MASTER_NODE=$MASTER_ADDR
        if [[ -n $iface ]]; then  # this shell runs on rank 0's node, which owns the interface
            [[ ${SLURMD_NODENAME:-} == "$MASTER_NODE" ]] &&
                MASTER_ADDR=$(ip -4 -o addr show dev "$iface" 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
        else
            MASTER_ADDR=$(getent ahostsv4 "$MASTER_NODE" | awk '{ print $1; exit }')
        fi
        if [[ -z $MASTER_ADDR || $MASTER_ADDR == "$MASTER_NODE" ]]; then
            echo "slurmgen: --master-addr-ip: no IPv4 address for $MASTER_NODE${iface:+ on interface $iface}" >&2
            return 1
        fi
    fi
    MASTER_PORT=${MASTER_PORT:-$(job_port)}
    export MASTER_ADDR MASTER_PORT
}

job_port() {  # two jobs on a node get different ports (slurmgen.plan.launch.job_port, for the submit path)
    echo $(( PORT_LOW + SLURM_JOB_ID % PORT_SPAN ))
}

# ---- this run's files in the log directory -------------------------------------------------------

begin_run() {
    # Stop file: made on a warning; outcome: "stopped|finished STEP".
    export SLURMGEN_STOP_FILE="$LOGS/.stop-$SLURM_JOB_ID" SLURMGEN_OUTCOME_FILE="$LOGS/.outcome-$SLURM_JOB_ID"
    # Finished is final (Slurm 25.11 may requeue a preempted job twice).
    grep -qs ^finished "$SLURMGEN_OUTCOME_FILE" && { echo "slurmgen: finished in an earlier run"; exit 0; }
    rm -f "$SLURMGEN_STOP_FILE" "$SLURMGEN_OUTCOME_FILE"
    RESTARTS_FILE="$LOGS/.restarts-$SLURM_JOB_ID"
    RESTARTS=$(cat "$RESTARTS_FILE" 2>/dev/null || echo 0)
    echo "slurmgen: job $SLURM_JOB_ID (restart $RESTARTS of at most $MAX_RESTARTS) on $(hostname): world size $SLURMGEN_WORLD_SIZE, master $MASTER_ADDR:$MASTER_PORT"
    # Failures (crashes, hangs, lost nodes) are counted apart from restarts; ranks beat here.
    FAILURES_FILE="$LOGS/.failures-$SLURM_JOB_ID"
    "$PYTHON" -m slurmgen.job.retry begin "$FAILURES_FILE" "$MAX_FAILURES" "$RETRY_LAYOUT"
    (( $? != 3 )) || exit 1  # 3: too many failures
    export SLURMGEN_HEARTBEAT_DIR="$LOGS/.heartbeat-$SLURM_JOB_ID"
    rm -rf "$SLURMGEN_HEARTBEAT_DIR"
}

# ---- preflight: a node that differs, or lacks the target or model, stops the job -----------------

run_preflight() {
    local report log="$LOGS/.preflight-$SLURM_JOB_ID" i
    report=$(<"$RUNTIME_DIR/node_report.py")  # run on every node by the steps' own Python
    : > "$log"
    for i in "${!COMPONENT_NAMES[@]}"; do
        # shellcheck disable=SC2046  # het_group: one word or none
        srun $(het_group "$i") --nodes="${COMPONENT_NODES[i]}" --ntasks="${COMPONENT_NODES[i]}" --ntasks-per-node=1 \
            --cpus-per-task=1 ${CONTAINER_SRUN[@]+"${CONTAINER_SRUN[@]}"} ${CONTAINER_EXEC[@]+"${CONTAINER_EXEC[@]}"} \
            "$PYTHON" -c "$report" "${PREFLIGHT[@]}" "${COMPONENT_GPUS[i]}" >> "$log" &
    done
    until wait; do :; done  # a warning (USR2) interrupts wait
    "$PYTHON" -m slurmgen.job.preflight "$log" "$NODES" "$FAILURES_FILE" "$MAX_FAILURES" "$RETRY_LAYOUT"
    case $? in 0) ;; 3) exit 0 ;; *) exit 1 ;; esac  # 3: requeued without the odd node
    # bf16 or fp16: what every GPU of the job supports (none seen: empty); every rank trains in it.
    export SLURMGEN_PRECISION; SLURMGEN_PRECISION=$(sed -n 's/^SLURMGEN_PRECISION=//p' "$log")
    rm -f "$log"
}

# ---- the monitor: the first failure ends the job; a warning asks every rank to checkpoint --------

start_monitor() {
    COMPONENT_PIDS=() COMPONENT_LABELS=() COMPONENT_HOSTS=()
    STOP_REQUESTED=0 STOP_DEADLINE=0 STOP_GRACE_END=0
    FIRST_FAILURE=0 SETTLE_END=0 RUNNING=0 WHY=crash SUSPECT="" HANG_WATCH=""
    trap on_time_warning USR2 TERM
    (( EARLY_WARNING )) && on_time_warning
}

start_component() {  # NAME NODES LAUNCH_FUNCTION: the function runs as its own process (its srun)
    COMPONENT_LABELS+=("$1") COMPONENT_HOSTS+=("$2")
    "$3" &
    COMPONENT_PIDS+=("$!")
}

on_time_warning() {  # USR2 (--signal), or TERM where a site preempts without it
    (( STOP_REQUESTED )) && return
    kill ${HANG_WATCH:+"$HANG_WATCH"} 2>/dev/null  # no beats while ranks checkpoint
    echo "slurmgen: time limit or preemption warning: asking every rank to checkpoint"
    STOP_REQUESTED=1 STOP_DEADLINE=$(( SECONDS + STOP_WAIT )) STOP_GRACE_END=$(( SECONDS + STOP_GRACE ))
    : > "$SLURMGEN_STOP_FILE"
}

stop_components() {  # TERM to the tasks (to srun it cancels a het job from 23.02), KILL 30 s on
    scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null || kill -TERM "${COMPONENT_PIDS[@]}" 2>/dev/null
    for _ in $(seq 1 30); do
        kill -0 "${COMPONENT_PIDS[@]}" 2>/dev/null || return 0
        sleep 1
    done
    kill -KILL "${COMPONENT_PIDS[@]}" 2>/dev/null
}

requeue_or_finish() {  # exit status
    local how="" step=""
    kill ${HANG_WATCH:+"$HANG_WATCH"} 2>/dev/null
    if (( ! STOP_REQUESTED )); then  # a failure: a retry, or the end
        trap '' USR2 TERM  # a requeue's TERM is no warning
        (( $1 )) && "$PYTHON" -m slurmgen.job.retry failed "$FAILURES_FILE" "$MAX_FAILURES" "$RETRY_LAYOUT" "$WHY" "$SUSPECT" && exit 0
        exit "$1"
    fi
    read -r how step 2>/dev/null < "$SLURMGEN_OUTCOME_FILE"
    if [[ $how == finished ]]; then
        echo "slurmgen: training finished before the warning could stop it; not requeueing"
    elif (( $1 )) && [[ $how != stopped ]]; then
        echo "slurmgen: ranks failed after the warning, no checkpoint saved; not requeueing" >&2
    elif scontrol show job "$SLURM_JOB_ID" | grep -q 'PreemptTime=[0-9]'; then
        # Slurm requeues it at the end of its GraceTime.
        echo "slurmgen: ${step:+checkpoint saved at step $step; }job $SLURM_JOB_ID preempted: Slurm requeues it"
        exec sleep 3600
    elif "$PYTHON" -m slurmgen.job.retry gone; then  # a node was lost
        "$PYTHON" -m slurmgen.job.retry failed "$FAILURES_FILE" "$MAX_FAILURES" "$RETRY_LAYOUT" node; exit
    elif (( RESTARTS < MAX_RESTARTS )); then
        echo "slurmgen: ${step:+checkpoint saved at step $step; }requeueing job $SLURM_JOB_ID (restart $(( RESTARTS + 1 )) of at most $MAX_RESTARTS)"
        scontrol requeue "$SLURM_JOB_ID" && { echo $(( RESTARTS + 1 )) > "$RESTARTS_FILE"; rm -f "$FAILURES_FILE.running"; exit 0; }
        echo "slurmgen: scontrol requeue failed" >&2
        exit 1
    else  # unfinished training must not look like success
        echo "slurmgen: training unfinished; not requeueing: $MAX_RESTARTS restart(s) used" >&2
        exit 1
    fi
    exit "$1"
}

reap_components() {  # name failed components, count running ones
    local i rc
    RUNNING=0
    for i in "${!COMPONENT_PIDS[@]}"; do
        [[ -n "${COMPONENT_PIDS[i]}" ]] || continue
        if kill -0 "${COMPONENT_PIDS[i]}" 2>/dev/null; then
            RUNNING=$(( RUNNING + 1 ))
            continue
        fi
        wait "${COMPONENT_PIDS[i]}"
        rc=$?
        COMPONENT_PIDS[i]=""
        if (( rc != 0 )); then
            echo "slurmgen: ${COMPONENT_LABELS[i]} failed with exit status $rc (nodes ${COMPONENT_HOSTS[i]})" >&2
            (( FIRST_FAILURE )) || FIRST_FAILURE=$rc SETTLE_END=$(( SECONDS + SETTLE_SECONDS ))
        fi
    done
}

watch_components() {
    while :; do
        reap_components
        if (( HANG_TIMEOUT && ! FIRST_FAILURE )) && [[ -e $SLURMGEN_HEARTBEAT_DIR/hung ]]; then
            WHY=hang SUSPECT=$(<"$SLURMGEN_HEARTBEAT_DIR/hung") FIRST_FAILURE=1 SETTLE_END=0
        fi
        if (( FIRST_FAILURE && (RUNNING == 0 || SECONDS >= SETTLE_END) )); then
            (( RUNNING == 0 )) || { echo "slurmgen: stopping the components still running" >&2; stop_components; }
            requeue_or_finish "$FIRST_FAILURE"
        fi
        if (( RUNNING == 0 )); then
            echo "slurmgen: all components finished"
            requeue_or_finish 0
        fi
        # Rank hooks on: a script that takes no stop file (no Trainer) is stopped STOP_GRACE s on.
        if (( STOP_GRACE && STOP_REQUESTED && SECONDS > STOP_GRACE_END )) && [[ ! -e $SLURMGEN_HEARTBEAT_DIR/stoppable ]]; then
            echo "slurmgen: your code takes no stop file (it is not a Hugging Face Trainer): stopping it;" \
                "the steps since its own last checkpoint are lost" >&2
            stop_components
            requeue_or_finish 0
        fi
        if (( STOP_REQUESTED && SECONDS > STOP_DEADLINE )); then
            echo "slurmgen: ranks did not stop within $STOP_WAIT s of the warning; stopping them" >&2
            stop_components
            requeue_or_finish 0
        fi
        sleep "$POLL_SECONDS"
    done
}
