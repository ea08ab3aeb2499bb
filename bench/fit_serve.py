"""Many measured runs from one process (bench/fit_measure.py --serve, for bench/fit_vs_measured.py):
torch, transformers, TRL and train.sft are imported once, and each run's ranks are forked from it.
A fresh interpreter per rank (and a torchrun agent per run) spent most of the CPU a run took on
imports: 16 of them in the suite's quick set. What is measured is unchanged: each rank measures
the tensors its own step creates, and its resident-set floor is taken in the fork.

Reads one JSON line per run on stdin, {"out": DIR, "ranks": N, "args": [train.sft arguments]};
writes DIR/rank<N>.json (fit_measure.write) and DIR/rank<N>.log (the rank's output), and answers
one line per run on stdout: "done" and each rank's exit status. The parent only imports: it runs
no tensor operation (which would start torch's thread pool, not safe to fork) and no collective.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Callable

REPLY = "done"


def preload() -> None:
    """What every rank of train.sft imports (its own imports are lazy, after the cheap checks)."""
    import torch  # noqa: F401  # its libraries: the floor of every rank
    from torch.distributed.fsdp import CPUOffloadPolicy  # noqa: F401
    from train import hf, sft  # noqa: F401
    from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser, get_peft_config  # noqa: F401

    if importlib.util.find_spec("peft"):  # the LoRA runs'
        import peft  # noqa: F401


def serve(measure_rank: Callable[[Path, list[str]], None]) -> None:
    preload()
    sys.stdout.flush()
    for line in sys.stdin:
        run = json.loads(line)
        statuses = forked(measure_rank, Path(run["out"]), int(run["ranks"]), list(run["args"]))
        print(REPLY, *statuses, flush=True)
    os._exit(0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, ranks: int, port: int) -> dict[str, str]:
    """What torchrun --standalone gives each of RANKS ranks on one node (train.distenv reads it;
    TORCHELASTIC_RUN_ID makes train.cores bind each to its CPUs, as under torchrun)."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_WORLD_SIZE": str(ranks),
            "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHELASTIC_RUN_ID": "fit-measure"}


def forked(measure_rank, out_dir: Path, ranks: int, args: list[str]) -> list[int]:
    """Each rank in a child of this process; the exit statuses, in rank order. A rank that fails
    ends the others (as torchrun does: they would wait on it in a collective)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("rank*.json"):  # an earlier run's, in a --work folder used again
        old.unlink()
    port = free_port()
    pids = [start(measure_rank, out_dir, rank, ranks, port, args) for rank in range(ranks)]
    statuses: dict[int, int] = {}
    while len(statuses) < len(pids):
        pid, status = os.wait()
        statuses[pid] = os.waitstatus_to_exitcode(status)
        if statuses[pid] != 0:
            for other in pids:
                if other not in statuses:
                    os.kill(other, signal.SIGKILL)
    return [statuses[pid] for pid in pids]


def start(measure_rank, out_dir: Path, rank: int, ranks: int, port: int, args: list[str]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        log = os.open(out_dir / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        if ranks > 1:
            import torch

            os.environ.update(rank_env(rank, ranks, port))
            torch.set_num_threads(1)  # torchrun's OMP_NUM_THREADS=1 for several ranks on a node
        measure_rank(out_dir, args)
        code = 0
    except SystemExit as stop:
        code = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
