"""What every rank shows slurmgen's hang watch (slurmgen.job.hangs), under SLURMGEN_HEARTBEAT_DIR.

  * beat(step): "RANK STEP TIME NODE PID [save ALLOWANCE] [compute SECONDS]" in rank-RANK (NODE: Slurm's node name), once training begins (after loading)
    and at every optimizer step, so the watch sees which rank stopped advancing and where; under
    SLURMGEN_NODE_BEATS in a folder on the node, whose lines one rank of the node at a time
    publishes to node-NODE in the shared folder at a bounded rate (train/contract.py);
    during a checkpoint save (train.saves) followed by "save ALLOWANCE": the watch then waits
    ALLOWANCE seconds rather than the hang timeout; with the straggler watch on, the rank's mean
    compute time per step (train.compute_time) follows "compute";
  * NCCL's flight recorder on, dumping beside the job log on NCCL's own timeout (CUDA only);
  * on DUMP_SIGNAL every rank writes the Python stacks of all its threads to stack-RANK
    (faulthandler: a C handler, so it answers while the rank is blocked inside a collective,
    and it needs no ptrace, which many sites forbid);
  * test hooks: SLURMGEN_TEST_HANG_IN_DATA="RANK:STEP[:RUN]" makes one rank hang while fetching
    the batch of step STEP ("first": its first batch) in the job's run RUN (SLURM_RESTART_COUNT,
    0 by default), the way a stuck data loader does (hang_in_data_loader);
    SLURMGEN_TEST_CRASH_ON="NODE:STEP" makes the first rank on that node exit at that step, in
    every run (a sick node).

Without the variable (another launcher, a unit test) all of this does nothing.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import shutil
import signal
import threading
import time

from train import compute_time, contract
from train.contract import HEARTBEAT_DIR_ENV

DUMP_SIGNAL = signal.SIGRTMIN + contract.DUMP_SIGNAL_RT
HANG_IN_DATA_ENV = "SLURMGEN_TEST_HANG_IN_DATA"
CRASH_ON_ENV = "SLURMGEN_TEST_CRASH_ON"

_stack_file = None  # kept open: faulthandler writes to its file descriptor
_save_allowance: float | None = None  # while a save runs (train.saves)
_first_fetch = True  # for the test hook's STEP "first"
_node_folder: str | None = None  # node_folder(): "" once known to be none
_folder_owner = 0  # the process that made _node_folder (a forked child must not leave it)
_next_publish = 0.0  # this rank publishes its node's beats no sooner
_published_phase = ""  # the save phase of this rank's last beat that was published
_trailing: threading.Thread | None = None  # _publish_trailing, started at the first beat


def rank() -> str:
    """The global rank: torchrun's RANK, else (--launcher srun) the component's offset plus
    SLURM_PROCID, which restarts at 0 in each het component (as train.distenv reads it)."""
    if "RANK" in os.environ:
        return os.environ["RANK"]
    offset = int(os.environ.get(contract.RANK_OFFSET_ENV, "0") or 0)
    return str(offset + int(os.environ.get("SLURM_PROCID", "0") or 0))


def install() -> None:
    """Register the stack dump; called once per rank, before the process group exists. No beat
    yet: loading and data preparation may take long; the entry points beat once training begins."""
    global _stack_file
    folder = os.environ.get(HEARTBEAT_DIR_ENV)
    if not folder or _stack_file is not None:
        return
    os.makedirs(folder, exist_ok=True)
    # On CUDA: NCCL's flight recorder keeps each rank's last collectives and writes them beside
    # the job log when NCCL's own watchdog times out (read with torch's fr_trace). Before the
    # process group exists, which reads these.
    # (torch 2.13's names; the TORCH_NCCL_ ones of older releases are deprecated there)
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", os.path.join(
        os.path.dirname(os.path.abspath(folder)), f"nccl-trace-{os.environ.get('SLURM_JOB_ID', '0')}-rank-"))
    # Appending: the watch empties the file before it asks, and each dump lands at its start.
    _stack_file = open(os.path.join(folder, f"stack-{rank()}"), "a")
    rearm()


def rearm() -> None:
    """(Re)register the stack dump. A framework that saves and restores every signal handler Python
    knows (Lightning, around each fit) sets this one back to SIG_DFL: faulthandler's handler is C's,
    unseen by Python, and the hang watch's question would then end the rank."""
    if _stack_file is None:
        return
    try:
        faulthandler.register(DUMP_SIGNAL, file=_stack_file, all_threads=True)
    except (ValueError, RuntimeError):  # not the main thread, or no such signal here
        pass


