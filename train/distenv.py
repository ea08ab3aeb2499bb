"""Who am I in the job? One answer for every way a training process is started.

Supported launches:
  * torchrun (or anything that sets RANK/WORLD_SIZE/LOCAL_RANK...): taken as is;
  * one Slurm task per GPU (srun, submitit), nodes possibly uneven
    (SLURM_STEP_TASKS_PER_NODE like ``1(x2),2(x2)``), and het jobs where slurmgen's
    script runs one srun per component and exports SLURMGEN_RANK_OFFSET and
    SLURMGEN_WORLD_SIZE because SLURM_PROCID restarts at 0 in each component;
  * a plain process with none of the above: rank 0 of 1.

``DistEnv.from_environ`` is pure (it only reads the mapping it is given), so it can be
table-tested. This module imports neither torch nor slurmgen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, MutableMapping

import hostlist

from train import contract

DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500


class DistEnvError(ValueError):
    """The environment describes an impossible placement (e.g. rank >= world size)."""


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise DistEnvError(f"{name} is not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise DistEnvError(f"{name}={raw!r} is not an integer") from None


def visible_device_count(env: Mapping[str, str]) -> int | None:
    """Devices listed in CUDA_VISIBLE_DEVICES, or None when it is unset (all visible)."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    return len([d for d in raw.split(",") if d.strip()])


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    master_addr: str = DEFAULT_MASTER_ADDR
    master_port: int = DEFAULT_MASTER_PORT
    node_rank: int = 0
    launcher: str = "single"  # "torchrun" | "slurm" | "single"
    # GPUs this process can see (None: CUDA_VISIBLE_DEVICES unset).
    visible_devices: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise DistEnvError(f"rank {self.rank} is outside world size {self.world_size}")
        if not 0 <= self.local_rank < self.local_world_size:
            raise DistEnvError(
                f"local rank {self.local_rank} is outside local world size {self.local_world_size}"
            )
        if self.local_world_size > self.world_size:
            raise DistEnvError(
                f"local world size {self.local_world_size} exceeds world size {self.world_size}"
            )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def device_index(self) -> int:
        """CUDA ordinal for this process.

        With ``--gpus-per-task=1`` Slurm shows each task exactly one device, which is then
        ``cuda:0`` whatever the local rank ("invalid device ordinal" otherwise).
        """
        return 0 if self.visible_devices == 1 else self.local_rank

    # ------------------------------------------------------------------ parsing
    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> "DistEnv":
        env = os.environ if env is None else env
        visible = visible_device_count(env)
        if "RANK" in env and "WORLD_SIZE" in env:
            return cls._from_torchrun(env, visible)
        if "SLURM_PROCID" in env and _in_slurm_step(env):
            return cls._from_slurm(env, visible)
        return cls(
            master_addr=env.get("MASTER_ADDR") or DEFAULT_MASTER_ADDR,
            master_port=_int(env, "MASTER_PORT", DEFAULT_MASTER_PORT),
            visible_devices=visible,
        )

    @classmethod
    def _from_torchrun(cls, env: Mapping[str, str], visible: int | None) -> "DistEnv":
        local_rank = _int(env, "LOCAL_RANK", 0)
        return cls(
            rank=_int(env, "RANK"),
            local_rank=local_rank,
            world_size=_int(env, "WORLD_SIZE"),
            # torchrun always sets it; a hand-made environment may not (lower bound then).
            local_world_size=_int(env, "LOCAL_WORLD_SIZE", local_rank + 1),
            master_addr=env.get("MASTER_ADDR") or DEFAULT_MASTER_ADDR,
            master_port=_int(env, "MASTER_PORT", DEFAULT_MASTER_PORT),
            node_rank=_int(env, "GROUP_RANK", 0),
            launcher="torchrun",
            visible_devices=visible,
        )

    @classmethod
    def _from_slurm(cls, env: Mapping[str, str], visible: int | None) -> "DistEnv":
        procid = _int(env, "SLURM_PROCID")
        offset = _int(env, contract.RANK_OFFSET_ENV, 0)
        step_tasks = _int(env, "SLURM_STEP_NUM_TASKS", _int(env, "SLURM_NTASKS", 1))
        world = _int(env, contract.WORLD_SIZE_ENV, step_tasks)
        node_id = _int(env, "SLURM_NODEID", 0)

        per_node_raw = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        if per_node_raw:
            try:
                per_node = hostlist.parse_slurm_tasks_per_node(per_node_raw)
            except Exception as exc:  # hostlist raises its own BadHostlist and ValueError
                raise DistEnvError(f"cannot parse tasks per node {per_node_raw!r}: {exc}") from None
            if node_id >= len(per_node):
                raise DistEnvError(
                    f"SLURM_NODEID={node_id} but tasks per node {per_node_raw!r} lists {len(per_node)} nodes"
                )
            local_world = per_node[node_id]
        else:
            local_world = step_tasks

        return cls(
            rank=offset + procid,
            local_rank=_int(env, "SLURM_LOCALID", 0),
            world_size=world,
            local_world_size=local_world,
            master_addr=env.get("MASTER_ADDR") or _first_slurm_host(env, het=offset > 0),
            master_port=_master_port(env, world),
            node_rank=node_id,
            launcher="slurm",
            visible_devices=visible,
        )

    # ------------------------------------------------------------------ export
    def export(self, env: MutableMapping[str, str] | None = None) -> None:
        """Write the variables torch.distributed (env://), HF/accelerate and Lightning read.

        Under Slurm with one visible GPU per task, LOCAL_RANK is exported as 0: accelerate
        uses LOCAL_RANK as the CUDA ordinal (device and NCCL barrier device), and the only
        ordinal that task has is 0. The node-local rank stays in ``self.local_rank``.
        """
        env = os.environ if env is None else env
        local = self.local_rank
        if self.launcher == "slurm" and self.visible_devices == 1:
            local = 0
        env.update(
            RANK=str(self.rank),
            LOCAL_RANK=str(local),
            WORLD_SIZE=str(self.world_size),
            LOCAL_WORLD_SIZE=str(self.local_world_size),
            GROUP_RANK=str(self.node_rank),
            MASTER_ADDR=self.master_addr,
            MASTER_PORT=str(self.master_port),
        )
        # What torch's is_torchelastic_launched() reads: frameworks (Lightning) then take these
        # variables rather than the Slurm ones, which a het component has of its own.
        env.setdefault("TORCHELASTIC_RUN_ID", env.get("SLURM_JOB_ID") or "none")

    def describe(self) -> str:
        return (
            f"rank {self.rank}/{self.world_size} local {self.local_rank}/{self.local_world_size} "
            f"node {self.node_rank} via {self.launcher}, master {self.master_addr}:{self.master_port}"
        )


