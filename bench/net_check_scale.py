"""The network check at many nodes (issue 41, item 10): net_measure.py run as the job's step runs it
(`python -c SOURCE FIRST WORLD`, one process per node), here as N processes on this machine over gloo,
with gloo's connections made when a pair first talks (the check's default) and with the full mesh
torch makes otherwise (TORCH_GLOO_LAZY_INIT=0). For each: whether every process reported, the wall
time, the check's own time (the slowest process's `seconds`), and the sockets each process held at
its peak (sampled from /proc; the median process, and rank 0, which also serves the rendezvous store).

A full mesh is N-1 connections per node (127 at 128 nodes, which timed out on a 128-node local
cluster); paired as the check pairs nodes, a node holds its ring neighbours and a barrier's log2(N).

    python bench/net_check_scale.py [--nodes 16 40]

Each process imports torch (about 0.2 GB): 40 processes take about 8 GB and a minute on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

SOURCE = (Path(__file__).resolve().parent.parent / "slurmgen" / "job" / "net_measure.py").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sockets(pid: int) -> int:
    folder = f"/proc/{pid}/fd"
    return sum(1 for fd in os.listdir(folder) if os.readlink(f"{folder}/{fd}").startswith("socket:"))


def one_check(nodes: int, lazy: str) -> dict:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), TORCH_CPP_LOG_LEVEL="ERROR",
               TORCH_GLOO_LAZY_INIT=lazy)
    began = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", SOURCE, "0", str(nodes)], stdout=subprocess.PIPE, text=True,
                              env={**env, "SLURM_PROCID": str(r), "SLURMD_NODENAME": f"node{r + 1}"})
             for r in range(nodes)]
    peak = {p.pid: 0 for p in procs}
    while any(p.poll() is None for p in procs):
        for p in procs:
            try:
                peak[p.pid] = max(peak[p.pid], sockets(p.pid))
            except OSError:  # ended between poll and read
                pass
        time.sleep(0.05)
    wall = time.perf_counter() - began
    lines = [p.communicate()[0] for p in procs]
    reports = [json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("SLURMGEN_NETCHECK ")]
    return {"reported": len(reports), "wall": wall, "check": max((r["seconds"] for r in reports), default=0.0),
            "median": statistics.median(peak[p.pid] for p in procs[1:]), "rank0": peak[procs[0].pid]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[16, 40])
    args = parser.parse_args()
    for nodes in args.nodes:
        for lazy, name in (("1", "paired when first used"), ("0", "full mesh")):
            got = one_check(nodes, lazy)
            print(f"{nodes:4d} nodes, {name:23s}: {got['reported']}/{nodes} reported, check {got['check']:5.1f} s"
                  f" (wall {got['wall']:5.1f} s), sockets per node {got['median']:.0f} (rank 0: {got['rank0']})")


if __name__ == "__main__":
    main()