def saving(allowance: float | None) -> None:
    """From the next beat on: a save with this allowance runs (None: it ended)."""
    global _save_allowance
    _save_allowance = allowance


def node_part() -> str:
    """NODE-FIRST: this node, and the first global rank of this rank's part of the job on it (RANK less
    LOCAL_RANK): two het components on one node beat apart, and each leaves its own folder."""
    return f"{node_name()}-{int(rank()) - int(os.environ.get('LOCAL_RANK', '0') or 0)}"


def node_name() -> str:
    """Slurm's name for this node, which the job excludes and blames by; on many sites the host
    name differs (gpu012.cluster.example for gpu012)."""
    return os.environ.get("SLURMD_NODENAME") or os.uname().nodename  # socket.gethostname(), without importing socket


def beat(step: int) -> None:
    """One small overwrite per step: the watch compares the time with its clock."""
    host, _, at = os.environ.get(CRASH_ON_ENV, "").partition(":")
    if host == node_name() and at == str(step) and os.environ.get("LOCAL_RANK", "0") == "0":
        print(f"rank {rank()} on {host}: crashing at step {step} ({CRASH_ON_ENV})", flush=True)
        os._exit(13)
    folder = os.environ.get(HEARTBEAT_DIR_ENV)
    if not folder:
        return
    phase = "" if _save_allowance is None else f" save {_save_allowance:.0f}"
    compute = compute_time.figure()
    phase += "" if compute is None else f" compute {compute:.6f}"
    now = time.time()
    line = f"{rank()} {step} {now:.3f} {node_name()} {os.getpid()}{phase}\n"
    local = node_folder()
    name = contract.BEAT_FILE.format(rank=rank())
    if local is None:  # no node folder: straight to the shared one
        _replace(os.path.join(folder, name), line)
        return
    _replace(os.path.join(local, name), line)
    global _published_phase, _trailing
    if phase != _published_phase or now >= _next_publish:
        if _publish(local, folder, now, urgent=phase != _published_phase):
            _published_phase = phase
    if _trailing is None:
        _trailing = threading.Thread(target=_publish_trailing, args=(local, folder), daemon=True,
                                     name="slurmgen-heartbeat")
        _trailing.start()


def _publish_trailing(local: str, folder: str) -> None:
    """Publishes the node's beats that came after its last publication, PUBLISH_SECONDS later:
    the last beats before a hang (a rank stuck in its data loader, or stopped) come in when no
    rank of the node beats again. A thread of every rank (it runs while the rank waits in a
    collective or sleeps), so that one rank stopped with SIGSTOP cannot hold them back."""
    stamp = os.path.join(local, "published")
    while True:
        time.sleep(contract.PUBLISH_SECONDS)
        try:
            last = os.stat(stamp).st_mtime if os.path.exists(stamp) else 0.0
            newest = max((e.stat().st_mtime for e in os.scandir(local) if e.name.startswith("rank-")), default=0.0)
            if newest > last:
                _publish(local, folder, time.time(), urgent=False)
        except OSError:
            continue  # the job's folders going away at its end


def node_folder() -> str | None:
    """This node's folder of beats (made on first use), or None where the job names none (the submit
    path, another launcher) or it cannot be made. In an image the script mounts the node's TMPDIR (or
    /tmp) at the same path, so the folder is the node's, where the hang watch looks from outside."""
    global _node_folder, _folder_owner
    if _node_folder is None:
        name = os.environ.get(contract.NODE_BEATS_ENV, "")
        # The node's name too: nodes that share a /tmp (a test cluster on one machine) keep apart; and
        # the part's: two het components on one node (their own ranks) keep apart.
        path = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"{name}-{node_part()}")
        try:
            if not name or os.sep in name:
                raise OSError(name)
            os.makedirs(path, exist_ok=True)
            _node_folder, _folder_owner = path, os.getpid()
            atexit.register(leave)  # the entry points, which end with os._exit, call it themselves
        except OSError:
            _node_folder = ""
    return _node_folder or None


