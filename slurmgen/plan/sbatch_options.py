"""The long options of sbatch, by Slurm release: the names `--sbatch NAME[=VALUE]` may use.

Taken from the sbatch(1) manual page of each release (Debian's 22.05.8; 24.11.7 and 25.11.7 from
the release sources). `sbatch --help` is not a full list (it omits --wait-all-nodes, --open-mode and
more), so the installed release is matched by its version instead."""

from __future__ import annotations

import re
from typing import Optional

Release = tuple[int, int]


def parse_release(text: str) -> Optional[Release]:
    """'slurm-wlm 22.05.8', 'slurm 25.11.7' or '25.11' -> (22, 5); None if no version is in it."""
    match = re.search(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def release_name(release: Optional[Release]) -> str:
    return f"{release[0]}.{release[1]:02d}" if release else "any release"

_RELEASE_22_05 = frozenset("""
account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment constraint
container contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline
delay-boot dependency distribution error exclude exclusive export export-file extra-node-info
get-user-env gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres
gres-flags help hint ignore-pbs input job-name kill-on-invalid-dep licenses mail-type mail-user
mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network nice no-kill no-requeue nodefile
nodelist nodes ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket open-mode
output overcommit oversubscribe parsable partition power prefer priority profile propagate qos
quiet reboot requeue reservation signal sockets-per-node spread-job switches test-only
thread-spec threads-per-core time time-min tmp uid usage use-min-nodes verbose version wait
wait-all-nodes wckey wrap
""".split())
_RELEASE_24_11 = frozenset("""
account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment constraint
container container-id contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task
deadline delay-boot dependency distribution error exclude exclusive export export-file extra
extra-node-info get-user-env gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket
gpus-per-task gres gres-flags help hint ignore-pbs input job-name kill-on-invalid-dep licenses
mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network nice no-kill
no-requeue nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node
ntasks-per-socket oom-kill-step open-mode output overcommit oversubscribe parsable partition
prefer priority profile propagate qos quiet reboot requeue reservation resv-ports segment signal
sockets-per-node spread-job stepmgr switches test-only thread-spec threads-per-core time
time-min tmp tres-bind tres-per-task uid usage use-min-nodes verbose version wait wait-all-nodes
wckey wrap
""".split())
_RELEASE_25_11 = frozenset("""
account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment
consolidate-segments constraint container container-id contiguous core-spec cores-per-socket
cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot dependency distribution error exclude
exclusive export export-file extra extra-node-info get-user-env gid gpu-bind gpu-freq gpus
gpus-per-node gpus-per-socket gpus-per-task gres gres-flags help hint ignore-pbs input job-name
kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu
mincpus network nice no-kill no-requeue nodefile nodelist nodes ntasks ntasks-per-core
ntasks-per-gpu ntasks-per-node ntasks-per-socket oom-kill-step open-mode output overcommit
oversubscribe parsable partition prefer priority profile propagate qos quiet reboot requeue
reservation resources resv-ports segment signal sockets-per-node spread-job spread-segments
stepmgr switches test-only thread-spec threads-per-core time time-min tmp tres-bind
tres-per-task uid usage use-min-nodes verbose version wait wait-all-nodes wckey wrap
""".split())

BY_RELEASE = {(22, 5): _RELEASE_22_05, (24, 11): _RELEASE_24_11, (25, 11): _RELEASE_25_11}
# Any release slurmgen knows of, for a machine without sbatch.
ANY_RELEASE = frozenset().union(*BY_RELEASE.values())
