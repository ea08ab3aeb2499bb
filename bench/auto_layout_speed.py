"""--gpus auto on a 1,024-node partition: parsing `scontrol show node -o -d` and choosing.

The input is a line recorded from the local cluster (bench/data/scontrol_node_line.txt), made
into 1,024 nodes of 8 or 4 GPUs with some in use, some drained or down (fixed seed). Prints the
median time of parse + choose against the target of 0.5 s, as a ratio.

    python bench/auto_layout_speed.py [--runs 5]
"""
import argparse
import random
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmgen.site import auto_layout  # noqa: E402

TARGET_S = 0.5


def partition_text(line: str, nodes: int = 1024, seed: int = 7) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(1, nodes + 1):
        gpus = 8 if i <= nodes // 2 else 4
        used = rng.choice([0, 0, 0, 1, 2, gpus])
        state = rng.choices(["IDLE", "MIXED", "ALLOCATED", "IDLE+DRAIN", "DOWN*"], [50, 30, 10, 5, 5])[0]
        text = re.sub(r"NodeName=\S+", f"NodeName=gpu{i:04d}", line)
        text = re.sub(r"\bGres=\S+", f"Gres=gpu:{gpus}", text)
        text = re.sub(r"GresUsed=\S+", f"GresUsed=gpu:{used}", text)
        text = re.sub(r"State=\S+", f"State={state}", text)
        text = re.sub(r"CPUAlloc=\d+", f"CPUAlloc={used * 4}", text)
        text = re.sub(r"CPUTot=\d+", "CPUTot=64", text)
        text = re.sub(r"AllocMem=\d+", "AllocMem=0", text)
        out.append(text)
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    line = (REPO / "bench" / "data" / "scontrol_node_line.txt").read_text().strip()
    text = partition_text(line)
    print(f"input: 1024 nodes, {len(text.encode()) // 1024} KB of scontrol show node -o -d")
    for label, request in (("--world-size 6", auto_layout.Request(world_size=6, partition="debug")),
                           ("--world-size 2048", auto_layout.Request(world_size=2048, partition="debug")),
                           ("--max-gpus 100000", auto_layout.Request(max_gpus=100000, partition="debug"))):
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            choice = auto_layout.choose(auto_layout.parse_nodes(text), request)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(f"{label:<18} {len(choice.nodes):4d} nodes, {choice.world_size:5d} GPUs:"
              f" median {median * 1000:7.1f} ms = {median / TARGET_S:.3f} of the 0.5 s target")


if __name__ == "__main__":
    main()
