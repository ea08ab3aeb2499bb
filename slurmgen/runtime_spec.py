"""The contract between a rendered script and the job runtime on the nodes: one record (RuntimeSpec)
of everything the runtime needs, which the script carries as one JSON value, and the format both
sides must speak. A runtime of another format refuses the record in one line, before any step
starts; the script refuses a runtime that cannot say its format (slurmgen/job/runtime.py)."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from typing import Optional

from slurmgen import __version__
from slurmgen.frozen_records import frozen

# 1: slurmgen 0.1.0, whose scripts set some 16 shell variables and passed the runtime flags.
FORMAT = 2
# Where the script puts the record for the runtime (exported: the runtime's Python reads it).
SPEC_ENV = "SLURMGEN_RUNTIME_SPEC"


class FormatError(ValueError):
    """A record of another format, or none: one line that names both sides."""


@frozen
class Component:
    """One het component as the job runtime sees it."""

    name: str  # as the job log names it: "component 0 (2 node(s) x 1 GPU)"
    nodes: int
    gpus: int  # per node
    launch: str  # its launch function in the script
    gpu_type: str = ""  # --gpu-type's, "" for any


@frozen
class StragglerRule:
    """When a rank is slow, and what is done about it."""

    ratio: float  # a rank whose compute time per step is this many times the median's is slow
    window: int  # steps its figure is the mean of
    action: str = "warn"  # or "exclude": requeued (or a spare taken) without its node


@frozen
class Preflight:
    """What every node must be able to run before training starts."""

    kind: str  # what every node must be able to run: "module", "script" or "exec"
    target: str
    model: str = ""  # a local model path every node must see ("": none)
    slurmgen: bool = False  # the ranks import slurmgen's own (train.* entry points, the rank hooks): the job
    # runtime's version, on every node and in the image


@frozen
class RuntimeSpec:
    """What the job runtime inside the job needs to know about the job."""

    world_size: int
    components: tuple[Component, ...]
    spare_nodes: int = 0  # idle nodes, the last het group: a failed run restarts inside the allocation
    python: str = "python3"  # on the nodes; it runs every step
    logs: str = "logs"  # the log directory: the job's folder is LOGS/.slurmgen-JOBID
    max_restarts: int = 3  # time-limit requeues
    max_failures: int = 2  # retries after a crash, a hang or a lost node
    hang_timeout: float = 0  # 0: no hang watch
    stop_wait: float = 170  # ranks' time to checkpoint after the warning
    stop_grace: float = 0  # a script that takes no stop file gets this long, then TERM (0: never)
    preflight: Optional[Preflight] = None  # None: no preflight
    net_check: Optional[tuple[float, float]] = None  # (ratio to the median, floor GB/s); None: no network check
    stragglers: Optional[StragglerRule] = None  # None: no straggler watch
    master_port: Optional[int] = None  # --master-port; else from the job id, in port_range
    port_per_run: bool = False  # a sweep: its run i takes master_port + i
    port_range: tuple[int, int] = (20000, 29999)
    master_addr_ip: bool = False  # MASTER_ADDR as rank 0's IPv4 address, not its host name
    master_iface: str = ""  # whose address that is ("": the host name's, or the prefixes' match)
    iface_prefixes: tuple[str, ...] = ()  # --nccl-socket-ifname prefixes: each node takes its first match
    version: str = __version__  # of the slurmgen that wrote the record
    format: int = FORMAT

    @property
    def layout(self) -> list[tuple[int, int]]:  # (GPUs per node, nodes) per component
        return [(c.gpus, c.nodes) for c in self.components]

    @property
    def groups(self) -> list[tuple[int, int]]:
        """(nodes, GPUs per node) of each het group: the components', then the spares' (as wide as the
        widest component)."""
        spares = [(self.spare_nodes, max(c.gpus for c in self.components))] if self.spare_nodes else []
        return [(c.nodes, c.gpus) for c in self.components] + spares

    def to_json(self) -> str:
        """One key a line (and a component a line): the record as a reviewer reads it in the script."""
        def value(v) -> str:
            if isinstance(v, tuple) and len(v) > 1 and all(map(is_dataclass, v)):
                return "[" + ",\n   ".join(json.dumps(_plain(item)) for item in v) + "]"
            return json.dumps(_plain(v))
        return "{" + ",\n ".join(f"{json.dumps(f.name)}: {value(getattr(self, f.name))}" for f in fields(self)) + "}"

    @classmethod
    def from_json(cls, text: str) -> "RuntimeSpec":
        """The record the script carries; FormatError (one line) for any other format."""
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise FormatError(f"slurmgen: the job's runtime spec is not the JSON record slurmgen {__version__}"
                              f" (runtime format {FORMAT}) reads: {text[:60]!r}")
        found, writer = data.get("format"), data.get("version", "unknown")
        if found != FORMAT:
            raise FormatError(f"slurmgen: this script was rendered by slurmgen {writer} (runtime format {found}); the"
                              f" slurmgen on this node, {__version__}, runs runtime format {FORMAT}: re-render the"
                              f" script with slurmgen {__version__}, or install slurmgen {writer} here")
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["components"] = tuple(Component(**c) for c in data["components"])
        for name, kind in (("preflight", Preflight), ("stragglers", StragglerRule)):
            data[name] = kind(**data[name]) if data.get(name) else None
        for name in ("net_check", "port_range", "iface_prefixes"):
            data[name] = tuple(data[name]) if data.get(name) is not None else None
        data["iface_prefixes"] = data["iface_prefixes"] or ()
        return cls(**data)


def _plain(value):
    """dataclasses.asdict without its deep copy of every value (a quarter of a render's templating,
    issue 43): the record holds tuples, text and numbers only."""
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value


def older_script_line() -> str:
    """What the runtime says to a script of format 1, which carries no record."""
    return (f"slurmgen: this script was rendered by slurmgen 0.1.0 (runtime format 1, no {SPEC_ENV}); the slurmgen on"
            f" this node, {__version__}, runs runtime format {FORMAT}: re-render the script with slurmgen"
            f" {__version__}, or install slurmgen 0.1.0 here")
