# shellcheck shell=bash
# slurmgen's job runtime, its shell part: what a generated batch script does around its launch
# lines. The script sets the settings below, defines one launch function per component
# (component_0, ...), sources this file (the path `python3 -m slurmgen.job.runtime` prints) and
# calls run_job with them. It runs in the batch shell on the job's first node, where Slurm's
# signals arrive. Everything that decides (preflight's verdict, fail-fast, retries and exclusion,
# requeues, the time-limit stop, the hang watch) is slurmgen.job.runtime, in Python, which run_job
# starts and which starts the launch functions from the job's folder.
#
# Settings: PYTHON LOGS MAX_RESTARTS MAX_FAILURES STOP_WAIT STOP_GRACE HANG_TIMEOUT SPARES, MASTER_PORT
# or PORT_LOW and PORT_SPAN, MASTER_ADDR_IP MASTER_IFACE IFACE_PATTERN; arrays PREFLIGHT (KIND
# TARGET MODEL; empty: no preflight), NET_CHECK (RATIO FLOOR; empty: no network check), STRAGGLERS
# (RATIO WINDOW ACTION; empty: no straggler watch), COMPONENT_NAMES COMPONENT_NODES COMPONENT_GPUS (the last
# two with the spare nodes' group after the components where SPARES > 0), and
# CONTAINER_SRUN CONTAINER_EXEC (the steps' container words) where a container is used. From the
# environment: SLURMGEN_WORLD_SIZE, EARLY_WARNING (1: a warning came before run_job).

RUNTIME_DIR=$(dirname "${BASH_SOURCE[0]}")

run_job() {  # LAUNCH_FUNCTION... (one per component, in order)
    local job_dir="$LOGS/.slurmgen-$SLURM_JOB_ID" i runtime
    HET=$(( ${#COMPONENT_NODES[@]} > 1 ))  # the spares make a group too
    find_rendezvous || exit 1
    mkdir -p "$job_dir" || exit 1
    # What the ranks read and write: the stop file (made at a warning), rank 0's word on how
    # training ended ("stopped|finished STEP"), and one heartbeat file per rank.
    export SLURMGEN_STOP_FILE="$job_dir/stop" SLURMGEN_OUTCOME_FILE="$job_dir/outcome" SLURMGEN_HEARTBEAT_DIR="$job_dir/beats"
    # The ranks beat into a folder on their node, which one rank publishes (train/contract.py);
    # not in a container, whose /tmp the hang watch's look from outside may not see.
    [[ -n "${CONTAINER_SRUN[*]}${CONTAINER_EXEC[*]}" ]] || export SLURMGEN_NODE_BEATS="slurmgen-beats-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}-$$"
    rm -f "$SLURMGEN_STOP_FILE"  # an earlier run's
    trap ': > "$SLURMGEN_STOP_FILE"' USR2 TERM  # the time-limit warning (or a preemption's TERM)
    (( ! EARLY_WARNING )) || : > "$SLURMGEN_STOP_FILE"
    # The launch functions and what they read, for the runtime to run each in a bash of its own.
    { declare -p PYTHON RUNTIME_DIR HET PREFLIGHT COMPONENT_NODES COMPONENT_GPUS TARGET CONTAINER_SRUN CONTAINER_EXEC 2>/dev/null
      declare -f het_group preflight_step net_check_step probe_step "$@"; } > "$job_dir/launch.sh"
    local args=(--job "$SLURM_JOB_ID" --logs "$LOGS" --world-size "$SLURMGEN_WORLD_SIZE" --max-restarts "$MAX_RESTARTS"
                --max-failures "$MAX_FAILURES" --hang-timeout "$HANG_TIMEOUT" --stop-wait "$STOP_WAIT" --stop-grace "$STOP_GRACE")
    (( ${#PREFLIGHT[@]} == 0 )) || args+=(--preflight)
    (( ${#NET_CHECK[@]} == 0 )) || args+=(--net-check "${NET_CHECK[@]}")
    if (( ${#STRAGGLERS[@]} )); then  # the ranks time their forward passes over the window (train/compute_time.py)
        args+=(--stragglers "${STRAGGLERS[@]}")
        export SLURMGEN_STRAGGLER_WINDOW=${STRAGGLERS[1]}
    fi
    (( ! ${SPARES:-0} )) || args+=(--spares "$SPARES")
    for i in "${!COMPONENT_NAMES[@]}"; do
        args+=(--component "${COMPONENT_NAMES[i]}" "${COMPONENT_NODES[i]}" "${COMPONENT_GPUS[i]}" "${@:$((i + 1)):1}")
    done
    # Started with the warning signals ignored until it sets its own handlers (see command.py).
    (trap '' USR2 TERM; exec "$PYTHON" -m slurmgen.job "${args[@]}") &
    runtime=$!
    while kill -0 "$runtime" 2>/dev/null; do wait "$runtime"; done  # a warning interrupts wait
    wait "$runtime"
    exit  # with the runtime's status
}

het_group() {  # I: srun's flag for component I of a heterogeneous job, nothing for one component
    (( ! HET )) || echo "--het-group=$1"
}

component_nodes() {  # I: component I's node list (empty outside an allocation)
    local var=SLURM_JOB_NODELIST
    (( ! HET )) || var=SLURM_JOB_NODELIST_HET_GROUP_$1
    echo "${!var:-}"
}

preflight_step() {  # I: every node of component I reports its software, one line each (node_report.py)
    # shellcheck disable=SC2046  # het_group: one word or none
    exec srun $(het_group "$1") --nodes="${COMPONENT_NODES[$1]}" --ntasks="${COMPONENT_NODES[$1]}" --ntasks-per-node=1 \
        --cpus-per-task=1 ${CONTAINER_SRUN[@]+"${CONTAINER_SRUN[@]}"} ${CONTAINER_EXEC[@]+"${CONTAINER_EXEC[@]}"} \
        "$PYTHON" -c "$(<"$RUNTIME_DIR/node_report.py")" "${PREFLIGHT[@]}" "${COMPONENT_GPUS[$1]}"
}

net_check_step() {  # I FIRST WORLD: component I's nodes, ranks FIRST on of WORLD, time their links (net_measure.py)
    # shellcheck disable=SC2046  # het_group: one word or none
    TORCH_CPP_LOG_LEVEL=ERROR exec srun $(het_group "$1") --nodes="${COMPONENT_NODES[$1]}" --ntasks="${COMPONENT_NODES[$1]}" \
        --ntasks-per-node=1 --cpus-per-task=1 ${CONTAINER_SRUN[@]+"${CONTAINER_SRUN[@]}"} ${CONTAINER_EXEC[@]+"${CONTAINER_EXEC[@]}"} \
        "$PYTHON" -c "$(<"$RUNTIME_DIR/net_measure.py")" "$2" "$3"
}

probe_step() {  # GROUP NODE: a step of nothing on NODE; the runtime's look for a lost node (--spares)
    exec srun --het-group="$1" --nodelist="$2" --nodes=1 --ntasks=1 --overlap --mem=0 --gres=none --quiet true
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
