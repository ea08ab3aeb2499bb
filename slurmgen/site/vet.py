"""The checks of a job's values that ask this machine, run before anything is written (render, check,
submit): the script parses (bash -n), the training arguments parse (their entry point's parser), no
GPU count is above what any node has (sinfo), and a --script that would start again from step 0 after
a requeue is said. The slow ones start at once and are read last."""

from __future__ import annotations

from slurmgen.site import limits, shell_syntax, train_args


def start(spec, ask_cluster: bool = True) -> "Vetting":
    """The checks, started (a sweep's runs each have their training arguments): they run while the
    command renders or submits. Raises SpecError for what needs no waiting (a missing model)."""
    from slurmgen.plan import sweep

    runs = sweep.expand(spec.sweep, spec.sweep_mode, spec.train_args) if spec.sweep else ()
    return Vetting(spec, runs, ask_cluster)


class Vetting:
    def __init__(self, spec, runs=(), ask_cluster: bool = True):
        self.spec = spec
        self.asking = limits.Asking() if ask_cluster else limits.NoAnswer()
        self.args = train_args.start(spec, runs)

    def judge(self, scripts=(), resume_advice: bool = True) -> list[str]:
        """Raises SpecError (one line) for a value that would fail after the queue wait; returns the
        lines to show beside the summary (a check not made here, a run that never resumes)."""
        spec = self.spec
        for text in scripts:
            shell_syntax.check_script(text, spec.setup)
        if not scripts and spec.setup:  # the submit path's setup lines, in submitit's own script
            shell_syntax.check_script("\n".join(spec.setup) + "\n", spec.setup)
        limits.check_gpus(spec, self.asking.nodes())
        note = self.args.verdict() if self.args else ""
        advice = _never_resumes(spec) if resume_advice else []
        return ([note] if note else []) + [f"warning: {line}" for line in advice]


def _never_resumes(spec) -> list[str]:
    """A --script whose Trainer never resumes, in a job that is requeued or retried with --resume off
    (a script that is no Python at all is refused, whatever the options)."""
    if not spec.script:
        return []
    from slurmgen.site.user_script import never_resumes

    found = never_resumes(spec.script)
    requeued = spec.max_restarts > 0 or spec.max_failures > 0
    return found if requeued and spec.resume == "off" else []
