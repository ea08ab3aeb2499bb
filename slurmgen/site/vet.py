"""The checks of a job's values that ask this machine, run before anything is written (render, check,
submit): the script parses (bash -n), no GPU count, partition, node count or feature is beyond what
the cluster has (sinfo), a shipped entry point is given a model, and a --script that would start again
from step 0 after a requeue is said.
`check` and `render --check` parse the training arguments with the entry point's own parser (seconds:
TRL's import); a plain render, submit or Job against that parser's option list (milliseconds; the
parser itself the first time with these libraries). The slow ones start at once and are read last."""

from __future__ import annotations

import time

from slurmgen.plan.words import SpecError
from slurmgen.site import limits, shell_syntax, train_args

# check's result line when the training arguments would stop every rank
ARGS_FAIL = "the layout can run, but the training arguments would fail on every rank after the queue wait"


def start(spec, ask_cluster: bool = True, parse_args: bool = False, scripts: bool = False) -> "Vetting":
    """The checks, started (a sweep's runs each have their training arguments): they run while the
    command renders or submits. parse_args: the training arguments by the entry point's own parser,
    for check's verdict (else against its option list, refused by judge()). scripts: judge() will
    be given the scripts the caller renders now (bash is started for the first at once; close()
    where none comes)."""
    from slurmgen.plan import sweep

    runs = sweep.expand(spec.sweep, spec.sweep_mode, spec.train_args) if spec.sweep else ()
    return Vetting(spec, runs, ask_cluster, parse_args, scripts)


class Vetting:
    def __init__(self, spec, runs=(), ask_cluster: bool = True, parse_args: bool = False, scripts: bool = False):
        self.spec, self.full, self.started = spec, parse_args, time.monotonic()
        self.asking = limits.Asking() if ask_cluster else limits.NoAnswer()
        self.parse = shell_syntax.Parse() if scripts else None  # bash starts while the script is rendered
        self.no_model = train_args.missing_model(spec, runs)  # "" or the line saying so
        # with no model the check has its finding already; the parser would only repeat it
        self.args = None if self.no_model else train_args.start(spec, runs, full=parse_args)

    def judge(self, scripts=(), resume_advice: bool = True, places: bool = True) -> list[str]:
        """Raises SpecError (one line) for a value that would fail after the queue wait, the training
        arguments' parse included (but where check's verdict says it: findings()); returns the
        warnings to show beside the summary (a run that never resumes, arguments not checked). The
        model is the caller's: see no_model. places: partitions, node counts and features too
        (check's verdict says those per component instead)."""
        spec = self.spec
        texts = list(scripts) or (["\n".join(spec.setup) + "\n"] if spec.setup else [])  # submit: its setup lines
        parses = self._parses(texts)  # bash parses while sinfo is awaited
        nodes = self.asking.nodes()
        for text, parse in zip(texts, parses):
            shell_syntax.check_script(text, spec.setup, parse)
        if places:
            limits.check_places(spec, nodes, self.asking.default)
        limits.check_gpus(spec, nodes)
        advice = _never_resumes(spec) if resume_advice else []
        said = []
        if self.args is not None and not self.full:
            line, refused = self.args.verdict()
            if refused:
                raise SpecError(line)
            advice += [line] if line else []
            if self.args.ran_parser() and not line:  # the seconds a user waited, said once
                said.append(f"the training arguments were parsed by {self.args.module}'s own parser (its import:"
                            f" {time.monotonic() - self.started:.0f} s, once for these libraries; from now on"
                            " its option list, kept in ~/.cache/slurmgen, is read)")
        return [f"warning: {line}" for line in advice] + said

    def _parses(self, texts: list) -> list:
        """A started Parse of each text, the first by the bash started with the vetting."""
        ready, self.parse = self.parse, None
        if ready is None:
            return [shell_syntax.Parse(text) for text in texts]
        if not texts:
            ready.close()
            return []
        return [ready.feed(texts[0])] + [shell_syntax.Parse(text) for text in texts[1:]]

    def close(self) -> None:
        """No script after all (start(scripts=True)): the bash started for it ends."""
        if self.parse is not None:
            self.parse.close()
            self.parse = None

    def findings(self, verdict):
        """check's verdict with the training arguments' findings: no model, or the parser's refusal,
        fails it; a parser that cannot run here is one line saying they were not checked."""
        if self.no_model:
            verdict.add([self.no_model], ARGS_FAIL)
        elif self.args:
            line, refused = self.args.verdict()
            if line:
                verdict.add([line], ARGS_FAIL if refused else "")
        return verdict


def _never_resumes(spec) -> list[str]:
    """A --script whose Trainer never resumes, in a job that is requeued or retried with --resume off
    (a script that is no Python at all is refused, whatever the options)."""
    if not spec.script:
        return []
    from slurmgen.site.user_script import never_resumes

    found = never_resumes(spec.script)
    requeued = spec.max_restarts > 0 or spec.max_failures > 0
    return found if requeued and spec.resume == "off" else []
