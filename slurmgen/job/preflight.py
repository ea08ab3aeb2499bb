"""Preflight's verdict: compare the reports every node wrote (SLURMGEN_PREFLIGHT lines, from
node_report.py), and say which node differs from the others or lacks what the job needs."""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass

FIELDS = ("python", "torch", "nccl", "transformers", "trl", "datasets")


def problems(reports: list[dict], nodes: int, slurmgen: str = "") -> list[tuple[str, str, str, str]]:
    """(node, what, found, expected) for every difference. One report per node of each component:
    Slurm may put two components on one node (a 1,1,2,2 job on 8-GPU nodes), and that is fine:
    each component has its own torchrun agent, node rank and GPUs there. slurmgen: the version the
    ranks must import (the job runtime's own), where they import slurmgen at all (its train.* entry
    points, the rank hooks), else ""; a node that has another (a container's image) differs."""
    found = [("(job)", "node reports", str(len(reports)), str(nodes))] if len(reports) != nodes else []
    found += [(r["host"], "slurmgen", r["slurmgen"], slurmgen) for r in reports
              if slurmgen and r.get("slurmgen", slurmgen) != slurmgen]
    for f in FIELDS:
        usual = collections.Counter(r[f] for r in reports).most_common(1)[0][0] if reports else ""
        found += [(r["host"], f, r[f], usual) for r in reports if r[f] != usual]
    for r in reports:
        seen, _, want = r["gpus"].partition(" of ")
        found += [(r["host"], "GPUs visible", seen, want)] if seen != want else []
        found += [(r["host"], f, r[f], "found") for f in ("target", "model", "interface")
                  if r.get(f, "found").startswith("MISSING")]
    return found


BF16_CAPABILITY = 8.0  # Ampere and newer compute bf16 in hardware


def precision(reports: list[dict]) -> tuple[str, str]:
    """(bf16 or fp16, a log line when the nodes' GPUs differ in bf16): the one dtype every GPU of
    the job computes in, so ranks never all-reduce bf16 gradients with loss-scaled fp16 ones.
    ("", "") when no node reported a GPU model (no nvidia-smi: each rank decides, as before)."""
    models = {}  # node -> (name, bf16)
    for r in reports:
        for name, _mib, capability in r.get("gpu_models", []):
            try:
                bf16 = float(capability) >= BF16_CAPABILITY
            except ValueError:
                continue
            models.setdefault(r["host"], (name, bf16))
            if not bf16:
                models[r["host"]] = (name, bf16)
    if not models:
        return "", ""
    choice = "bf16" if all(bf16 for _, bf16 in models.values()) else "fp16"
    if len({bf16 for _, bf16 in models.values()}) == 1:
        return choice, ""
    nodes = "; ".join(f"{host}: {name} ({'bf16' if bf16 else 'no bf16'})" for host, (name, bf16) in sorted(models.items()))
    return choice, f"slurmgen: the job's GPUs differ in bf16 support ({nodes}): every rank trains in fp16"


def read_reports(path, tag: str = "SLURMGEN_PREFLIGHT") -> list[dict]:
    """The JSON of the TAG lines every node wrote into one file: node_report.py's (SLURMGEN_PREFLIGHT),
    net_measure.py's (SLURMGEN_NETCHECK)."""
    with open(path) as fh:
        return [json.loads(line.split(" ", 1)[1]) for line in fh if line.startswith(tag + " ")]


def table(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as aligned lines for the job log, indented under the line that names them."""
    widths = [max(map(len, column)) for column in zip(*rows)]
    return ["  " + "  ".join(map(str.ljust, row, widths)).rstrip() for row in rows]


@dataclass(frozen=True)
class Verdict:
    passed: bool
    lines: list[str]  # for the job log: the table of differences, or what passed
    culprit: str = ""  # the one node that differs (a retry without it may work), else ""
    precision: str = ""  # bf16 or fp16 for every rank; "" when no node reported a GPU


def verdict(reports: list[dict], nodes: int, slurmgen: str = "") -> Verdict:
    found = problems(reports, nodes, slurmgen)
    if found:
        lines = ["slurmgen: preflight failed; not starting training:"]
        lines += table([("node", "what", "found", "expected")] + sorted(found))
        hosts = {host for host, *_ in found}
        culprit = next(iter(hosts)) if len(hosts) == 1 and "(job)" not in hosts else ""
        return Verdict(False, lines, culprit)
    shown = ("python", "torch", "transformers", "trl", "datasets") + (("slurmgen",) if slurmgen else ())
    lines = ["slurmgen: preflight passed on %d node(s): " % len(reports)
             + ", ".join(f + " " + reports[0][f] for f in shown)]
    choice, line = precision(reports)
    lines += [line] if line else []
    shared = sorted(h for h, n in collections.Counter(r["host"] for r in reports).items() if n > 1)
    if shared:
        lines.append(f"slurmgen: {', '.join(shared)} {'holds' if len(shared) == 1 else 'hold'} more than one component"
                     " (each with its own agent, node rank and GPUs)")
    return Verdict(True, lines, precision=choice)
