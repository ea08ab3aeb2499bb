"""What a job's launch needs beyond its layout, shared by rendered scripts and the submit path:
container arguments, interface names and the variables every rank gets. (Where the ranks meet,
the port and each node's interface, is the job's own rule: slurmgen.job.rendezvous.)"""

from __future__ import annotations

import os
from typing import Optional

from slurmgen import contract
from slurmgen.plan.spec import SHIPPED_MODULES, JobSpec
from slurmgen.plan.words import train_arg


def container_dirs(spec: JobSpec, *dirs: Optional[str]) -> list[str]:
    """Directories the ranks share with the batch shell or the submitting side, mounted at the
    same path inside a container: the given ones (log dir for the stop and outcome files,
    working directory) and an absolute --output_dir (a relative one is under the working
    directory)."""
    out = train_arg(spec.train_args, "--output_dir", "--output-dir")
    wanted = [*dirs, out if out and os.path.isabs(out) else None]
    return list(dict.fromkeys(d for d in wanted if d))


def container_args(spec: JobSpec, workdir: str, *dirs: Optional[str], name: Optional[str] = None,
                   node_dir: Optional[str] = None) -> list[str]:
    """pyxis/enroot srun flags, only when asked for; rendered scripts quote them, submit passes
    them as argv. With an image: the user's mounts plus container_dirs and node_dir at the same
    path, the working directory inside, and a name so that a job's steps import the image once per node."""
    if spec.container_runtime != "pyxis":
        return []
    if not spec.container_image:
        return [f"--container-mounts={spec.container_mounts}"] if spec.container_mounts else []
    flags = [f"--container-image={spec.container_image}"]
    if name:
        flags.append(f"--container-name={name}")
    mounts = [spec.container_mounts] if spec.container_mounts else []
    mounts += [f"{d}:{d}" for d in _same_path(spec, workdir, dirs, node_dir)]
    return flags + [f"--container-mounts={','.join(mounts)}", f"--container-workdir={workdir}"]


def container_exec(spec: JobSpec, workdir: str, *dirs: Optional[str], node_dir: Optional[str] = None) -> list[str]:
    """With --container apptainer:IMAGE (or singularity): the words that run a step's command in
    the image, GPUs passed in (--nv), the user's mounts plus container_dirs and node_dir bound at
    the same path, the working directory inside. Nothing for pyxis, whose flags go to srun itself."""
    if spec.container_runtime == "pyxis" or not spec.container_image:
        return []
    binds = ([spec.container_mounts] if spec.container_mounts else []) + _same_path(spec, workdir, dirs, node_dir)
    return [spec.container_runtime, "exec", "--nv", "--bind", ",".join(binds), "--pwd", workdir, spec.container_image]


def _same_path(spec: JobSpec, workdir: str, dirs, node_dir: Optional[str]) -> list[str]:
    """What an image gets at the same path, after the user's mounts: container_dirs, then node_dir, the
    node's own folder where the ranks beat (train.heartbeat's node folders), which the hang watch reads
    from outside the image (it exists on every node: not one of the folders the script makes)."""
    return list(dict.fromkeys(d for d in [*container_dirs(spec, workdir, *dirs), node_dir] if d))


def gloo_socket_ifname(nccl_value: str) -> Optional[str]:
    """NCCL's interface list in gloo's terms, where it can be told before the job runs: gloo takes
    exact names, NCCL's "=" list. A plain list is prefixes to NCCL ("ib" is ib0, ib1, ...), which
    each node resolves itself (iface_prefixes); "^" (names to avoid) gloo cannot express: then gloo
    is left to pick the interface of the host's own address."""
    return nccl_value[1:] if nccl_value.startswith("=") else None


def iface_prefixes(nccl_value: str) -> list[str]:
    """The prefixes of a plain --nccl-socket-ifname list (none for "=" and "^" lists)."""
    return [] if nccl_value[:1] in ("=", "^") else [p for p in nccl_value.split(",") if p]


def rank_exports(spec: JobSpec) -> list[tuple[str, str]]:
    """Variables slurmgen's own options set for every rank (before the user's --env), shared by
    rendered scripts and the submit path."""
    pairs = []
    if spec.target[0] == "module" and spec.module in SHIPPED_MODULES:
        pairs.append(("PYTHONSAFEPATH", "1"))
    if spec.resume == "auto" and spec.rank_hooks_on:
        pairs.append((contract.RESUME_ENV, "auto"))  # train.trainer_hooks
    if spec.save_timeout:
        pairs.append((contract.SAVE_TIMEOUT_ENV, str(spec.save_timeout)))
    if spec.nccl_debug:
        pairs.append(("NCCL_DEBUG", spec.nccl_debug.upper()))
    if spec.nccl_socket_ifname:
        pairs.append(("NCCL_SOCKET_IFNAME", spec.nccl_socket_ifname))
        gloo = gloo_socket_ifname(spec.nccl_socket_ifname)
        if gloo:
            pairs.append(("GLOO_SOCKET_IFNAME", gloo))
    if spec.hf_home:
        pairs.append(("HF_HOME", spec.hf_home))
    if spec.offline:
        pairs += [("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")]
    if spec.prepared_data:  # train.sft loads it and does not tokenize
        pairs.append((contract.PREPARED_DATA_ENV, spec.prepared_data))
    return pairs
