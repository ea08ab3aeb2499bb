"""Parse a job's training arguments with the entry point's own parser, before the queue wait.

    python -m train.args_check MODULE ARGS_JSON     # a JSON list of argument lists, one per run

`slurmgen check` and `slurmgen render --check` run this on the login node for the entry points
slurmgen ships (train.sft, train.classify, train.ddp_loop): an unknown argument, a value of the wrong
type or a missing model is one `error: ...` line and exit 2 here, a finding that fails the check there,
not a failure on every rank after the wait. Exit 0 when every list parses. What only the job's nodes can judge (bf16 or fp16 on a login
node without that GPU) is left to the job; paths are the job's too (checked by the entry point).
"""

from __future__ import annotations

import importlib
import json
import re
import sys

from train.cli import UsageError
from train.distenv import DistEnvError

# Words of the parsers' refusals that depend on this machine's devices, not on the arguments.
DEVICE_WORDS = re.compile(r"bf16|fp16|tf32|gpu|cuda|npu|xpu|mps|hpu|device", re.I)


def first_error(module: str, lists: list[list[str]]) -> str | None:
    """The first refusal of MODULE's parser over the argument lists, or None."""
    check_args = importlib.import_module(module).check_args
    for argv in lists:
        try:
            check_args(list(argv))
        except (UsageError, DistEnvError) as exc:
            if not DEVICE_WORDS.search(str(exc)):
                return str(exc)
        except SystemExit as exc:  # a parser that exits on its own (--help among the arguments)
            if exc.code:
                return f"the arguments {' '.join(argv)!r} end the parser (exit status {exc.code})"
    return None


def main(argv: list[str]) -> int:
    error = first_error(argv[0], json.loads(argv[1]))
    if error:
        print(f"error: {error}", flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
