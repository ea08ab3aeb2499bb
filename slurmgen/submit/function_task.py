"""What each rank of slurmgen.run runs: a Python function, pickled with the task.

submitit pickles the task with cloudpickle: a function defined in `__main__` (a script, a notebook)
travels by value, one from an importable module by reference (that module must import where the
ranks run). Everything else is TrainTask's: the distributed environment exported (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT; one GPU each), the stop on the time-limit warning, the cancel
mark honoured. The function joins the process group itself, from env://."""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from typing import Any, Callable, Optional

from slurmgen.submit.task import TrainTask

KIND = "function"


@dataclass(frozen=True)
class FunctionTask(TrainTask):
    fn: Optional[Callable] = None
    fn_args: tuple = ()

    @classmethod
    def of(cls, base: TrainTask, fn: Callable, args: tuple, rank_hooks: bool) -> "FunctionTask":
        """The job's task (parameters.make_task) calling fn(*args) instead of a training entry point."""
        values = {f.name: getattr(base, f.name) for f in fields(TrainTask)}
        values.update(target=(KIND, name_of(fn)), train_args=(), rank_hooks=rank_hooks)
        return cls(**values, fn=fn, fn_args=tuple(args))

    def _run(self, stop) -> Any:
        sys.argv = [self.target[1]]
        return self.fn(*self.fn_args)  # an exception fails this task; submitit keeps its traceback


def name_of(fn: Callable) -> str:
    """module.qualname, what the job's index entry and logs call the function."""
    return f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', None) or repr(fn)}"
