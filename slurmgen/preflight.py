"""Preflight's verdict, run by the batch script (python -m slurmgen.preflight LOG NODES): compare
the reports every node wrote (SLURMGEN_PREFLIGHT lines, from the script's PREFLIGHT_REPORT) and
stop the job before training when a node differs from the others or lacks what the job needs."""

from __future__ import annotations

import collections
import json
import sys

FIELDS = ("python", "torch", "nccl", "transformers", "trl", "datasets")


def problems(reports: list[dict], nodes: int) -> list[tuple[str, str, str, str]]:
    """(node, what, found, expected) for every difference. One report per node of each component:
    Slurm may put two components on one node (a 1,1,2,2 job on 8-GPU nodes), and that is fine:
    each component has its own torchrun agent, node rank and GPUs there."""
    found = [("(job)", "node reports", str(len(reports)), str(nodes))] if len(reports) != nodes else []
    for f in FIELDS:
        usual = collections.Counter(r[f] for r in reports).most_common(1)[0][0] if reports else ""
        found += [(r["host"], f, r[f], usual) for r in reports if r[f] != usual]
    for r in reports:
        seen, _, want = r["gpus"].partition(" of ")
        found += [(r["host"], "GPUs visible", seen, want)] if seen != want else []
        found += [(r["host"], f, r[f], "found") for f in ("target", "model", "interface")
                  if r.get(f, "found").startswith("MISSING")]
    return found


REQUEUED = 3  # exit status: the job was requeued without the node that differs


def main(argv: list[str]) -> int:
    """LOG NODES [FAILURES_FILE MAX_FAILURES LAYOUT]: with the last three, a difference found on
    one node only counts as a failure there (slurmgen.retry): the job is requeued without it."""
    log, nodes, *retry_args = argv
    with open(log) as fh:
        reports = [json.loads(line.split(" ", 1)[1]) for line in fh if line.startswith("SLURMGEN_PREFLIGHT ")]
    found = problems(reports, int(nodes))
    if found:
        print("slurmgen: preflight failed; not starting training:")
        rows = [("node", "what", "found", "expected")] + sorted(found)
        widths = [max(map(len, column)) for column in zip(*rows)]
        for row in rows:
            print("  " + "  ".join(map(str.ljust, row, widths)).rstrip())
        hosts = {host for host, *_ in found}
        sys.stdout.flush()
        if retry_args and len(hosts) == 1 and "(job)" not in hosts:
            from slurmgen import retry

            path, most, layout = retry_args
            if retry.failed(retry.Path(path), int(most), layout, "preflight", hosts.pop()) == 0:
                return REQUEUED
        return 1
    print("slurmgen: preflight passed on %d node(s): " % len(reports)
          + ", ".join(f + " " + reports[0][f] for f in ("python", "torch", "transformers", "trl", "datasets")))
    shared = sorted(h for h, n in collections.Counter(r["host"] for r in reports).items() if n > 1)
    if shared:
        print(f"slurmgen: {', '.join(shared)} {'holds' if len(shared) == 1 else 'hold'} more than one component"
              " (each with its own agent, node rank and GPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
