"""The process group and the few collectives the entry points use directly.

init_process_group (nccl on CUDA, gloo on CPU, env://, SLURMGEN_COLLECTIVE_TIMEOUT once joined),
destroy_process_group, barrier and broadcast_object. Each is a no-op in a single process
(no group initialized), so callers need no ``if distributed``. active_group and
collective_device are for the other modules that run collectives of their own (train.stop,
train.outputs). torch is imported inside each function.
"""

from __future__ import annotations

import os
from typing import Any

from train.cli import UsageError
from train.contract import COLLECTIVE_TIMEOUT_ENV
from train.distenv import DistEnv

DEFAULT_COLLECTIVE_TIMEOUT = 600
# Joining the group waits for every rank to start (imports, a slow node, a loaded host): a short
# collective timeout must not end a job whose ranks merely start seconds apart.
JOIN_TIMEOUT = 600


def collective_timeout() -> int:
    raw = os.environ.get(COLLECTIVE_TIMEOUT_ENV)
    if not raw:
        return DEFAULT_COLLECTIVE_TIMEOUT
    try:
        value = int(float(raw))
    except ValueError:
        raise UsageError(f"SLURMGEN_COLLECTIVE_TIMEOUT={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise UsageError(f"SLURMGEN_COLLECTIVE_TIMEOUT must be positive, got {raw}")
    return value


def init_process_group(denv: DistEnv, device) -> None:
    """nccl on CUDA, gloo on CPU (nccl on CPU fails); env:// from the exported variables."""
    import datetime

    import torch
    import torch.distributed as dist

    if not denv.distributed or dist.is_initialized():
        return
    kwargs: dict[str, Any] = {}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    timeout = collective_timeout()
    dist.init_process_group(
        backend="nccl" if device.type == "cuda" else "gloo",
        init_method="env://",
        rank=denv.rank,
        world_size=denv.world_size,
        timeout=datetime.timedelta(seconds=max(timeout, JOIN_TIMEOUT)),
        **kwargs,
    )
    if timeout < JOIN_TIMEOUT:
        set_timeout(timeout)


def active_group():
    """torch.distributed when a process group is up, else None."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def collective_device():
    """Where a tensor for a collective must live: the current GPU under nccl, else the CPU."""
    import torch

    dist = active_group()
    if dist is not None and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def set_timeout(seconds: float) -> None:
    """The process group's timeout from now on (train.saves holds it up during a long save)."""
    import datetime

    dist = active_group()
    if dist is not None:
        from torch.distributed.distributed_c10d import _set_pg_timeout

        _set_pg_timeout(datetime.timedelta(seconds=seconds))


def barrier() -> None:
    dist = active_group()
    if dist is not None:
        dist.barrier()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    dist = active_group()
    if dist is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def destroy_process_group() -> None:
    dist = active_group()
    if dist is not None:
        dist.destroy_process_group()


# What a rank sees when a peer's process died under it: gloo's and NCCL's words.
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "remote process exited", "communicator was aborted", "ncclRemoteError")


def lost_a_peer(exc: BaseException) -> bool:
    """Whether exc is this rank's share of another rank's failure: a broken collective. (The
    process group may be gone already: the entry points destroy it on the way out.)"""
    import torch.distributed as dist

    if isinstance(exc, (dist.DistNetworkError, dist.DistBackendError)):
        return True
    text = str(exc)
    return any(words in text for words in _PEER_LOST)
