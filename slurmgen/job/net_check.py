"""The network check's verdict: from every node's SLURMGEN_NETCHECK line (net_measure.py), each
node's figures and the nodes far below the others.

Every node received from both its ring neighbours while sending to both. A transfer is slow when
either end's link is: a slow node makes both its sends (or both its receives) slow, while each of
its neighbours has one slow transfer and one good one. So a node's figure is its best send and its
best receive, and the worse of the two is the node's: its neighbours keep theirs. With two nodes
every transfer has both at its ends, and which one is slow cannot be told."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from slurmgen.job import preflight

TAG = "SLURMGEN_NETCHECK"  # net_measure.py's lines

LATENCY_FLOOR_MS = 1.0  # a latency this much over the median at least, before it counts: small ones are noise


@dataclass(frozen=True)
class NodeFigures:
    host: str
    rank: int
    send_gbps: float  # the best of its two sends, as its neighbours received them
    receive_gbps: float  # the best of its two receives
    latency_ms: float  # the worse of its best send and best receive

    @property
    def gbps(self) -> float:
        return min(self.send_gbps, self.receive_gbps)


@dataclass(frozen=True)
class Verdict:
    lines: list[str]  # for the job log: the table, and what is slow
    slow: list[str] = field(default_factory=list)  # nodes to leave out, the slowest first
    figures: list[NodeFigures] = field(default_factory=list)


def figures(reports: list[dict]) -> list[NodeFigures]:
    by_rank = {r["rank"]: r for r in reports}
    world = len(by_rank)
    sends: dict[int, list] = {r: [] for r in by_rank}  # (latency, GB/s) of each transfer a rank made
    for r, report in by_rank.items():
        if "from_before" in report:
            sends.setdefault((r - 1) % world, []).append(report["from_before"])
            sends.setdefault((r + 1) % world, []).append(report["from_following"])
    out = []
    for r in sorted(by_rank):
        report = by_rank[r]
        receives = [report[k] for k in ("from_before", "from_following") if k in report]
        if not receives or not sends.get(r):
            continue
        latency = max(min(lat for lat, _ in sends[r]), min(lat for lat, _ in receives))
        out.append(NodeFigures(report["host"], r, max(bw for _, bw in sends[r]), max(bw for _, bw in receives), latency))
    return out


def verdict(reports: list[dict], nodes: int, ratio: float, floor_gbps: float, took: float) -> Verdict:
    """ratio: a node below this share of the median bandwidth (or above the median latency by its
    inverse, and LATENCY_FLOOR_MS more) is slow; floor_gbps: one below this is slow whatever the others."""
    if len(reports) != nodes:
        return Verdict([f"slurmgen: network check: {len(reports)} of {nodes} node(s) reported; not judged"
                        " (the nodes' own output is in the job log)"])
    found = figures(reports)
    backend = reports[0].get("backend", "?") if reports else "?"
    lines = [f"slurmgen: network check of {nodes} node(s) ({backend}) took {took:.1f} s:"]
    rows = [("node", "rank", "send GB/s", "receive GB/s", "latency ms")]
    rows += [(f.host, str(f.rank), f"{f.send_gbps:.2f}", f"{f.receive_gbps:.2f}", f"{f.latency_ms:.2f}") for f in found]
    lines += preflight.table(rows)
    first = min(reports, key=lambda r: r["rank"]) if reports else {}  # rank 0's: the job-wide figures
    lines += _transport(first)
    ladder = first.get("all_reduce_ms", [])
    if ladder:
        lines.append("  all-reduce: " + ", ".join(f"{_size(b)} {ms:.1f} ms" for b, ms in ladder)
                     + f" (bus bandwidth {_bus_gbps(ladder[-1], nodes):.2f} GB/s)")
    slow = judge(found, ratio, floor_gbps, lines)
    return Verdict(lines, slow, found)


def judge(found: list[NodeFigures], ratio: float, floor_gbps: float, lines: list[str]) -> list[str]:
    """The slow nodes (their lines added), the slowest first."""
    if len(found) < 2:
        return []
    bw = statistics.median(f.gbps for f in found)
    lat = statistics.median(f.latency_ms for f in found)
    why = {}
    for f in found:
        if f.gbps < ratio * bw:
            way = "sending" if f.send_gbps <= f.receive_gbps else "receiving"
            why[f.host] = (f.gbps, f"{f.gbps:.2f} GB/s {way} against a median of {bw:.2f} GB/s (below {ratio:g} of it)")
        elif f.gbps < floor_gbps:
            why[f.host] = (f.gbps, f"{f.gbps:.2f} GB/s, below the floor of {floor_gbps:g} GB/s (--net-min-gbps)")
        elif ratio and f.latency_ms > lat / ratio and f.latency_ms > lat + LATENCY_FLOOR_MS:
            why[f.host] = (f.gbps, f"latency {f.latency_ms:.2f} ms against a median of {lat:.2f} ms")
    if len(found) == 2 and why:
        lines.append("slurmgen: network check: the link between the two nodes is slow ("
                     + "; ".join(w for _, w in why.values()) + "); with two nodes it cannot be told which one")
        return []
    if why and len(why) == len(found):
        lines.append(f"slurmgen: network check: every node is below the floor of {floor_gbps:g} GB/s: the network"
                     " itself, not one node")
        return []
    for host, (_, text) in sorted(why.items(), key=lambda kv: kv[1][0]):
        lines.append(f"slurmgen: slow link: {host}: {text}")
    return sorted(why, key=lambda h: why[h][0])


def _transport(report: dict) -> list[str]:
    """What was measured, as the first node saw it: on an InfiniBand site, whether NCCL took the fabric
    (the ring is timed over gloo's TCP whatever the backend: see net_measure.py)."""
    transport = report.get("transport")
    if not transport:
        return []
    line = f"  measured over: ring {transport['ring']}; all-reduce {transport['all_reduce']}"
    if "network Socket" in transport["all_reduce"]:
        line += " (NCCL's TCP sockets: on an InfiniBand site, NCCL does not see the fabric here)"
    return [line]


def _size(size: int) -> str:
    return f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB"


def _bus_gbps(entry, nodes: int) -> float:
    """All-reduce bus bandwidth (as nccl-tests define it): 2(n-1)/n of the buffer moved per second."""
    size, ms = entry
    return 2 * (nodes - 1) / nodes * size / (ms / 1e3) / 1e9 if ms else 0.0
