"""Can this plan run on this cluster? Pure: a Plan and ClusterInfo in, a verdict and reasons out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from slurmgen.site import features, slurm_release
from slurmgen.site.cluster import ClusterInfo, Node
from slurmgen.plan.layout import Plan


@dataclass
class Verdict:
    ok: bool
    lines: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join(self.lines)

    def add(self, lines: list[str], failure: str = "") -> None:
        """More lines before the result line; with a failure, a check that passed fails with it
        as its result."""
        result = self.lines.pop() if self.lines and self.lines[-1].startswith("result:") else None
        self.lines.extend(lines)
        if failure and self.ok:
            result, self.ok = f"result: {failure}", False
        if result:
            self.lines.append(result)


def _describe(node: Node) -> str:
    why = f" ({node.reason})" if node.reason else ""
    return f"{node.name} is {node.state}{why}"


def _excluded(plan: Plan) -> set[str]:
    if not plan.spec.exclude:
        return set()
    import hostlist

    return set(hostlist.expand_hostlist(plan.spec.exclude))


def _suggest(usable: list[Node]) -> str:
    """The largest layout the usable nodes could take, in the user's terms."""
    counts = sorted((n.gpus for n in usable if n.gpus > 0), reverse=True)
    if not counts:
        return "no usable node in this partition has a GPU"
    layout = ",".join(map(str, counts))
    return f"suggestion: --nodes {len(counts)} --gpus {layout} fits the usable nodes here"


_UNITS_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def memory_mb(size: str | None) -> int | None:
    """--mem as megabytes (Slurm's default unit); None when not given or 0 (the whole node)."""
    if not size:
        return None
    m = re.fullmatch(r"(\d+)([KMGT]?)B?", size.upper())
    if not m or int(m.group(1)) == 0:
        return None
    return int(int(m.group(1)) * _UNITS_MB[m.group(2) or "M"])


def _short_of(node: Node, cpus: int, mem: int | None) -> str | None:
    """What a node with enough GPUs lacks for one of a component's nodes, if anything."""
    missing = []
    if node.cpus and node.cpus < cpus:
        missing.append(f"{node.cpus} CPUs (needs {cpus})")
    if mem and node.memory_mb and node.memory_mb < mem:
        missing.append(f"{node.memory_mb} MB of memory (needs {mem})")
    return f"{node.name} has the GPUs but {' and '.join(missing)}" if missing else None


# The releases the end-to-end suite runs on (tests/localcluster.sh --slurm).
TESTED_RELEASES = ((22, 5), (24, 11), (25, 11))


def assess(plan: Plan, cluster: ClusterInfo) -> Verdict:
    """Each component on the usable nodes of its own partition (and with its --constraint's features)."""
    spec = plan.spec
    named = list(dict.fromkeys(c.partition or cluster.default_partition for c in plan.groups))
    verdict = Verdict(ok=True, lines=[f"cluster: {cluster.version}; partition{'s' if len(named) > 1 else ''}"
                                      f" {', '.join(p or '(none)' for p in named)}"
                                      f"{'' if spec.partition else ' (default)'}"])
    release = slurm_release.parse(cluster.version)
    if release not in TESTED_RELEASES:
        verdict.lines.append(f"warning: slurmgen is tested on Slurm {', '.join(map(slurm_release.name, TESTED_RELEASES))};"
                             f" this cluster runs {cluster.version or 'an unknown version'}")
    missing = [p for p in named if p not in cluster.partitions]
    if missing:
        verdict.ok = False
        verdict.lines.append(f"cannot run: partition {missing[0]!r} does not exist;"
                             f" partitions here: {', '.join(cluster.partitions) or 'none'}")
        return verdict
    excluded = _excluded(plan)
    members = [n for n in cluster.nodes if n.partition in named and n.name not in excluded]
    usable = [n for n in members if n.usable]
    for node in {n.name: n for n in members if not n.usable}.values():
        verdict.lines.append(f"note: {_describe(node)}; not counted")
    taken: set[str] = set()
    per_component: dict[int, list[str]] = {}
    # Largest GPU counts first, each on the smallest nodes that suffice, so small jobs leave room.
    for comp in sorted(plan.groups, key=lambda c: (-c.gpus_per_node, c is plan.spare)):
        per_component[comp.index] = _place_component(plan, comp, members, taken, cluster.default_partition)
        verdict.ok = verdict.ok and "cannot run" not in per_component[comp.index][0]
    for index in sorted(per_component):
        verdict.lines += per_component[index]
    if verdict.ok:
        spares = f", and {plan.spare.nodes} spare node(s)" if plan.spare else ""
        verdict.lines.append(f"result: the layout can run (world size {plan.world_size}{spares})")
    else:
        once = list({n.name: n for n in usable}.values())  # a node in two of the partitions: once
        verdict.lines.append(f"result: the layout cannot run here; {_suggest(once)}")
    return verdict


def _place_component(plan: Plan, comp, members: list[Node], taken: set[str], default: str) -> list[str]:
    """The lines of one component: the nodes it can run on (added to taken), or why it cannot."""
    partition = comp.partition or default
    pinned = set(_hosts(comp.nodelist)) if comp.nodelist else None  # spares: no pins
    cpus = comp.tasks_per_node * comp.cpus_per_task
    mem = memory_mb(comp.mem) or (memory_mb(plan.spec.mem_per_cpu) or 0) * cpus or None
    own = [n for n in members if n.partition == partition and features.may_run_on(comp.constraint, n.features)]
    candidates = [n for n in own if n.usable and n.gpus >= comp.gpus_per_node and n.name not in taken
                  and (pinned is None or n.name in pinned)]
    short = [why for why in (_short_of(n, cpus, mem) for n in candidates) if why]
    fits = sorted((n for n in candidates if not _short_of(n, cpus, mem)), key=lambda n: (n.gpus, n.name))
    label = f"{'spares' if comp is plan.spare else f'component {comp.index}'} ({comp.nodes} node(s) x {comp.gpus_per_node} GPU(s))"
    if len(fits) >= comp.nodes:
        chosen = fits[:comp.nodes]
        taken.update(n.name for n in chosen)
        return [f"{label}: can run on {', '.join(n.name for n in chosen)}"]
    names = ", ".join(n.name for n in fits) or "none"
    featured = f" with {comp.constraint!r}" if comp.constraint else ""
    lines = [f"{label}: cannot run: needs {comp.nodes} node(s) with >= {comp.gpus_per_node}"
             f" GPU(s) in partition {partition}{featured}; {len(fits)} usable ({names})"]
    lines += [f"  {_describe(n)}" for n in own if not n.usable and n.gpus >= comp.gpus_per_node]
    return lines + [f"  {why}" for why in short]


def _hosts(text: str) -> list[str]:
    import hostlist

    return hostlist.expand_hostlist(text)