def leave() -> None:
    """This rank is done: its mark in the node folder, and the node's last rank to leave removes
    the folder, so that a job leaves nothing in the nodes' /tmp (a rank killed outright leaves it,
    a few small files). The node's rank count is LOCAL_WORLD_SIZE (both launchers set it); without
    it nothing is removed. A rank still running keeps its beat: its line must not go."""
    global _node_folder
    local, path = os.environ.get("LOCAL_WORLD_SIZE", ""), _node_folder
    if not path or os.getpid() != _folder_owner or not local.isdigit():
        return
    _node_folder = ""  # once; later beats go straight to the shared folder
    try:
        open(os.path.join(path, f"left-{rank()}"), "w").close()
        if sum(1 for e in os.scandir(path) if e.name.startswith("left-")) < int(local):
            return
        if os.environ.get(HEARTBEAT_DIR_ENV):  # every rank's last beat, not only those of 2 s ago
            _publish(path, os.environ[HEARTBEAT_DIR_ENV], time.time(), urgent=True)
        # Under the publication lock, so that no publisher (a thread of a rank still exiting) reads
        # a half-removed folder and sends the shared folder a node file short of some ranks' lines.
        lock = os.path.join(path, "published.lock")
        for _ in range(100):  # a publication takes milliseconds; a dead rank's lock is let be
            try:
                os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                break
            except FileExistsError:
                time.sleep(0.01)
        gone = f"{path}.left-{os.getpid()}"
        os.rename(path, gone)  # from here a publisher finds no folder, and publishes nothing
        shutil.rmtree(gone, ignore_errors=True)
    except OSError:  # another rank of the node removed it first
        pass


def _publish(local: str, folder: str, now: float, urgent: bool) -> bool:
    """This node's lines to NODE_BEAT_FILE in the shared folder, by whichever rank of the node
    takes the turn (a lock file on the node); False when another rank has it. Not urgent: only
    when the node's last publication is PUBLISH_SECONDS old."""
    global _next_publish
    stamp = os.path.join(local, "published")
    if not urgent and _age(stamp) < contract.PUBLISH_SECONDS:
        _next_publish = now + contract.PUBLISH_SECONDS - _age(stamp)
        return True
    lock = stamp + ".lock"
    for _ in range(50 if urgent else 1):  # a save's allowance must not wait for its next beat
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            break
        except FileExistsError:
            try:  # a rank that died (or was stopped) holding it must not silence the node
                if time.time() - os.stat(lock).st_mtime > 3 * contract.PUBLISH_SECONDS:
                    os.unlink(lock)
            except OSError:
                pass
            time.sleep(0.01 if urgent else 0)
    else:
        return False
    try:
        if not urgent and _age(stamp) < contract.PUBLISH_SECONDS:
            return True  # another rank published while this one waited for the lock
        began = time.time()
        lines = []
        for entry in sorted(os.listdir(local)):
            if entry.startswith("rank-") and not entry.endswith(".tmp"):
                try:
                    with open(os.path.join(local, entry)) as fh:
                        lines.append(fh.read())
                except OSError:
                    continue
        _replace(os.path.join(folder, contract.NODE_BEAT_FILE.format(node=node_part())), "".join(lines))
        _replace(stamp, "")
        # Dated just before the lines were read (file times are coarse): a beat written while
        # they were read is newer, and _publish_trailing sends it.
        os.utime(stamp, (began - 0.1, began - 0.1))
        _next_publish = now + contract.PUBLISH_SECONDS
        return True
    finally:
        try:
            os.unlink(lock)
        except OSError:  # taken from us as stale: ours was a slow publication, not a lost one
            pass


def _age(stamp: str) -> float:
    """Seconds since the node's last publication (its stamp's time); infinite before the first."""
    try:
        return time.time() - os.stat(stamp).st_mtime
    except OSError:
        return float("inf")


def _replace(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"  # one per writer: ranks of a node may publish at once
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def hang_in_data_loader(step: int) -> None:
    """The test hook: the named rank sleeps here for good at the named step of the named run."""
    global _first_fetch
    which, at, run = (os.environ.get(HANG_IN_DATA_ENV, "").split(":") + ["", "", "0"])[:3]
    first, _first_fetch = _first_fetch, False
    if which == rank() and at in (str(step), "first" if first else "") \
            and os.environ.get("SLURM_RESTART_COUNT", "0") == run:
        while True:
            time.sleep(3600)
