"""Job logs for `slurmgen report`: each run of a batch job (job id, host, world size, resume step and
why the run before it ended), and which training output directory a log belongs to.

Reads the lines the job runtime and the training entry points print (stable by contract):
  slurmgen: job J (restart K of at most M) on HOST: world size N, master ADDR:PORT   (every run)
  slurmgen: time limit or preemption warning: asking every rank to checkpoint
  slurmgen: [checkpoint saved at step S; ]job J preempted: Slurm requeues it
  slurmgen: [checkpoint saved at step S; ]requeueing job J (restart K of at most M)
  slurmgen: failure K of at most M (WHY[ on NODE]): requeueing job J ...   (crash, hang, node, preflight)
  slurmgen: failure K of at most M (WHY[ on NODE]): restarting every component inside the allocation
            ...[; NODE (...) replaced by spare SPARE]   (--spares: a run of its own, in the same job)
  slurmgen: the last run of job J ended when NODE became STATE: failure ...   (printed by the next run)
  slurmgen: all components finished
  slurmgen: sweep run I: {...} -> DIR                                     (names the run's directory)
  slurmgen: code: snapshot DIR of SOURCE (commit C[ plus uncommitted changes]; ...)  (before every run)
  slurmgen-train: resuming from DIR/checkpoint-N at step N                (names it on every resume)
  slurmgen-train: no complete checkpoint in DIR: fresh start              (a user's script, fresh)
Several ranks write the same file, so lines are searched for, not expected whole. No timestamps:
the runtime's lines carry none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from slurmgen.job.record import JobFiles, JobRecord
from slurmgen.observe.watch_sweep import parse_sweep_line

START = re.compile(r"slurmgen: job (\d+) \(restart (\d+) of at most (\d+)\) on (\S+): world size (\d+)")
WARNING = "slurmgen: time limit or preemption warning"
PREEMPTED = re.compile(r"slurmgen: (?:checkpoint saved at step (\d+); )?job \d+ preempted: Slurm requeues it")
REQUEUED = re.compile(r"slurmgen: (?:checkpoint saved at step (\d+); )?requeueing job \d+ \(restart \d+")
FAILURE = re.compile(r"slurmgen: failure \d+ of at most \d+ \((\w+)(?: on ([^)\s]+))?\): requeueing job")
SPARED = re.compile(r"slurmgen: failure \d+ of at most \d+ \((\w+)(?: on ([^)\s]+))?\): restarting every component"
                    r" inside the allocation[^;]*((?:; \S+ \([^)]*\) replaced by spare \S+)*)")
LOST = re.compile(r"slurmgen: the last run of job \d+ ended when (\S+) became ([^:\s]+)")
FINISHED = "slurmgen: all components finished"
RESUMED = re.compile(r"slurmgen-train: resuming from (\S.*?) at step (\d+)\s*$")
NO_CHECKPOINT = re.compile(r"slurmgen-train: no complete checkpoint in (\S.*?): fresh start")
FRESH = "slurmgen-train: fresh start"
CODE = "slurmgen: code: "  # slurmgen.plan.code_snapshot.LOG_PREFIX


class LogError(Exception):
    """A --logs path that is not there (one line)."""


@dataclass
class Start:
    """One run of a batch job, as its log tells it."""
    log: Path
    job: str
    restart: int
    max_restarts: int
    host: str
    world_size: int
    resumed_step: Optional[int] = None  # the checkpoint step training resumed from; None: fresh or unknown
    fresh: bool = False
    ended: str = ""                      # how this run ended: a cause (see _ending), "finished" or ""
    stop_step: Optional[int] = None      # "checkpoint saved at step S" at its end
    cause: str = ""                      # why the run before this one ended ("" for a job's first run)
    seconds: Optional[float] = None      # allocated: from the runtime's start of the run to its end
    network: dict = field(default_factory=dict)     # node -> [send GB/s, receive GB/s, latency ms] (network check)
    compute: dict = field(default_factory=dict)     # node -> compute seconds per step (straggler watch)
    stragglers: dict = field(default_factory=dict)  # node -> its ratio to the median, when named
    code: str = ""                       # the code snapshot it ran (the script's line before the run), "" unknown


@dataclass
class JobLog:
    path: Path
    starts: list[Start] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)  # output directories its lines name, newest last


def log_files(paths: list[str]) -> list[Path]:
    """The files given, and the regular, non-hidden files of the directories given."""
    files: list[Path] = []
    for given in paths:
        p = Path(given)
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            try:
                files += sorted(c for c in p.iterdir() if c.is_file() and not c.name.startswith("."))
            except OSError as err:
                raise LogError(f"report: --logs {given}: cannot read it: {err.strerror}") from None
        else:
            raise LogError(f"report: --logs {given}: no such file or directory; expected a job log "
                           "(the sbatch --output file) or the --log-dir that holds them")
    return files


def read_log(path: Path) -> Optional[JobLog]:
    """The runs of one job log; None for a file that is not one (no run-start line)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    log, code = JobLog(path), ""
    for line in text.splitlines():
        if CODE in line:  # said by the batch script before the run it starts
            code = line[line.find(CODE) + len(CODE):].strip()
            continue
        m = START.search(line)
        if m:
            log.starts.append(Start(path, m[1], int(m[2]), int(m[3]), m[4], int(m[5]), code=code))
            continue
        spared = SPARED.search(line)
        if spared and log.starts:  # the same allocation, a new run of the components
            before = log.starts[-1]
            spares = ", ".join(f"{old} by {new}" for old, new in re.findall(r"; (\S+) \([^)]*\) replaced by spare (\S+)", spared[3]))
            before.ended = spared[1] + (f" on {spared[2]}" if spared[2] else "") + (f", replaced: {spares}" if spares else "")
            log.starts.append(Start(path, before.job, before.restart, before.max_restarts, before.host, before.world_size,
                                    code=before.code))
            continue
        sweep = parse_sweep_line(line[line.find("slurmgen: sweep run "):]) if "slurmgen: sweep run " in line else None
        if sweep:
            log.dirs.append(sweep[2])
        _read_line(log, line)
    if not log.starts:
        return None
    for before, after in zip(log.starts, log.starts[1:]):
        after.cause = after.cause or before.ended or "unknown"
    _from_record(log)
    return log


