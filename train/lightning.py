"""A Lightning strategy for jobs whose nodes hold different numbers of GPUs (1,1,2,2):

    from train.lightning import UnevenDDPStrategy
    trainer = lightning.Trainer(strategy=UnevenDDPStrategy(), devices="auto", ...)

Lightning assumes every node runs the same number of processes: it checks devices x num_nodes
against the world size, and gives its DistributedSampler num_nodes x devices replicas. On 1,1,2,2
the first stops every rank at start and the second would shard the data wrong. This DDP strategy
takes the world size, the ranks and the node rank from the launch (torchrun, or slurmgen's srun
launcher, which exports the same variables; train.distenv reads them), checks no uniform layout,
and gives the sampler the job's world size and rank: every sample once per epoch on any layout.
On a uniform layout it trains as Lightning's own "ddp" does. Only `lightning` (2.x) is supported;
`import lightning.pytorch as pl` is the same API as pytorch_lightning.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.pytorch.strategies import DDPStrategy

from train.distenv import DistEnv


class JobEnvironment(ClusterEnvironment):
    """Where this process is in the job, as its launcher said: read, never set or checked against a
    uniform layout."""

    def __init__(self) -> None:
        super().__init__()
        self.job = DistEnv.from_environ(os.environ)

    @property
    def creates_processes_externally(self) -> bool:
        return True  # torchrun or srun started every rank: Lightning must start none

    @property
    def main_address(self) -> str:
        return self.job.master_addr

    @property
    def main_port(self) -> int:
        return self.job.master_port

    @staticmethod
    def detect() -> bool:
        return "RANK" in os.environ and "WORLD_SIZE" in os.environ

    def world_size(self) -> int:
        return self.job.world_size

    def set_world_size(self, size: int) -> None:
        pass  # Lightning offers num_nodes x devices, which an uneven layout is not

    def global_rank(self) -> int:
        return self.job.rank

    def set_global_rank(self, rank: int) -> None:
        pass  # node_rank x devices + local_rank is wrong past the first node of another width

    def local_rank(self) -> int:
        return self.job.local_rank

    def node_rank(self) -> int:
        return self.job.node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        pass  # devices x num_nodes need not be the world size: nodes differ


class UnevenDDPStrategy(DDPStrategy):
    """DDP over the job's ranks, whatever number each node runs. Takes DDPStrategy's arguments
    (process_group_backend, timeout, find_unused_parameters, ...)."""

    strategy_name = "ddp_uneven"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cluster_environment", JobEnvironment())
        super().__init__(**kwargs)

    @property
    def num_processes(self) -> int:
        """This node's ranks (LOCAL_WORLD_SIZE), not the devices Lightning was given."""
        return self.cluster_environment.job.local_world_size

    @property
    def num_nodes(self) -> int:
        """The job's nodes where the launch says (GROUP_WORLD_SIZE), else what the Trainer was given."""
        return int(os.environ.get("GROUP_WORLD_SIZE") or self._num_nodes)

    @num_nodes.setter
    def num_nodes(self, num_nodes: int) -> None:
        self._num_nodes = num_nodes

    @property
    def root_device(self) -> torch.device:
        """This rank's device: the CPU, or its own GPU (cuda:0 where each rank sees only its own)."""
        devices = self.parallel_devices
        assert devices, "the Trainer sets the devices before it asks for one"
        if devices[0].type == "cpu":
            return devices[0]
        index = self.cluster_environment.job.device_index
        if index >= len(devices):
            raise ValueError(f"rank {self.global_rank} is local rank {index} on its node, but the Trainer has"
                             f" {len(devices)} device(s) there: pass devices='auto'")
        return devices[index]

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}
