"""`--gpus auto`: a layout from the GPUs that are free now (pure, but for `query_nodes`).

Each node of the partition offers the GPUs it has minus those in use, fewer where its free CPUs
(--cpus-per-gpu) or free memory (--mem-per-gpu) cannot feed that many, none where it is down,
drained, excluded or lacks the --constraint feature. The choice: fewest nodes first, then fewest
distinct GPU counts (het components), then nodes in name order; it is pinned with --nodelist.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import subprocess
from dataclasses import dataclass
from typing import Optional

from slurmgen.site.cluster import ClusterError, gpu_count

_UNUSABLE = ("DOWN", "DRAIN", "FAIL", "INVAL", "MAINT", "FUTURE", "POWER", "NOT_RESPONDING", "UNKNOWN", "RESERVED")


@dataclass(frozen=True)
class NodeState:
    name: str
    partitions: tuple[str, ...]
    gpus: int
    gpus_used: int
    cpus: int
    cpus_used: int
    mem_mb: int
    mem_used_mb: int
    state: str
    features: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class Request:
    world_size: Optional[int] = None   # exactly this many GPUs
    max_gpus: Optional[int] = None     # or as many as are free, up to this
    min_gpus: int = 1                  # and at least this
    nodes: Optional[int] = None        # on exactly this many nodes
    partition: Optional[str] = None
    constraint: Optional[str] = None
    exclude: tuple[str, ...] = ()
    cpus_per_gpu: int = 4
    mem_per_gpu_mb: int = 0


@dataclass(frozen=True)
class Choice:
    counts: tuple[int, ...]            # GPUs per node, equal counts together (one component each)
    nodes: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (node, why)

    @property
    def world_size(self) -> int:
        return sum(self.counts)


class NoFit(Exception):
    """Nothing fits now: the message says what is missing and the closest layout that fits."""


def _fields(line: str) -> dict[str, str]:
    # Values never hold spaces here except OS=..., whose words have no "=" and are skipped.
    out = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out.setdefault(key, value)
    return out


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0


def parse_nodes(text: str) -> list[NodeState]:
    """`scontrol show node -o -d` -> one NodeState per node."""
    nodes = []
    for line in text.splitlines():
        f = _fields(line)
        if "NodeName" not in f:
            continue
        features = f.get("ActiveFeatures", "")
        nodes.append(NodeState(
            name=f["NodeName"], partitions=tuple(p for p in f.get("Partitions", "").split(",") if p),
            gpus=gpu_count(f.get("Gres", "")), gpus_used=gpu_count(f.get("GresUsed", "")),
            cpus=_int(f.get("CPUTot", "0")), cpus_used=_int(f.get("CPUAlloc", "0")),
            mem_mb=_int(f.get("RealMemory", "0")), mem_used_mb=_int(f.get("AllocMem", "0")),
            state=f.get("State", ""),
            features=tuple(x for x in features.split(",") if x and x != "(null)"),
            reason=f.get("Reason", "")))
    return nodes


def query_nodes() -> list[NodeState]:
    try:
        proc = subprocess.run(["scontrol", "show", "node", "-o", "-d"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise ClusterError("scontrol not found: is this a Slurm login node?") from None
    except subprocess.TimeoutExpired:
        raise ClusterError("scontrol show node did not answer within 30 s") from None
    if proc.returncode != 0:
        raise ClusterError(f"scontrol show node failed: {proc.stderr.strip() or 'no output'}")
    return parse_nodes(proc.stdout)


def default_partition() -> Optional[str]:
    proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    return next((p[:-1] for p in proc.stdout.split() if p.endswith("*")), None)


def _features_ok(constraint: Optional[str], features: tuple[str, ...]) -> bool:
    """A plain feature or an &-list of them (Slurm's richer expressions are left to Slurm)."""
    if not constraint:
        return True
    return all(word in features for word in re.split(r"[&,]", constraint) if word)


def free_gpus(node: NodeState, req: Request) -> tuple[int, str]:
    """GPUs a job can have on this node now, and why it is fewer than the node has (or "")."""
    if req.partition and req.partition not in node.partitions:
        return 0, f"not in partition {req.partition}"
    if node.name in req.exclude:
        return 0, "excluded"
    bad = next((word for word in _UNUSABLE if word in node.state.upper()), None)
    if bad:
        return 0, node.state.lower() + (f" ({node.reason})" if node.reason else "")
    if not _features_ok(req.constraint, node.features):
        return 0, f"lacks feature {req.constraint}"
    if node.gpus == 0:
        return 0, "no GPUs"
    free = node.gpus - node.gpus_used
    why = f"{node.gpus_used} of {node.gpus} GPUs in use" if node.gpus_used else ""
    by_cpu = (node.cpus - node.cpus_used) // max(req.cpus_per_gpu, 1)
    if by_cpu < free:
        free, why = by_cpu, f"{node.cpus - node.cpus_used} free CPUs for --cpus-per-gpu {req.cpus_per_gpu}"
    if req.mem_per_gpu_mb:
        by_mem = (node.mem_mb - node.mem_used_mb) // req.mem_per_gpu_mb
        if by_mem < free:
            free, why = by_mem, f"{node.mem_mb - node.mem_used_mb} MB free for --mem-per-gpu"
    return max(free, 0), why


def size_mb(size: str) -> int:
    """'16G' -> 16384, '500M' -> 500, '1T' -> 1048576 (Slurm's units, MB by default)."""
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    unit = size[-1].upper() if size[-1].isalpha() else "M"
    return int(int(size.rstrip("KMGTkmgt")) * scale[unit])


def _natural(name: str):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _fewest_nodes(offer: dict[str, int], want: int) -> Optional[int]:
    """The fewest nodes that can hold `want` GPUs (each node at least one), or None."""
    total = 0
    for k, free in enumerate(sorted(offer.values(), reverse=True), start=1):
        total += free
        if total >= want:
            return k if k <= want else None
    return None


def _pick(offer: dict[str, int], world: int, k: int) -> Optional[dict[str, int]]:
    """k nodes with `world` GPUs in all, fewest distinct counts: one count for all, else two
    (g1 on n1 nodes, g2 < g1 on the rest), else the k largest offers cut down to the total.
    Nodes offering at least g are nested sets, so counting them decides each candidate."""
    if not k or k > len(offer) or k > world:
        return None
    names = sorted(offer, key=_natural)
    ascending = sorted(offer.values())

    def at_least(g: int) -> int:
        return len(ascending) - bisect.bisect_left(ascending, g)

    def take(counts: list[tuple[int, int]]) -> dict[str, int]:
        chosen: dict[str, int] = {}
        for g, n in counts:  # largest counts first, each from the nodes not chosen yet
            fit = [x for x in names if offer[x] >= g and x not in chosen][:n]
            chosen.update((x, g) for x in fit)
        return chosen

    if world % k == 0 and at_least(world // k) >= k:
        return take([(world // k, k)])
    for g1 in range(ascending[-1], 1, -1):
        for n1 in range(1, k):
            rest = world - n1 * g1
            if rest < k - n1 or rest % (k - n1):
                continue
            g2 = rest // (k - n1)
            if g2 < g1 and at_least(g1) >= n1 and at_least(g2) >= k:
                return take([(g1, n1), (g2, k - n1)])
    largest = sorted(names, key=lambda n: (-offer[n], _natural(n)))[:k]
    if sum(offer[n] for n in largest) < world:
        return None
    chosen, spare = {}, world - k  # every node keeps at least one GPU
    for n in largest:
        extra = min(offer[n] - 1, spare)
        chosen[n], spare = 1 + extra, spare - extra
    return chosen


def choose(nodes: list[NodeState], req: Request) -> Choice:
    """The layout; NoFit with what is missing and the closest layout that fits."""
    offer, skipped = {}, []
    for node in sorted(nodes, key=lambda n: _natural(n.name)):
        free, why = free_gpus(node, req)
        if free > 0:
            offer[node.name] = free
        if why:
            skipped.append((node.name, why if free == 0 else f"{why}: {free} usable"))
    total = sum(offer.values())
    if req.world_size is not None:
        want = req.world_size
    else:
        want = min(req.max_gpus or total, total)
        if want < max(req.min_gpus, 1):
            raise NoFit(f"--min-gpus {req.min_gpus}: only {total} GPU(s) are free now{_free_text(offer)}"
                        + _skipped_text(skipped))
    picked = _pick(offer, want, req.nodes or _fewest_nodes(offer, want) or 0)
    if picked is None:
        raise NoFit(_missing(offer, want, req) + _skipped_text(skipped))
    order = sorted(picked, key=lambda n: (picked[n], _natural(n)))  # equal counts adjacent
    return Choice(tuple(picked[n] for n in order), tuple(order), tuple(skipped))


def alternatives(nodes: list[NodeState], req: Request, chosen: Choice) -> list[tuple[str, Choice]]:
    """The layouts considered beside the one that can start now, for Slurm's start estimate:
    the one this request gets once the GPUs, CPUs and memory in use are free again (fewer nodes
    or, with --max-gpus, more GPUs), when it differs. Down, drained and excluded nodes stay out."""
    idle = [dataclasses.replace(n, gpus_used=0, cpus_used=0, mem_used_mb=0) for n in nodes]
    try:
        other = choose(idle, req)
    except NoFit:
        return []
    if (other.counts, other.nodes) == (chosen.counts, chosen.nodes):
        return []
    if other.world_size > chosen.world_size:
        why = f"{other.world_size} GPUs"
    elif len(other.nodes) < len(chosen.nodes):
        why = f"{len(other.nodes)} nodes"
    else:
        why = "the same size"
    return [(f"{why}, once the resources in use are free", other)]


def _skipped_text(skipped) -> str:
    """The nodes that offer less than they have, and why: the first eight."""
    if not skipped:
        return ""
    shown = "; ".join(f"{name}: {why}" for name, why in skipped[:8])
    more = f"; and {len(skipped) - 8} more" if len(skipped) > 8 else ""
    return f" (not all usable: {shown}{more})"


def _free_text(offer: dict[str, int]) -> str:
    if not offer or len(offer) > 16:
        return f" on {len(offer)} node(s)" if offer else ""
    names = sorted(offer, key=_natural)
    return f" ({', '.join(f'{n}: {offer[n]}' for n in names)})"


def _missing(offer: dict[str, int], want: int, req: Request) -> str:
    """What is missing, and the largest request below it that fits now."""
    total = sum(offer.values())
    where = f" on {req.nodes} node(s)" if req.nodes else ""
    text = f"--world-size {want}{where}: {total} GPU(s) are free now{_free_text(offer)}"
    k = req.nodes
    best = sum(sorted(offer.values(), reverse=True)[:k]) if k else total
    size = min(want - 1, best)
    closest = _pick(offer, size, k or _fewest_nodes(offer, size) or 0) if size > 0 else None
    if closest:
        names = sorted(closest, key=lambda n: (closest[n], _natural(n)))
        text += (f"; the closest layout that fits now: --world-size {size}"
                 f" ({','.join(str(closest[n]) for n in names)} on {','.join(names)})")
    return text


def explain(choice: Choice) -> str:
    import hostlist
    text = (f"--gpus auto: {','.join(map(str, choice.counts))} on {hostlist.collect_hostlist(list(choice.nodes))}"
            f" (world size {choice.world_size}, from the GPUs free now)")
    for name, why in choice.skipped:
        text += f"\n  {name}: {why}"
    return text
