"""`slurmgen render` whole-process time against `torchx run --dryrun -s slurm dist.ddp -j 4x2`.

Alternates the two commands in one run (the machine is noisy) and prints medians and their
ratio (target: slurmgen <= 0.35x torchx), and the part of it no slurmgen code can cut: Python's
start and the imports of click and jinja2 (alternated as well); whole-process `slurmgen --help`
against plain Python (target: under 0.1 s), then the size and render time of a 1024-node job.
The commands run with their bytecode caches written, as an installed package has them: a
PYTHONDONTWRITEBYTECODE in the environment would make every slurmgen run compile its modules
again (~35 ms) while torchx's venv has its caches.
torchx 0.7.0 lives in its own venv (.bench-venv) so the project never depends on it.
--instructions adds the instructions each command executes (valgrind, its own process only, not
the sinfo and bash -n it starts): the same figure on a loaded machine as on a quiet one.

    python bench/render_speed.py [--runs 10] [--instructions]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TORCHX_VENV = REPO / ".bench-venv"


def ensure_torchx() -> Path:
    torchx = TORCHX_VENV / "bin" / "torchx"
    if not torchx.exists():
        subprocess.run([sys.executable, "-m", "venv", str(TORCHX_VENV)], check=True)
        subprocess.run([TORCHX_VENV / "bin" / "pip", "install", "-q", "torchx==0.7.0"], check=True)
    return torchx


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
# slurmgen from this checkout, whichever checkout the venv's editable install points at
OURS_ENV = {**ENV, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), ENV.get("PYTHONPATH")) if p)}


def instructions(cmd, cwd, env=ENV) -> float:
    """Millions of instructions `cmd` executes (valgrind's count: independent of the machine's load)."""
    done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *cmd],
                          cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    return int(re.search(r"I\s+refs:\s+([\d,]+)", done.stderr).group(1).replace(",", "")) / 1e6


def timed(cmd, cwd, env=ENV) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


# What any click command that renders with Jinja pays (cumulative): Python's start, then click's
# import, then jinja2's.
FLOOR = [("python", "pass"), ("+ click", "import click"), ("+ jinja2", "import click, jinja2")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    args = parser.parse_args()
    torchx = ensure_torchx()
    with tempfile.TemporaryDirectory() as work:
        Path(work, "train.py").write_text("print('hello')\n")
        ours = [str(BIN / "slurmgen"), "render", "--nodes", "4", "--gpus", "1,1,2,2", "-o", "job.sh"]
        theirs = [str(torchx), "run", "--dryrun", "-s", "slurm", "dist.ddp", "-j", "4x2",
                  "--script", "train.py"]
        timed(ours, work, OURS_ENV), timed(theirs, work)  # warm the page cache for both, write the caches
        a, b, floor = [], [], {name: [] for name, _ in FLOOR}
        for _ in range(args.runs):
            a.append(timed(ours, work, OURS_ENV))
            b.append(timed(theirs, work))
            for name, code in FLOOR:
                floor[name].append(timed([str(BIN / "python"), "-c", code], work))
        ma, mb = statistics.median(a), statistics.median(b)
        mf = {name: statistics.median(times) for name, times in floor.items()}
        print(f"slurmgen render 1,1,2,2:            median {ma * 1000:7.1f} ms over {args.runs} runs")
        print(f"torchx dryrun dist.ddp -j 4x2:      median {mb * 1000:7.1f} ms over {args.runs} runs")
        print(f"ratio slurmgen/torchx:              {ma / mb:.3f} (target <= 0.35)")
        print("before any slurmgen code:           " + ", ".join(f"{name} {t * 1000:.1f} ms" for name, t in mf.items())
              + f": {mf['+ jinja2'] / mb:.2f} of torchx")
        if args.instructions and shutil.which("valgrind"):
            ia, ib = instructions(ours, work, OURS_ENV), instructions(theirs, work)
            ifloor = instructions([str(BIN / "python"), "-c", FLOOR[-1][1]], work)
            print(f"instructions: slurmgen render {ia:.0f} M, torchx {ib:.0f} M: {ia / ib:.3f}"
                  f" (python + click + jinja2: {ifloor:.0f} M, {ifloor / ib:.3f})")
        helps, bare = [], []
        for _ in range(args.runs):
            helps.append(timed([str(BIN / "slurmgen"), "--help"], work, OURS_ENV))
            bare.append(timed([sys.executable, "-c", "pass"], work))
        mh, mp = statistics.median(helps), statistics.median(bare)
        print(f"slurmgen --help:                    median {mh * 1000:7.1f} ms (target < 100), plain python"
              f" {mp * 1000:.1f} ms")

        sys.path.insert(0, str(REPO))
        from slurmgen.plan.layout import materialize
        from slurmgen.script.render import render
        from slurmgen.plan.spec import JobSpec
        spec = JobSpec(gpus=(8,) * 512 + (4,) * 512, log_dir=os.path.join(work, "logs")).validate()
        start = time.perf_counter()
        text = render(materialize(spec))
        elapsed = time.perf_counter() - start
        print(f"1024 nodes (8x512, 4x512): {len(materialize(spec).components)} components,"
              f" {len(text.encode())} bytes, rendered in {elapsed * 1000:.1f} ms")
        imported = subprocess.run(
            [sys.executable, "-c", "import sys; from slurmgen import cli, options; from slurmgen.script import render; from slurmgen.plan import layout;"
             " print(any(m.split('.')[0] in ('torch', 'transformers') for m in sys.modules))"],
            capture_output=True, text=True, check=True).stdout.strip()
        print(f"slurmgen imports torch or transformers: {imported}")


if __name__ == "__main__":
    main()
