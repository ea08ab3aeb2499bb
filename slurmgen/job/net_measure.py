"""The network check's measurement, run by every node's own Python (inside the job's container, if
any) as `python -c "$(cat net_measure.py)" FIRST_RANK WORLD`, one task per node: the nodes join
one process group on the job's MASTER_ADDR:MASTER_PORT with the job's backend (NCCL where a GPU is
visible, else gloo) and time
  * a ring of transfers in both directions, all nodes at once (each node sends one stream and
    receives one, as its link would in training), timed by the receiver: the best of a few
    transfers of SIZE bytes (bandwidth) and of small ones (latency), per link; over gloo (TCP)
    also where the job's backend is NCCL (see `ring` below);
  * an all-reduce ladder from KB to tens of MB across every node with the job's backend (the
    job-wide figure).
On a slow network it measures less (one try, the ladder cut short), so that it stays short.
Each node prints one SLURMGEN_NETCHECK line of JSON that slurmgen.job.net_check judges.
Standard library and torch only: the image may lack slurmgen."""
import datetime
import json
import os
import re
import socket
import sys
import time

import torch
import torch.distributed as dist

SIZE = 16 << 20  # bytes per ring transfer: long enough that start skew does not count
TRIES = 3  # the best of them (see best_of)
LONG_SECONDS = 0.3  # a try that took this long is not repeated, nor a larger size
PINGS = 10
LADDER = (4 << 10, 256 << 10, 4 << 20, 32 << 20)

first, world = int(sys.argv[1]), int(sys.argv[2])
rank = first + int(os.environ.get("SLURM_PROCID", "0"))
cuda = torch.cuda.is_available()
device = torch.device("cuda", 0) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
address = "tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
# gloo connects a pair of nodes when they first talk, not every node to every other at the start: the
# check talks to its ring neighbours and a barrier's few (log2 of the nodes), where a full mesh at 128
# nodes is 127 connections per node and timed out (issue 41; bench/net_check_scale.py). A torch that
# does not know the variable connects the full mesh, and the check's budget still bounds it.
os.environ.setdefault("TORCH_GLOO_LAZY_INIT", "1")
# Which transport NCCL took (InfiniBand, its TCP sockets, ...), from its own log: the check names what it
# measured. This process's settings only: the training's NCCL_DEBUG is the user's.
NCCL_LOG = "/tmp/slurmgen-netcheck-nccl-%d.log" % os.getpid()
if cuda:
    os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET", NCCL_DEBUG_FILE=NCCL_LOG)
dist.init_process_group("nccl" if cuda else "gloo", init_method=address, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=120))
# The ring over gloo (TCP on the interface gloo takes), whatever the job's backend: a transfer must be
# timed by its receiver alone, and NCCL runs a send and a receive as one kernel (a batch), or could
# deadlock them apart. The all-reduce ladder uses the job's own backend.
ring = dist.new_group(backend="gloo") if cuda else dist.group.WORLD


def sync():
    if cuda:
        torch.cuda.synchronize()


def transfer(buf, send_to, recv_from):
    """Seconds until this rank has its neighbour's buffer, every rank sending at once (over gloo)."""
    out = buf.clone()
    dist.barrier(group=ring)
    began = time.perf_counter()
    send, receive = dist.isend(buf, send_to, group=ring), dist.irecv(out, recv_from, group=ring)
    receive.wait()
    took = time.perf_counter() - began
    send.wait()
    return took


def slowest(seconds):
    """The most any rank took: every rank decides alike whether to try again."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ring)
    return t.item()


def best_of(measure):
    """The best of TRIES, or the one try where some rank took long: a slow link is slow every time,
    a busy moment is not, and the check must stay short on a slow network."""
    first = measure()
    if slowest(first) > LONG_SECONDS:
        return first
    return min([first] + [measure() for _ in range(TRIES - 1)])


def link(send_to, recv_from):
    """The incoming link from recv_from: (best latency in ms, best GB/s)."""
    small = torch.zeros(1)
    big = torch.zeros(SIZE // 4)
    latency = min(transfer(small, send_to, recv_from) for _ in range(PINGS))
    seconds = best_of(lambda: transfer(big, send_to, recv_from))
    return round(latency * 1e3, 3), round(SIZE / seconds / 1e9, 3)


def all_reduce(size):
    buf = torch.ones(size // 4, device=device)

    def once():
        dist.barrier()
        began = time.perf_counter()
        dist.all_reduce(buf)
        sync()
        return time.perf_counter() - began
    return [size, round(best_of(once) * 1e3, 3)]


def ladder():
    """All-reduce times from KB to tens of MB, up to the first size that takes long."""
    dist.all_reduce(torch.ones(1, device=device))  # connections made before anything is timed
    out = []
    for size in LADDER:
        out.append(all_reduce(size))
        if slowest(out[-1][1] / 1e3) > LONG_SECONDS:
            break
    return out


def ring_transport():
    """The ring's: gloo over TCP, on the interface the job gives it (GLOO_SOCKET_IFNAME), else the host
    name's address, which is what gloo takes."""
    try:
        where = os.environ.get("GLOO_SOCKET_IFNAME") or socket.gethostbyname(socket.gethostname())
    except OSError:
        return "TCP"
    return "TCP on " + where


def nccl_transport():
    """NCCL's network as its log names it ("IB", "Socket", a plugin's name), and how its channels went."""
    try:
        with open(NCCL_LOG) as log:
            text = log.read()
        os.unlink(NCCL_LOG)
    except OSError:
        return "not named (no NCCL log)"
    network = re.search(r"NCCL INFO Using network (.+)", text)
    via = sorted(set(re.findall(r" via (\S+)", text)))
    return ("network " + network.group(1).strip() if network else "network not named") + \
        (" (" + ", ".join(via) + ")" if via else "")


began = time.perf_counter()
following, before = (rank + 1) % world, (rank - 1) % world
report = {"host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(), "rank": rank,
          "backend": dist.get_backend()}
if world > 1:
    report["from_before"] = link(following, before)  # before -> this node
    report["from_following"] = link(before, following)  # following -> this node
report["all_reduce_ms"] = ladder()
report["transport"] = {"ring": "gloo, " + ring_transport(),
                       "all_reduce": "nccl, " + nccl_transport() if cuda else "gloo, " + ring_transport()}
report["seconds"] = round(time.perf_counter() - began, 2)
dist.destroy_process_group()
sys.stdout.write("SLURMGEN_NETCHECK " + json.dumps(report) + "\n")  # one write: every node appends to one file
sys.stdout.flush()
# Not through the interpreter's teardown, where torch's threads may abort a process that is done
# ("terminate called without an active exception"; as train.program does)
os._exit(0)
