"""What the script's text says of the job beyond its layout: the few spec values the templates
print, chosen here, so that a template reads the plan alone (`plan.facts`) and never the spec."""

from __future__ import annotations

from typing import Optional

from slurmgen.frozen_records import frozen
from slurmgen.plan.spec import JobSpec


@frozen(eq=False)
class ScriptFacts:
    """The spec values the templates print."""

    job_name: str
    python: str
    module: Optional[str]
    train_args: tuple[str, ...]
    setup: tuple[str, ...]            # --setup lines, run before the launch
    env: tuple[tuple[str, str], ...]  # --env pairs, exported
    launcher: str                     # names the launch template: launch_LAUNCHER.sh.j2
    nodes: int
    layout_origin: str                # --gpus auto: how the layout was chosen (header)
    grace: int                        # seconds of warning before the time limit
    exclusive: bool
    collective_timeout: int
    rdzv_timeout: int
    prepared_data: Optional[str]
    in_container: bool
    rank_hooks_on: bool


def script_facts(spec: JobSpec) -> ScriptFacts:
    return ScriptFacts(
        job_name=spec.job_name, python=spec.python, module=spec.module, train_args=tuple(spec.train_args),
        setup=tuple(spec.setup), env=tuple(spec.env), launcher=spec.launcher, nodes=spec.nodes,
        layout_origin=spec.layout_origin, grace=spec.grace, exclusive=spec.exclusive,
        collective_timeout=spec.collective_timeout, rdzv_timeout=spec.rdzv_timeout,
        prepared_data=spec.prepared_data, in_container=bool(spec.container_image),
        rank_hooks_on=spec.rank_hooks_on)
