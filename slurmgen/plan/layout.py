"""Plan: how a JobSpec maps onto Slurm. Pure functions, no I/O.

Nodes with the same GPU count form one heterogeneous-job component, in order of first appearance,
so the script grows with the number of distinct counts, not with nodes. Node ranks run through
component 0's nodes first, then component 1's, so global rank 0 sits on the first node of
component 0, which is MASTER_ADDR.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Optional

from slurmgen.frozen_records import frozen
from slurmgen.plan.script_facts import ScriptFacts, script_facts
from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import describe_seconds, scale_mem, train_arg


@frozen
class Component:
    """One het component: a group of equal nodes, with its node and rank offsets."""

    index: int
    nodes: int
    gpus_per_node: int
    node_offset: int        # node ranks that come before this component
    rank_offset: int        # global ranks that come before this component
    tasks_per_node: int     # 1 (torchrun/accelerate agent per node) or one per GPU (srun)
    cpus_per_task: int
    nodelist: str = ""      # compressed host list when the user pinned nodes
    mem: str = ""           # memory per node: --mem, or --mem-per-gpu times the GPUs of a node
    gpu_type: str = ""      # typed GRES (--gpu-type), "" for any GPU
    partition: str = ""     # its nodes' --partition, "" for the cluster's default
    constraint: str = ""    # its nodes' --constraint, "" for none
    place: str = ""         # "partition big, constraint a100" where components differ in them, for its name

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def tasks(self) -> int:
        """Tasks in this component's step; explicit because a step inherits the job's task count."""
        return self.nodes * self.tasks_per_node

    @property
    def name(self) -> str:
        """As the script's header and the job log name it: "component 0 (2 node(s) x 1 GPU)"."""
        gpus = "GPU" if self.gpus_per_node == 1 else "GPUs"
        typed = f" {self.gpu_type}" if self.gpu_type else ""
        place = f", {self.place}" if self.place else ""
        return f"component {self.index} ({self.nodes} node(s) x {self.gpus_per_node}{typed} {gpus}{place})"


@frozen
class Plan:
    """The job laid out: the spec, its het components, a sweep's runs and the spare nodes."""

    spec: JobSpec
    components: tuple[Component, ...]
    runs: tuple = ()  # a sweep's runs (slurmgen.plan.sweep.Run); empty for a single job
    spare: Optional[Component] = None  # --spares: idle nodes as wide as the widest component's

    @property
    def groups(self) -> tuple[Component, ...]:
        """The allocation's het components: the layout's, then the spare nodes'."""
        return self.components + ((self.spare,) if self.spare else ())

    @property
    def array(self) -> str:
        """sbatch --array for a sweep on a uniform layout ("" otherwise: one job per run)."""
        if not self.runs or self.heterogeneous:
            return ""
        from slurmgen.plan.sweep import array_spec
        return array_spec(len(self.runs), self.spec.max_parallel)

    @property
    def facts(self) -> ScriptFacts:
        """What the templates print of the job beyond its layout (slurmgen.plan.script_facts)."""
        return script_facts(self.spec)

    @property
    def heterogeneous(self) -> bool:
        return len(self.groups) > 1

    @property
    def total_nodes(self) -> int:
        return sum(c.nodes for c in self.components)

    @property
    def world_size(self) -> int:
        return sum(c.ranks for c in self.components)

    def node_ranks(self) -> list[tuple[int, list[int]]]:
        """(node rank, global ranks on it) in node-rank order."""
        out = []
        for comp in self.components:
            for i in range(comp.nodes):
                first = comp.rank_offset + i * comp.gpus_per_node
                out.append((comp.node_offset + i, list(range(first, first + comp.gpus_per_node))))
        return out


def model_path(spec: JobSpec) -> str:
    """The --model_name_or_path training argument when it names a local path (for preflight)."""
    value = train_arg(spec.train_args, "--model_name_or_path")
    if value and os.path.exists(value):
        return os.path.abspath(value)
    return ""


def group_nodes(spec: JobSpec) -> list[tuple[tuple[int, str, str, str], list[int]]]:
    """(GPU count, GPU type, partition, constraint) -> node positions having them, in order of first
    appearance: one het component each."""
    groups: dict[tuple[int, str, str, str], list[int]] = {}
    for position, kind in enumerate(zip(spec.gpus, spec.gpu_types, spec.partitions, spec.constraints)):
        groups.setdefault(kind, []).append(position)
    return list(groups.items())


def _place(partition: str, constraint: str, differ: tuple[bool, bool]) -> str:
    """What sets a component apart beyond its GPUs: its partition, its constraint (where they differ)."""
    words = [f"partition {partition or '(default)'}"] if differ[0] else []
    return ", ".join(words + ([f"constraint {constraint or '(none)'}"] if differ[1] else []))


