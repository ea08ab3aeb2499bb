"""`--gpus auto` from the command line: its options as a request to auto_layout, the layout chosen
from the GPUs free now, and the others it considered."""

from __future__ import annotations

import dataclasses
import sys

from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import SpecError


def refuse_auto_only(params: dict) -> None:
    given = next((o for o in ("world_size", "max_gpus", "min_gpus") if params.get(o) is not None), None)
    if given:
        raise SpecError(f"--{given.replace('_', '-')} {params[given]}: only with --gpus auto"
                        f" (--gpus {params['gpus']!r} fixes the layout)")


def _auto_request(params: dict):
    """--gpus auto's target and limits as an auto_layout.Request (partition still None when
    not given: the default one is asked for with the nodes)."""
    import hostlist

    from slurmgen.site import auto_layout

    world, most, least = params.get("world_size"), params.get("max_gpus"), params.get("min_gpus")
    if params.get("gpu_type") is not None:
        raise SpecError(f"--gpu-type {params['gpu_type']!r} with --gpus auto: auto picks among every GPU of the"
                        " partition; give the layout (--gpus 1,1,2,2), or narrow the nodes with --constraint")
    if "," in (params.get("partition") or ""):
        raise SpecError(f"--partition {params['partition']!r} with --gpus auto: auto picks the nodes in one partition;"
                        " give one, or the layout (--gpus 1,1,2,2) with a partition per node")
    if (world is None) == (most is None):
        raise SpecError("--gpus auto: give --world-size W (exactly W GPUs) or --max-gpus M"
                        " (as many as are free, up to M), not both")
    for option, value in (("--world-size", world), ("--max-gpus", most), ("--min-gpus", least),
                          ("--nodes", params.get("nodes"))):
        if value is not None and value < 1:
            raise SpecError(f"{option} {value}: must be a positive integer")
    if least is not None and most is None:
        raise SpecError(f"--min-gpus {least}: goes with --max-gpus")
    if params.get("nodelist"):
        raise SpecError("--nodelist: --gpus auto chooses the nodes itself; use --exclude to keep it off some")
    mem_per_gpu = params.get("mem_per_gpu")
    return auto_layout.Request(
        world_size=world, max_gpus=most, min_gpus=least or 1, nodes=params.get("nodes"),
        partition=params.get("partition"), constraint=params.get("constraint"),
        exclude=tuple(hostlist.expand_hostlist(params["exclude"])) if params.get("exclude") else (),
        cpus_per_gpu=params.get("cpus_per_gpu") or 4,
        mem_per_gpu_mb=auto_layout.size_mb(mem_per_gpu) if mem_per_gpu else 0)


def _cluster_now(request):
    """The nodes as they are now, and the request with the default partition filled in."""
    from slurmgen.site import auto_layout
    from slurmgen.site.cluster import ClusterError

    try:
        nodes = auto_layout.query_nodes()
        if request.partition is None:
            request = dataclasses.replace(request, partition=auto_layout.default_partition())
    except ClusterError as err:
        raise SpecError(f"--gpus auto: cannot ask the cluster: {err}") from None
    return nodes, request


def auto_layout_choice(params: dict) -> tuple[tuple[int, ...], str, str]:
    """--gpus auto: (GPUs per node, --nodelist, a line for the script's header), chosen from
    the GPUs free now; the choice and the nodes skipped go to stderr."""
    import hostlist

    from slurmgen.site import auto_layout

    nodes, request = _cluster_now(_auto_request(params))
    try:
        choice = auto_layout.choose(nodes, request)
    except auto_layout.NoFit as err:
        raise SpecError(str(err)) from None
    print(auto_layout.explain(choice), file=sys.stderr)
    pinned = hostlist.collect_hostlist(list(choice.nodes))
    origin = (f"Chosen from the GPUs free at render time: --gpus {','.join(map(str, choice.counts))}"
              f" --nodelist {','.join(choice.nodes)}")
    return choice.counts, ",".join(choice.nodes), origin if pinned else ""


def auto_alternatives(params: dict, spec: JobSpec) -> list[tuple[str, JobSpec]]:
    """With --gpus auto: the other layouts it considered, as specs to estimate (label, spec)."""
    from slurmgen.site import auto_layout

    if params["gpus"].strip().lower() != "auto":
        return []
    nodes, request = _cluster_now(_auto_request(params))
    chosen = auto_layout.Choice(spec.gpus, spec.nodelist, ())
    return [(f"--gpus {','.join(map(str, alt.counts))} --nodelist {','.join(alt.nodes)} ({why})",
             dataclasses.replace(spec, gpus=alt.counts, nodelist=alt.nodes, layout_origin=""))
            for why, alt in auto_layout.alternatives(nodes, request, chosen)]
