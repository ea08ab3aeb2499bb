"""What the job does about slow nodes, as the job options set it: the network check before training
(slurmgen.job.net_check) and the straggler watch while it runs (slurmgen.job.stragglers). Each field
is its option (plan.option_fields); rendered scripts only: the submit path runs neither."""

from __future__ import annotations

from slurmgen.frozen_records import frozen
from slurmgen.plan.option_fields import SCRIPTS, SLOW, option
from slurmgen.plan.words import SpecError

STRAGGLER_ACTIONS = ("warn", "exclude")


@frozen
class SlowNodes:
    """What the job does about slow nodes: the network check before training, the straggler watch."""

    net_check: bool = option(  # every node's links timed before training (multi-node jobs)
        True, "--net-check/--no-net-check", section=SLOW, commands=SCRIPTS,
        help="Time every node's links before training (multi-node jobs); a slow node is left out and the job"
             " requeued (or a spare takes its place).")
    net_check_ratio: float = option(
        0.5, "--net-check-ratio", section=SLOW, metavar="RATIO", commands=SCRIPTS,
        help="A node below this share of the median node's bandwidth is slow.")
    net_min_gbps: float = option(  # ... or below this many GB/s (0: no floor)
        0.0, "--net-min-gbps", section=SLOW, metavar="GBPS", commands=SCRIPTS,
        help="A node below this many GB/s is slow whatever the others do (0: no floor; a profile's to set).")
    straggler_ratio: float = option(  # a rank this many times the median compute time is named (0: off)
        2.0, "--straggler-ratio", section=SLOW, metavar="RATIO", commands=SCRIPTS,
        help="A rank whose compute time per step is this many times the median rank's is named a straggler"
             " (0: off).")
    straggler_window: int = option(  # steps a rank's compute time is the median of
        50, "--straggler-window", section=SLOW, metavar="STEPS", commands=SCRIPTS,
        help="Steps a rank's compute time per step is the median of (a few slow steps name no rank).")
    straggler_action: str = option(  # or "exclude": a checkpoint, then on without its node
        "warn", "--straggler-action", section=SLOW, choices=STRAGGLER_ACTIONS, commands=SCRIPTS,
        help="warn: name it in the job log and `slurmgen watch`; exclude: also checkpoint and go on without its"
             " node (a spare, or a requeue).")

    def validate(self) -> None:
        """Raises SpecError with one line."""
        if not 0 < self.net_check_ratio < 1:
            raise SpecError(f"--net-check-ratio {self.net_check_ratio:g}: must be between 0 and 1 (a node below"
                            " this share of the median bandwidth is slow)")
        if self.net_min_gbps < 0:
            raise SpecError(f"--net-min-gbps {self.net_min_gbps:g}: must be zero (no floor) or more")
        if self.straggler_ratio != 0 and self.straggler_ratio <= 1:
            raise SpecError(f"--straggler-ratio {self.straggler_ratio:g}: must be 0 (off) or more than 1 (times"
                            " the median compute time)")
        if self.straggler_window < 5:
            raise SpecError(f"--straggler-window {self.straggler_window}: must be 5 steps or more")
        if self.straggler_action not in STRAGGLER_ACTIONS:
            raise SpecError(f"--straggler-action {self.straggler_action!r}: choose one of {', '.join(STRAGGLER_ACTIONS)}")
