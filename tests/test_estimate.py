"""Slurm's start estimate (sbatch --test-only) as one line: now, later, unbounded, or why none."""
from datetime import datetime

from slurmgen.site import estimate

NOW = datetime(2026, 12, 3, 14, 0, 0)


def test_a_plain_job_that_starts_now():
    est = estimate.parse("sbatch: Job 1106 to start at 2026-12-03T14:00:25 using 4 processors on nodes"
                         " node[3-4] in partition debug\n")
    assert est == estimate.Estimate(datetime(2026, 12, 3, 14, 0, 25), "node[3-4]")
    assert est.describe(NOW) == "starts now on node[3-4]"
    # 25.11's wording (src/api/allocate.c): a cluster name and a stray "a"
    assert estimate.parse("sbatch: Job 1135 to start at 2026-12-03T14:00:25 on cluster local a using 4 processors"
                          " on nodes node[3-4] in partition debug\n") == est


def test_a_het_job_later_and_behind_a_job_without_a_limit():
    """A heterogeneous job's line (22.05) has no "nodes" word and no partition."""
    later = estimate.parse("sbatch: Job 1102 to start at 2026-12-03T15:35:00 using 6 processors on node[2-5]\n")
    assert later.describe(NOW) == "starts at 2026-12-03 15:35 (in 1 h 35 min) on node[2-5]"
    far = estimate.parse("sbatch: Job 1102 to start at 2027-12-03T13:53:25 using 6 processors on node[2-5]\n")
    assert far.describe(NOW) == ("waits for running jobs that have no time limit, so Slurm cannot say when"
                                 " (then on node[2-5])")


def test_no_estimate_says_sbatchs_error():
    est = estimate.parse("sbatch: error: Batch job submission failed: Requested node configuration is not"
                         " available\n")
    assert est.describe(NOW) == ("no estimate: error: Batch job submission failed: Requested node configuration"
                                 " is not available")
