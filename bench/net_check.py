"""The network check's cost and its false alarms (issue 30): the same 1,1,2,2 job (the user's own
script, torch only: DDP, 20 steps, under the srun launcher) on the local cluster as 1,1,2,2 (production
profile), in pairs of runs with and without the check:

  healthy  --runs pairs on the healthy cluster: each job's time from its start to its end (Slurm's
           Start and End) with the check and without it, the check's own time as the job log says
           it, and any node the check named (a false alarm)
  slowed   --slowed jobs with node3's link at 100mbit both ways (tc tbf): whether the check named
           node3, and its time there (on a slow network it measures less, to stay short)

    python bench/net_check.py [--runs 5] [--slowed 3]

Needs root (it brings tests/localcluster.sh up as 1,1,2,2, and back as it was). The suite's
tests/e2e/test_slow_nodes.py runs the slowed case once, end to end to the requeue without node3.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.e2e.conftest import _layout, _up, render_and_submit  # noqa: E402
from tests.e2e.test_slow_nodes import PLAIN, heal, slow  # noqa: E402

LAYOUT = ["--nodes", "4", "--gpus", "1,1,2,2", "--launcher", "srun", "--max-failures", "0"]


def job(work: Path, check: bool) -> tuple[float, float, list[str]]:
    """(seconds from the job's start to its end, the check's own seconds, the nodes it named)."""
    work.mkdir(parents=True)
    (work / "plain.py").write_text(PLAIN)
    (work / "out").mkdir()
    done = render_and_submit(work, [*LAYOUT, "--script", str(work / "plain.py"), "--net-check" if check else "--no-net-check"],
                             [str(work / "out")], timeout=300)
    took = (datetime.fromisoformat(done.info["EndTime"]) - datetime.fromisoformat(done.info["StartTime"])).total_seconds()
    own = re.search(r"slurmgen: network check of \d+ node\(s\) \(\w+\) took ([\d.]+) s", done.log)
    return took, float(own[1]) if own else 0.0, re.findall(r"slurmgen: slow link: (\S+):", done.log)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5, help="healthy pairs (with and without the check)")
    p.add_argument("--slowed", type=int, default=3, help="jobs with node3's link slowed")
    a = p.parse_args()
    before = _layout()
    _up("1,1,2,2", before, before.get("HOST_NAMES", "same"))
    work = Path(tempfile.mkdtemp(prefix="net-check-"))
    try:
        with_check, without, own, alarms = [], [], [], []
        for i in range(a.runs):
            took, seconds, named = job(work / f"on-{i}", True)
            with_check.append(took)
            own.append(seconds)
            alarms += named
            without.append(job(work / f"off-{i}", False)[0])
            print(f"healthy  pair {i + 1}: {took:5.1f} s with the check (its own {seconds:4.1f} s), {without[-1]:5.1f} s"
                  f" without; named: {', '.join(named) or 'none'}", flush=True)
        print(f"healthy  {a.runs} pairs: the check adds {statistics.median(with_check) - statistics.median(without):.1f} s"
              f" to the job (median {statistics.median(with_check):.1f} s against {statistics.median(without):.1f} s;"
              f" its own time {min(own):.1f} to {max(own):.1f} s); false alarms: {len(alarms)}", flush=True)
        slow("node3", "link", "100mbit")
        try:
            for i in range(a.slowed):
                _, seconds, named = job(work / f"slowed-{i}", True)
                print(f"slowed   job {i + 1}: named {', '.join(named) or 'nothing'} in {seconds:.1f} s", flush=True)
        finally:
            heal("node3")
    finally:
        _up(before["GPUS"].replace(" ", ","), before, before.get("HOST_NAMES", "same"))


if __name__ == "__main__":
    main()