def _in_slurm_step(env: Mapping[str, str]) -> bool:
    # The batch script itself also has SLURM_PROCID=0 and the job's SLURM_NTASKS, but it is
    # not one of the tasks; only srun steps set the SLURM_STEP_* variables.
    return any(k in env for k in ("SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_ID"))


def _master_port(env: Mapping[str, str], world: int) -> int:
    # slurmgen's scripts and submit path derive the port from the job id (slurmgen.plan.spec, the one
    # place that formula lives) and export it; tasks never guess one of their own.
    if world > 1 and not env.get("MASTER_PORT"):
        raise DistEnvError("MASTER_PORT is not set: slurmgen's scripts export it; "
                           "for an srun of your own, export MASTER_PORT (and MASTER_ADDR) first")
    return _int(env, "MASTER_PORT", DEFAULT_MASTER_PORT)


def _first_slurm_host(env: Mapping[str, str], het: bool) -> str:
    # Rank 0 runs on the first node of component 0. In a plain step that is the step's
    # first node; in a later het component only the het-group-0 list names it.
    names = ["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"]
    if het:
        names = ["SLURM_JOB_NODELIST_HET_GROUP_0", "SLURM_JOB_NODELIST_PACK_GROUP_0"] + names
    for name in names:
        raw = env.get(name)
        if raw:
            try:
                hosts = hostlist.expand_hostlist(raw)
            except Exception as exc:
                raise DistEnvError(f"cannot parse {name}={raw!r}: {exc}") from None
            if hosts:
                return hosts[0]
    return DEFAULT_MASTER_ADDR


def setup(env: MutableMapping[str, str] | None = None) -> DistEnv:
    """Read the environment and export the torch variables; what every entry point calls first."""
    env = os.environ if env is None else env
    denv = DistEnv.from_environ(env)
    if denv.launcher != "single":
        denv.export(env)
    return denv
