"""What the job does about slow nodes, as the job options set it: the network check before training
(slurmgen.job.net_check) and the straggler watch while it runs (slurmgen.job.stragglers)."""

from __future__ import annotations

from dataclasses import dataclass

from slurmgen.plan.words import SpecError

STRAGGLER_ACTIONS = ("warn", "exclude")


@dataclass(frozen=True)
class SlowNodes:
    net_check: bool = True  # every node's links timed before training (multi-node jobs)
    net_check_ratio: float = 0.5  # a node below this share of the median node's bandwidth is slow
    net_min_gbps: float = 0.0  # ... or below this many GB/s (0: no floor)
    straggler_ratio: float = 2.0  # a rank this many times the median compute time is named (0: off)
    straggler_window: int = 50  # steps a rank's compute time is the mean of
    straggler_action: str = "warn"  # or "exclude": a checkpoint, then on without its node

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