def materialize(spec: JobSpec) -> Plan:
    """The whole job layout, computed once; templates only loop over it."""
    if spec.nodelist:
        import hostlist  # only to compress pinned node names; keeps plain renders light

    per_gpu_tasks = spec.launcher == "srun"
    components = []
    node_offset = rank_offset = 0
    differ = (len(set(spec.partitions)) > 1, len(set(spec.constraints)) > 1)
    for index, ((count, gpu_type, partition, constraint), positions) in enumerate(group_nodes(spec)):
        hosts = [spec.nodelist[p] for p in positions] if spec.nodelist else []
        tasks = count if per_gpu_tasks else 1
        cpus = spec.cpus_per_gpu if per_gpu_tasks else spec.cpus_per_node or spec.cpus_per_gpu * count
        mem = scale_mem(spec.mem_per_gpu, count) if spec.mem_per_gpu else spec.mem or ""
        components.append(Component(
            index=index, nodes=len(positions), gpus_per_node=count,
            node_offset=node_offset, rank_offset=rank_offset,
            tasks_per_node=tasks, cpus_per_task=cpus,
            nodelist=hostlist.collect_hostlist(hosts) if hosts else "", mem=mem, gpu_type=gpu_type,
            partition=partition, constraint=constraint, place=_place(partition, constraint, differ),
        ))
        node_offset += len(positions)
        rank_offset += len(positions) * count
    spare = None
    if spec.spares:  # it may stand in for any node: the most GPUs, CPUs and memory of any component
        widest = max(components, key=lambda c: (c.gpus_per_node, c.cpus_per_task))
        spare = replace(widest, index=len(components), nodes=spec.spares, node_offset=node_offset,
                        rank_offset=rank_offset, nodelist="")
    runs = ()
    if spec.sweep:
        from slurmgen.plan.sweep import expand
        runs = tuple(expand(spec.sweep, spec.sweep_mode, spec.train_args))
    return Plan(spec=spec, components=tuple(components), runs=runs, spare=spare)


def summary(plan: Plan) -> str:
    """The few lines `render` prints: components, ranks per node, world size."""
    lines = []
    kind = "heterogeneous job" if plan.heterogeneous else "job"
    lines.append(f"{kind}: {plan.total_nodes} node(s), world size {plan.world_size},"
                 f" launcher {plan.spec.launcher}")
    for comp in plan.components:
        first, last = comp.rank_offset, comp.rank_offset + comp.ranks - 1
        where = f" on {comp.nodelist}" if comp.nodelist else ""
        typed = f" {comp.gpu_type}" if comp.gpu_type else ""
        where += f", {comp.place}" if comp.place else ""
        lines.append(f"  component {comp.index}: {comp.nodes} node(s) x {comp.gpus_per_node}{typed} GPU(s){where},"
                     f" node ranks {comp.node_offset}-{comp.node_offset + comp.nodes - 1},"
                     f" global ranks {first}-{last}")
    if plan.spare:
        lines.append(f"  spares: {plan.spare.nodes} node(s) x {plan.spare.gpus_per_node} GPU(s), idle until one replaces"
                     " a lost or blamed node")
    lines.append(time_line(plan.spec))
    lines.append(f"  ranks per node: {ranks_per_node(plan)}")
    if plan.spec.script:
        lines.append(code_line(plan.spec))
    if plan.runs:
        lines.append(sweep_summary(plan))
    return "\n".join(lines)


def code_line(spec: JobSpec) -> str:
    """Which code every run of the job runs: the snapshot (and its commit), or the script in place."""
    if spec.code:
        return f"  code: {spec.code.describe()}"
    return f"  code: {spec.script} in place, as it is when each run starts (--no-snapshot)"


def time_line(spec: JobSpec) -> str:
    """The time limit as Slurm reads it (25:00 is 25 minutes), and when the ranks checkpoint."""
    if spec.time is None:
        limit = "none given (the partition's default)"
    elif spec.time_seconds is None:
        limit = f"{spec.time} (the partition's own)"
    else:
        limit = f"{spec.time} = {describe_seconds(spec.time_seconds)}"
    return f"  time limit: {limit}; the ranks checkpoint and the job requeues {spec.grace} s before it"


def sweep_summary(plan: Plan) -> str:
    """How the sweep runs, and each run's output directory."""
    count, most = len(plan.runs), plan.spec.max_parallel or len(plan.runs)
    how = (f"one job array (--array={plan.array})" if plan.array else
           f"{count} heterogeneous jobs, run i starting after run i-{most} ends (Slurm refuses arrays of het jobs)")
    lines = [f"sweep: {count} run(s), at most {min(most, count)} at once, as {how}"]
    lines += [f"  run {r.index}: {r.label()} -> {r.output_dir}" for r in plan.runs]
    return "\n".join(lines)


# Beyond this many nodes, ranks per node are summarised per component rather than listed.
LISTED_NODES = 16


def ranks_per_node(plan: Plan) -> str:
    """'0 | 1 | 2,3 | 4,5', or for large layouts one entry per component:
    '8 each on node ranks 0-511 (global 0-4095); 4 each on node ranks 512-1023 (...)'."""
    if plan.total_nodes <= LISTED_NODES:
        return " | ".join(_span(ranks) for _, ranks in plan.node_ranks())
    return "; ".join(f"{c.gpus_per_node} each on node ranks {c.node_offset}-{c.node_offset + c.nodes - 1}"
                     f" (global {c.rank_offset}-{c.rank_offset + c.ranks - 1})" for c in plan.components)


def _span(ranks: list[int]) -> str:
    return ",".join(map(str, ranks)) if len(ranks) <= 2 else f"{ranks[0]}-{ranks[-1]}"
