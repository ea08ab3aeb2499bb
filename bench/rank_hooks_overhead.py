"""Per-step cost of the rank hooks (train/rank_hooks): the same small PyTorch loop, one process,
with the hooks (PYTHONPATH, a rank, a heartbeat folder: one beat per optimizer step, every forward
timed for the straggler watch as a job's default window asks) and without,
alternating in one session. Prints the median seconds per step of each and their ratio, and the
start-up cost of the hooks (a bare `python -c pass`).

    python bench/rank_hooks_overhead.py [--pairs 5] [--steps 2000]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from train import rank_hooks  # noqa: E402

LOOP = """
import sys, time, torch
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(16, 64)
for _ in range(50):  # warm-up
    opt.zero_grad(); model(x).sum().backward(); opt.step()
start = time.perf_counter()
for _ in range(int(sys.argv[1])):
    opt.zero_grad(); model(x).sum().backward(); opt.step()
print((time.perf_counter() - start) / int(sys.argv[1]))
"""


def env(hooked: bool, beats: str) -> dict:
    out = {k: v for k, v in os.environ.items() if k not in ("RANK", "SLURMGEN_HEARTBEAT_DIR")}
    out["PYTHONPATH"] = str(REPO)
    if hooked:
        # The straggler watch's window, as a job sets it by default: every forward timed
        out.update(PYTHONPATH=f"{rank_hooks.DIR}:{REPO}", RANK="0", SLURMGEN_HEARTBEAT_DIR=beats,
                   SLURMGEN_STRAGGLER_WINDOW="50")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as beats:
        step = {False: [], True: []}
        start = {False: [], True: []}
        for _ in range(args.pairs):
            for hooked in (False, True):
                out = subprocess.run([sys.executable, "-c", LOOP, str(args.steps)], env=env(hooked, beats),
                                     capture_output=True, text=True, check=True)
                step[hooked].append(float(out.stdout))
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], env=env(hooked, beats), check=True)
                start[hooked].append(time.perf_counter() - t0)
        beat = (Path(beats) / "rank-0").read_text().split()
        assert int(beat[1]) > 50 and beat[5] == "compute", beat  # the forward times reach the beat
    bare, hooked = statistics.median(step[False]), statistics.median(step[True])
    print(f"{'':24}{'without':>12}{'with hooks':>12}{'ratio':>8}")
    print(f"{'seconds per step':24}{bare * 1e6:>10.0f}us{hooked * 1e6:>10.0f}us{hooked / bare:>8.3f}")
    s0, s1 = statistics.median(start[False]), statistics.median(start[True])
    print(f"{'python start-up':24}{s0 * 1e3:>10.1f}ms{s1 * 1e3:>10.1f}ms{s1 / s0:>8.3f}")
    print(f"({args.pairs} alternating pairs of {args.steps} AdamW steps of a 4k-parameter MLP, one thread;"
          " with hooks a heartbeat at most every 0.5 s)")


if __name__ == "__main__":
    main()
