# shellcheck shell=bash
# slurmgen's job runtime, its shell part: what a generated batch script does around its launch
# lines. The script exports its runtime spec (SLURMGEN_RUNTIME_SPEC, slurmgen/runtime_spec.py: one
# JSON record, checked here for its format first), defines one launch function per component
# (component_0, ...), sources this file (the path `python3 -m slurmgen.job.runtime --format`
# prints) and calls run_job with them. It runs in the batch shell on the job's first node, where
# Slurm's signals arrive. Everything that decides (the rendezvous, preflight's verdict, fail-fast,
# retries and exclusion, requeues, the time-limit stop, the hang watch) is slurmgen.job, in Python,
# which run_job starts and which starts the launch functions from the job's folder.
#
# From the script: PYTHON, TARGET (what every rank runs), CONTAINER_SRUN CONTAINER_EXEC (the steps'
# container words) where a container is used, EARLY_WARNING (1: a warning came before run_job).

RUNTIME_DIR=$(dirname "${BASH_SOURCE[0]}")

run_job() {  # LAUNCH_FUNCTION... (one per component, in order)
    local settings runtime
    # The spec's format checked, the rendezvous found, the job's folder made (prepare.py): JOB_DIR,
    # HET, the files' and the rendezvous' exported variables, PREFLIGHT COMPONENT_NODES COMPONENT_GPUS
    # (for the steps), IFACE_PATTERN where nodes pick their interface by prefix.
    settings=$("$PYTHON" -m slurmgen.job.prepare) || exit 1
    eval "$settings"
    if [[ -n ${IFACE_PATTERN:-} ]]; then  # nodes may name their interfaces differently
        export -f node_iface
    fi
    # The ranks beat into a folder on their node, which one rank publishes (train/contract.py); in an
    # image too, where the script's container words mount the node's TMPDIR (or /tmp) at the same path.
    export SLURMGEN_NODE_BEATS="slurmgen-beats-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}-$$"
    trap ': > "$SLURMGEN_STOP_FILE"' USR2 TERM  # the time-limit warning (or a preemption's TERM)
    (( ! EARLY_WARNING )) || : > "$SLURMGEN_STOP_FILE"
    # The launch functions and what they read, for the runtime to run each in a bash of its own.
    { declare -p PYTHON RUNTIME_DIR HET PREFLIGHT COMPONENT_NODES COMPONENT_GPUS TARGET CONTAINER_SRUN CONTAINER_EXEC 2>/dev/null
      declare -f het_group preflight_step net_check_step probe_step "$@"; } > "$JOB_DIR/launch.sh"
    # Started with the warning signals ignored until it sets its own handlers (see command.py).
    (trap '' USR2 TERM; exec "$PYTHON" -m slurmgen.job) &
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

# ---- each step's node: its own interface for NCCL's prefixes (rendezvous.py's rule, per node) ------

node_iface() {  # NCCL's prefixes to this node's exact interface name, for gloo (every step runs it)
    GLOO_SOCKET_IFNAME=$(sed -n 's/^ *\([^:]*\):.*/\1/p' /proc/net/dev | LC_ALL=C sort | grep -m1 -E "$IFACE_PATTERN") ||
        { echo "slurmgen: --nccl-socket-ifname $NCCL_SOCKET_IFNAME: no interface of $(hostname) starts so" >&2; return 1; }
    export GLOO_SOCKET_IFNAME
}
