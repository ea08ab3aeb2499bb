"""The hang watch of a job submitted through submitit, run by the process that follows it."""

from __future__ import annotations

import sys
import time
from typing import Optional


class HangWatch:
    """The hang watch of a submitted job, run by the process that follows it (slurmgen.job.hangs):
    the ranks beat into the submitit folder; when one has not advanced for the timeout, the
    stacks are taken through `srun --overlap --jobid`, the report goes to
    FOLDER/hang-report-JOBID.txt, and the job is cancelled, to be retried as a failure."""

    def __init__(self, sub, timeout: float, nodes: int, printer=None):
        """sub: the submission.Submission that makes the watch; it calls it with each of its Status."""
        self.sub, self.timeout, self.nodes, self.printer = sub, timeout, nodes, printer
        self.hung = False
        self.suspect: Optional[str] = None
        self.since = 0.0
        self.restarts = None
        self.next_look = 0.0

    def __call__(self, status) -> None:
        from slurmgen.job import hangs
        from slurmgen.job.record import HANG_CANCEL, JobFiles

        if self.hung:
            return
        if status.restarts != self.restarts:  # a new run: the last one's beats do not count
            self.restarts, self.since = status.restarts, time.time()
        if time.monotonic() < self.next_look:
            return
        self.next_look = time.monotonic() + min(hangs.POLL_SECONDS, self.timeout / 4)
        files = JobFiles.of(self.sub.folder, self.sub.job_id)
        found = hangs.check(files.beats, self.timeout, self.sub.world_size, files.hang_report, [("-", self.nodes)],
                            self.sub.job_id, self.since, outside=True, say=self._say)
        if found is not None:
            self.hung, self.suspect = True, found[1]
            files.mark_cancelled(HANG_CANCEL)  # the tasks must not requeue
            self.sub.end_for_good()

    def _say(self, line: str) -> None:
        if self.printer is not None:
            self.printer.end()  # a progress line drawn in place on a terminal
        print(line, file=sys.stderr, flush=True)
