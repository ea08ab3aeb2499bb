"""How an entry point runs as a program, and how it exits.

run_main wraps every ``main(argv)``: argv default, SIGTERM as a stop request (train.stop),
the hang watch's heartbeat and stack dump (train.heartbeat),
one-line usage errors (train.cli), the process group closed afterwards, and a short linger on
the host of torchrun's store. exit_after is the ``if __name__ == "__main__"`` of each entry
point: it leaves without interpreter finalization, which can abort a run that has succeeded.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import Any, Callable, NoReturn

from train.cli import cli_errors
from train import compute_time, cores, heartbeat
from train.collectives import destroy_process_group, lost_a_peer
from train.stop import stop_on_term, terminated

# Seconds a rank whose collective broke under it waits before it fails (see leave_after_the_culprit).
PEER_LOSS_WAIT_ENV = "SLURMGEN_PEER_LOSS_WAIT"
DEFAULT_PEER_LOSS_WAIT = 8.0  # longer than train.stop.DEFAULT_TERM_GRACE


def exit_after(main: Callable[[list[str] | None], Any]) -> NoReturn:
    """Run an entry point as a program, then leave without interpreter finalization.

    DDP and the HF Trainer keep the gloo process group alive past destroy_process_group(): its
    worker threads may still be releasing the tensors of the last collective when Python
    finalizes, and a thread that then needs the GIL is ended inside a C++ destructor:
    std::terminate, SIGABRT ("terminate called without an active exception") after a run that
    succeeded, and srun fails the job. Output is flushed first; usage errors (SystemExit) and
    exceptions leave the normal way.
    """
    main(sys.argv[1:])
    heartbeat.leave()  # os._exit skips atexit
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_main(body: Callable[[list[str]], dict | None], argv: list[str] | None) -> dict | None:
    """Common wrapper of every ``main(argv)``: one-line errors, argv default."""
    args = list(sys.argv[1:] if argv is None else argv)
    cores.bind()  # before torch starts its threads
    stop_on_term()
    heartbeat.install()
    compute_time.install()  # the straggler watch's figure, where the job asks for it
    with cli_errors():
        try:
            result = body(args)
        except Exception as exc:
            leave_after_the_culprit(exc)
            raise
    # Trainer leaves the process group open; torch threads torn down at interpreter exit
    # can then abort a process that has succeeded (and srun fails the job).
    destroy_process_group()
    linger_on_store_host()
    return result


def leave_after_the_culprit(exc: BaseException) -> None:
    """A rank that failed only because a peer died waits a few seconds before it fails.

    The job blames the node whose torchrun agent (or srun task) reports first, and srun's
    --kill-on-bad-exit ends the other agents before they report at all. Without this wait the
    peers on healthy nodes, which fail at the same moment from the broken collective, win that
    race about as often as the node that crashed (seen in CI: node4 blamed for node3). SIGTERM
    ends the wait at once: that is the node's own agent stopping its workers after a local
    failure, or srun ending the step, and either must not be slowed down."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # before the check: a TERM from now on ends us
    if terminated() or not lost_a_peer(exc):
        return
    seconds = float(os.environ.get(PEER_LOSS_WAIT_ENV) or DEFAULT_PEER_LOSS_WAIT)
    print(f"slurmgen-train: rank {heartbeat.rank()} lost a peer ({(str(exc).splitlines() or [type(exc).__name__])[0][:120]}); failing in"
          f" {seconds:g} s so that the failing rank's node reports first", file=sys.stderr, flush=True)
    time.sleep(seconds)


def linger_on_store_host(seconds: float = 2.0) -> None:
    """Under torchrun's static rendezvous the node-rank-0 agent hosts the store that every agent's
    exit barrier waits on. If that agent leaves first, the others log "Error waiting on exit
    barrier" with a C++ trace after a good run. Its workers leaving a moment after everyone
    else's makes it arrive last and release the others before it closes the store."""
    if os.environ.get("GROUP_RANK") == "0" and int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1:
        time.sleep(seconds)
