"""Where the ranks meet, one rule for both paths: rank 0's node (the first of component 0) and the
job's port (--master-port, else one derived from the job id, so that two jobs on a node differ; a
requeued job keeps its id, hence its port), and which network interface a node gives gloo for
NCCL's interface prefixes. The rendered script's runtime (prepare.py) and the submit path's tasks
(slurmgen.submit.task) both ask here."""

from __future__ import annotations

import socket
from typing import Mapping, Optional


class RendezvousError(RuntimeError):
    """No rendezvous can be named: one line for the job log."""


def job_port(job_id: str, port_range: tuple[int, int]) -> int:
    """LOW + the job id modulo the range's size (the digits of an array task's id, 12_3 -> 123)."""
    low, high = port_range
    digits = "".join(c for c in str(job_id) if c.isdigit()) or "0"
    return low + int(digits) % (high - low + 1)


def master_port(master: Optional[int], port_range: tuple[int, int], per_run: bool, env: Mapping[str, str]) -> int:
    """--master-port (a sweep's run i: + i), else from the job id. Never an inherited MASTER_PORT: sbatch
    exports the submitting shell's environment, and two jobs would then share one port."""
    if master is None:
        return job_port(env.get("SLURM_JOB_ID", "0"), port_range)
    run = env.get("SLURM_ARRAY_TASK_ID") or env.get("SLURMGEN_RUN") or "0"
    return master + (int(run) if per_run and run.isdigit() else 0)


def matching_iface(prefixes, names) -> Optional[str]:
    """The first interface, in the given order of names, that starts with one of the prefixes."""
    return next((n for n in names if any(n.startswith(p) for p in prefixes)), None)


def node_iface(prefixes) -> Optional[str]:
    """This node's interface for NCCL's prefixes, its names in sorted order (as every step takes it)."""
    return matching_iface(prefixes, sorted(name for _, name in socket.if_nameindex()))


def iface_ipv4(name: str) -> Optional[str]:
    """The IPv4 address of this node's interface NAME (SIOCGIFADDR), None when it has none."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def host_ipv4(host: str) -> Optional[str]:
    """The first IPv4 address the host name resolves to (as `getent ahostsv4`)."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    except (OSError, IndexError):
        return None


def first_node(env: Mapping[str, str], het: bool) -> str:
    """Rank 0's node: the first of component 0 (a het job's group 0)."""
    import hostlist

    names = env.get("SLURM_JOB_NODELIST_HET_GROUP_0" if het else "SLURM_JOB_NODELIST", "")
    if not names:
        raise RendezvousError("slurmgen: not in a Slurm job (no SLURM_JOB_NODELIST): nowhere to meet")
    return hostlist.expand_hostlist(names)[0]


def master_addr(node: str, as_ip: bool, iface: str, env: Mapping[str, str]) -> str:
    """The node's name; with as_ip its IPv4 address: of the interface iface, which this process owns
    only on that node (the batch shell runs on rank 0's node), else the name's."""
    if not as_ip:
        return node
    if iface:
        found = iface_ipv4(iface) if env.get("SLURMD_NODENAME", node) == node else None
    else:
        found = host_ipv4(node)
    if not found:
        raise RendezvousError(f"slurmgen: --master-addr-ip: no IPv4 address for {node}"
                              f"{' on interface ' + iface if iface else ''}")
    return found


def gloo_iface(prefixes, nccl_value: str) -> str:
    """This node's own interface for the prefixes (the batch shell's; every step takes its own)."""
    found = node_iface(prefixes)
    if not found:
        raise RendezvousError(f"slurmgen: --nccl-socket-ifname {nccl_value}: no interface of {socket.gethostname()}"
                              " starts so")
    return found

