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
import sys
import time
from typing import Any, Callable, NoReturn

from train.cli import cli_errors
from train import heartbeat
from train.collectives import destroy_process_group
from train.stop import stop_on_term


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
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_main(body: Callable[[list[str]], dict | None], argv: list[str] | None) -> dict | None:
    """Common wrapper of every ``main(argv)``: one-line errors, argv default."""
    args = list(sys.argv[1:] if argv is None else argv)
    stop_on_term()
    heartbeat.install()
    with cli_errors():
        result = body(args)
    # Trainer leaves the process group open; torch threads torn down at interpreter exit
    # can then abort a process that has succeeded (and srun fails the job).
    destroy_process_group()
    linger_on_store_host()
    return result


def linger_on_store_host(seconds: float = 2.0) -> None:
    """Under torchrun's static rendezvous the node-rank-0 agent hosts the store that every agent's
    exit barrier waits on. If that agent leaves first, the others log "Error waiting on exit
    barrier" with a C++ trace after a good run. Its workers leaving a moment after everyone
    else's makes it arrive last and release the others before it closes the store."""
    if os.environ.get("GROUP_RANK") == "0" and int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1:
        time.sleep(seconds)