def _from_record(log: JobLog) -> None:
    """Each run's allocated seconds and node figures, from the job runtime's record beside the log
    (its runs, in the order the log starts them); left unknown when the two do not pair up."""
    for job in dict.fromkeys(s.job for s in log.starts):
        runs = JobRecord.load(JobFiles.of(log.path.parent, job).record).runs
        starts = [s for s in log.starts if s.job == job]
        if len(runs) == len(starts):
            for start, run in zip(starts, runs):
                start.seconds = run.ended - run.started if run.ended >= run.started > 0 else None
                start.network, start.compute, start.stragglers = run.network, run.compute, run.stragglers


def _read_line(log: JobLog, line: str) -> None:
    run = log.starts[-1] if log.starts else None
    if (m := RESUMED.search(line)) and run:
        run.resumed_step = int(m[2])
        log.dirs.append(str(Path(m[1].strip()).parent))
    elif (m := NO_CHECKPOINT.search(line)) and run:
        run.fresh = True
        log.dirs.append(m[1].strip())
    elif FRESH in line and run:
        run.fresh = True
    elif (m := LOST.search(line)) and run:
        run.cause = f"node {m[1]} {m[2]}"  # said by this run about the one before it
    elif run is not None:
        _ending(run, line)


def _ending(run: Start, line: str) -> None:
    if (m := PREEMPTED.search(line)):
        run.ended, run.stop_step = "preemption", _int(m[1])
    elif (m := REQUEUED.search(line)):
        run.ended, run.stop_step = "time limit", _int(m[1])
    elif (m := FAILURE.search(line)):
        run.ended = m[1] + (f" on {m[2]}" if m[2] else "")
    elif WARNING in line and not run.ended:
        run.ended = "time limit or preemption"
    elif FINISHED in line:
        run.ended = "finished"


def _int(text: Optional[str]) -> Optional[int]:
    return int(text) if text else None


def names(directory: str, run_dir: Path) -> bool:
    """Whether a directory a log names is run_dir: the same path, or (relative to the job's
    working directory, which the log does not say) the same last components."""
    named = Path(directory)
    mine = run_dir.resolve()
    if named.is_absolute():
        return named.resolve() == mine or named == run_dir.absolute()
    parts = [p for p in named.parts if p not in ("", ".")]
    return bool(parts) and ".." not in parts and list(mine.parts[-len(parts):]) == parts


def match(run_dirs: list[Path], logs: list[JobLog]) -> list[list[Start]]:
    """Each run's runs of jobs, oldest first. A log belongs to the run whose directory it names
    last; one that names none is taken only when one run is reported and it is the only such log."""
    found: list[list[Start]] = [[] for _ in run_dirs]
    unnamed = []
    for log in logs:
        owner = next((i for d in reversed(log.dirs) for i, r in enumerate(run_dirs) if names(d, r)), None)
        if owner is not None:
            found[owner] += log.starts
        elif not log.dirs:
            unnamed.append(log)
    if len(run_dirs) == 1 and len(unnamed) == 1:
        found[0] += unnamed[0].starts
    for starts in found:
        starts.sort(key=lambda s: int(s.job))  # stable: a job's runs keep the log's order
        for before, after in zip(starts, starts[1:]):
            if after.job != before.job:  # the user submitted the run again
                after.cause = f"new job {after.job}" + (f" after {before.ended}" if before.ended else "")
    return found
