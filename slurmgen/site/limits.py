"""GPU counts no node could ever give, refused before anything is written: Slurm would hold such a
job pending forever. sinfo is started at once and read last (render goes on meanwhile); where it is
missing or does not answer, counts are held to a stated ceiling."""

from __future__ import annotations

import shutil
import subprocess
from typing import Optional

from slurmgen.plan.words import SpecError, compact_gpus
from slurmgen.site.cluster import SINFO_FORMAT, Node, parse_sinfo

# Where sinfo does not answer: more GPUs than any node has (8 GPUs of 7 MIG slices each is 56).
GPU_CEILING = 64
WAIT_SECONDS = 5  # a controller that is down makes sinfo wait far longer


class Asking:
    """sinfo, started now, read later; nodes() is None where it is missing or does not answer."""

    def __init__(self):
        self.proc = None
        if shutil.which("sinfo"):
            try:
                self.proc = subprocess.Popen(["sinfo", "-h", "-N", "-o", SINFO_FORMAT], stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                                             errors="replace")
            except OSError:
                self.proc = None

    def nodes(self) -> Optional[list[Node]]:
        if self.proc is None:
            return None
        try:
            out, _ = self.proc.communicate(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return None
        nodes = parse_sinfo(out)[1]
        return nodes if self.proc.returncode == 0 and nodes else None


class NoAnswer:
    """No cluster to ask (submit --local): counts are held to the ceiling only."""

    def nodes(self) -> Optional[list[Node]]:
        return None


def check_gpus(spec, nodes: Optional[list[Node]]) -> None:
    """Raises SpecError for a node count of GPUs above what any node has (of --partition, where sinfo
    knows it; the partition itself is `check`'s to judge)."""
    layout, most_asked = compact_gpus(",".join(map(str, spec.gpus))), max(spec.gpus)
    if nodes is None:
        if most_asked > GPU_CEILING:
            raise SpecError(f"--gpus {layout!r}: {most_asked} GPUs on one node; slurmgen takes at most {GPU_CEILING}"
                            " (sinfo does not answer here to say what the nodes have)")
        return
    members = [n for n in nodes if n.partition == spec.partition] or nodes
    where = f"partition {spec.partition}" if members is not nodes else "this cluster"
    most = max(n.gpus for n in members)
    if most_asked > most:
        raise SpecError(f"--gpus {layout!r}: {most_asked} GPUs on one node, but no node of {where} has more than"
                        f" {most} (sinfo)")
