"""What the job runtime on the nodes needs of a plan, as the one record the script carries
(slurmgen.runtime_spec.RuntimeSpec): the components and their launch functions, the retry and stop
budgets, the checks before training, the rendezvous rule. Pure: the runtime's policy is decided here,
once, and the template only writes the record."""

from __future__ import annotations

from slurmgen.plan.launch import gloo_socket_ifname, iface_prefixes
from slurmgen.plan.layout import Plan
from slurmgen.plan.spec import SHIPPED_MODULES
from slurmgen.runtime_spec import Component, Preflight, RuntimeSpec, StragglerRule

STOP_MARGIN = 10  # seconds of the grace left for the requeue after the ranks stopped
STOP_GRACE_MAX = 30  # a script that takes no stop file trains on this long after a warning, at most


def stop_wait(grace: int) -> int:
    """The ranks' time to checkpoint after the warning: it comes GRACE to GRACE + 30 s before the end,
    and STOP_MARGIN s are left for the requeue."""
    return max(grace - STOP_MARGIN, 5)


def ranks_import_slurmgen(spec) -> bool:
    """Whether the ranks import the nodes' slurmgen, which preflight then compares with the runtime's:
    its entry points do, and so do the rank hooks outside an image (in one the host's are mounted)."""
    return spec.target[1] in SHIPPED_MODULES or (spec.rank_hooks_on and not spec.container_image)


def runtime_spec(plan: Plan, model: str = "") -> RuntimeSpec:
    """The record for this plan. model: the local model path every node must see (preflight); the
    caller looks it up, since that is I/O (plan.layout.model_path)."""
    spec, slow = plan.spec, plan.spec.slow_nodes
    wait = stop_wait(spec.grace)
    nodes = sum(c.nodes for c in plan.groups)
    master_iface = ""
    if spec.nccl_socket_ifname and not iface_prefixes(spec.nccl_socket_ifname):
        master_iface = (gloo_socket_ifname(spec.nccl_socket_ifname) or "").split(",")[0]
    return RuntimeSpec(
        world_size=plan.world_size,
        components=tuple(Component(c.name, c.nodes, c.gpus_per_node, f"component_{c.index}", c.gpu_type)
                         for c in plan.components),
        spare_nodes=plan.spare.nodes if plan.spare else 0,
        python=spec.python,
        logs=spec.log_dir,
        max_restarts=spec.max_restarts,
        max_failures=spec.max_failures,
        hang_timeout=spec.hang_timeout,
        stop_wait=wait,
        # A script that does not take the stop file (no Trainer) keeps training this long after a
        # warning, then gets SIGTERM
        stop_grace=min(STOP_GRACE_MAX, wait) if spec.rank_hooks_on else 0,
        preflight=Preflight(*spec.target, model, slurmgen=ranks_import_slurmgen(spec)) if spec.preflight else None,
        # The network check between the nodes (spares included), and the straggler watch between ranks
        net_check=(slow.net_check_ratio, slow.net_min_gbps) if slow.net_check and nodes > 1 else None,
        stragglers=StragglerRule(slow.straggler_ratio, slow.straggler_window, slow.straggler_action)
        if slow.straggler_ratio and plan.world_size > 1 else None,
        master_port=spec.master_port,
        port_per_run=bool(plan.runs) and spec.master_port is not None,
        port_range=spec.port_range,
        master_addr_ip=spec.master_addr_ip,
        master_iface=master_iface,
        iface_prefixes=tuple(iface_prefixes(spec.nccl_socket_ifname)) if spec.nccl_socket_ifname else (),
    )

