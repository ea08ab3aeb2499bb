"""Each torchrun worker on its own cores.

Slurm binds a task to its CPUs, and under torchrun the task is the agent: its workers share the
agent's whole CPU set, so their OpenMP pools (OMP_NUM_THREADS each) fight over the same cores
and a rank's memory may sit on the far NUMA node. bind() gives local rank L of N the L-th of N
equal slices of that set, taken NUMA node by NUMA node, before torch starts any thread. Under
--launcher srun each rank is a task that Slurm binds itself, and nothing is done; nor with
SLURMGEN_BIND_CORES=0.
"""

from __future__ import annotations

import glob
import os
import sys

BIND_ENV = "SLURMGEN_BIND_CORES"  # 0: leave the workers on the agent's whole set


def numa_node(cpu: int) -> int:
    """The NUMA node of a CPU (0 where the kernel shows none)."""
    found = glob.glob(f"/sys/devices/system/cpu/cpu{cpu}/node[0-9]*")
    return int(os.path.basename(found[0])[4:]) if found else 0


def slice_for(cpus: list[int], local_rank: int, local_world: int, node_of=numa_node) -> list[int]:
    """Local rank's share of cpus: ordered by NUMA node then number, cut into equal slices."""
    order = sorted(cpus, key=lambda c: (node_of(c), c))
    share = len(order) // local_world
    return order[local_rank * share:(local_rank + 1) * share]


def bind(env=os.environ) -> list[int] | None:
    """Bind this torchrun worker to its slice; the CPUs chosen, or None where nothing was done."""
    if "TORCHELASTIC_RUN_ID" not in env or not hasattr(os, "sched_setaffinity") \
            or env.get(BIND_ENV, "1") == "0":
        return None
    local_rank, local_world = int(env.get("LOCAL_RANK", "0")), int(env.get("LOCAL_WORLD_SIZE", "1"))
    cpus = sorted(os.sched_getaffinity(0))
    if local_world < 2 or len(cpus) < local_world:
        return None
    mine = slice_for(cpus, local_rank, local_world)
    os.sched_setaffinity(0, mine)
    # One write (print makes two, the line and its newline): the ranks of a node share the log,
    # and unbuffered, another rank's line could land between the two (seen in CI).
    sys.stderr.write(f"slurmgen-train: rank {env.get('RANK', '0')} (local {local_rank} of {local_world}) bound to CPUs "
                     f"{ranges(mine)} of {ranges(cpus)}\n")
    sys.stderr.flush()
    return mine


def ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> 0-2,5"""
    out: list[str] = []
    for c in sorted(cpus):
        if out and int(out[-1].split("-")[-1]) == c - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def cpus_in(text: str) -> set[int]:
    """0-2,5 -> {0, 1, 2, 5}: what ranges() wrote."""
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out
