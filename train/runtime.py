"""Pieces shared by the three entry points: errors, data, devices, collectives, outputs.

torch is imported lazily so argument errors are reported before the heavy imports.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, NoReturn

from train import checkpoint
from train.distenv import DistEnv, DistEnvError

LOG_PREFIX = "slurmgen-train:"
DEFAULT_COLLECTIVE_TIMEOUT = 600
STOP_FILE_ENV = "SLURMGEN_STOP_FILE"
# Rank 0 writes "stopped STEP" or "finished STEP" here at the end, so the batch script does not
# requeue a run whose last step came before the warning could stop it.
OUTCOME_FILE_ENV = "SLURMGEN_OUTCOME_FILE"
DIGEST_DIR_ENV = "SLURMGEN_TEST_PARAM_DIGEST_DIR"
# Test hook: seconds every rank pauses at each step boundary in a job's first run (before any
# requeue), so an end-to-end time-limit test's first run cannot finish before the warning however
# idle the machine, while the resumed run is not slowed.
STEP_SLEEP_ENV = "SLURMGEN_TEST_STEP_SLEEP"


# ---------------------------------------------------------------------------- errors
class UsageError(Exception):
    """A mistake in the command line or inputs: reported as one line, exit status 2."""


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Turn UsageError (and argument-parser ValueErrors, an impossible launch environment) into
    `error: ...` and exit 2."""
    try:
        yield
    except (UsageError, DistEnvError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def one_line_parser_errors(parser) -> None:
    """argparse prints its whole usage text on a bad argument; report the one line instead."""

    def error(message: str):
        raise UsageError(message)

    parser.error = error


# Arguments from older transformers/TRL releases (as in the seed scripts) mapped to what
# replaced them. Checked before parsing so users get the new name, not a parser trace.
RENAMED_ARGS = {
    "tokenizer": "the tokenizer is loaded from --model_name_or_path and given to the trainer "
    "as processing_class (TRL renamed tokenizer= to processing_class=)",
    "max_seq_length": "use --max_length (TRL renamed max_seq_length to max_length)",
    "no_cuda": "use --use_cpu (transformers renamed no_cuda to use_cpu)",
    "evaluation_strategy": "use --eval_strategy (transformers renamed evaluation_strategy to eval_strategy)",
}
TEXT_FIELD_MOVED = "use --text_column (dataset_text_field is an SFTConfig option of train.sft)"


def reject_old_args(argv: Iterable[str], renamed: Mapping[str, str], where: str = "") -> None:
    for token in argv:
        if not token.startswith("--"):
            continue
        name = token[2:].split("=", 1)[0].replace("-", "_")
        if name in renamed:
            raise UsageError(f"--{name} is no longer an option{where}: {renamed[name]}")


def reject_old_config_keys(argv: list[str], renamed: Mapping[str, str]) -> None:
    """Same check for the keys of a TrlParser ``--config recipe.yaml``."""
    if "--config" not in argv:
        return
    idx = argv.index("--config")
    if idx + 1 >= len(argv):
        raise UsageError("--config needs a file name")
    path = argv[idx + 1]
    if not os.path.isfile(path):
        raise UsageError(f"config file not found: {path}")
    import yaml

    with open(path) as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold a YAML mapping")
    reject_old_args([f"--{k}" for k in data], renamed, where=f" (in {path})")


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def _hub_cached(repo_id: str, filename: str, repo_type: str = "model") -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, filename, repo_type=repo_type)
    except Exception:
        return False
    return isinstance(found, str)


def check_model_path(name: str | None, flag: str = "--model_name_or_path") -> None:
    """A local model dir must exist; a hub id must be reachable or cached when offline."""
    if not name:
        raise UsageError(f"{flag} is required")
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"model path has no config.json: {name}")
        return
    if not _HUB_ID.match(name):
        raise UsageError(f"model path not found: {name}")
    if _offline() and not _hub_cached(name, "config.json"):
        raise UsageError(f"model path not found: {name} (no such directory; HF_HUB_OFFLINE is set)")


# ---------------------------------------------------------------------------- data
_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}


def check_data_path(name: str | None, flag: str) -> None:
    if not name:
        raise UsageError(f"{flag} is required")
    path = Path(name).expanduser()
    if path.is_file():
        if path.suffix not in _BUILDERS:
            raise UsageError(
                f"unsupported data file type {path.suffix!r}: {name} (use one of {', '.join(_BUILDERS)})"
            )
        return
    if path.is_dir():
        return
    # Not local: a hub name (load_data reports a hub miss, cached copies work offline).
    if not _HUB_ID.match(name) or name.startswith(("/", ".", "~")):
        raise UsageError(f"dataset not found: {name}")


def load_data(name: str, split: str = "train", config: str | None = None, streaming: bool = False):
    """A data set from a local file, a local directory, or the hub.

    ``load_dataset("x.jsonl")`` does not work: local files need their builder
    ("json", "parquet", ...) with ``data_files``.
    """
    import datasets

    path = Path(name).expanduser()
    if path.is_file():
        return datasets.load_dataset(
            _BUILDERS[path.suffix], data_files=str(path), split="train", streaming=streaming
        )
    if path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "state.json").is_file()):
        loaded = datasets.load_from_disk(str(path))
        return loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
    if path.is_dir():
        return datasets.load_dataset(str(path), config, split=split, streaming=streaming)
    try:
        return datasets.load_dataset(name, config, split=split, streaming=streaming)
    except (FileNotFoundError, ConnectionError, ValueError) as exc:
        # datasets' own errors are multi-line; the hub being unreachable is the usual cause.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"dataset not found: {name} ({first})") from None


def column_names(ds) -> list[str]:
    names = getattr(ds, "column_names", None)
    if names is None:  # streaming data sets may not know their columns before reading
        names = list(next(iter(ds)).keys())
    return list(names)


def require_columns(ds, name: str, needed: list[str]) -> None:
    present = column_names(ds)
    missing = [c for c in needed if c not in present]
    if missing:
        raise UsageError(
            f"data set {name} has no column {missing[0]!r} (columns present: {', '.join(present) or 'none'})"
        )


# ---------------------------------------------------------------------------- devices
def collective_timeout() -> int:
    raw = os.environ.get("SLURMGEN_COLLECTIVE_TIMEOUT")
    if not raw:
        return DEFAULT_COLLECTIVE_TIMEOUT
    try:
        value = int(float(raw))
    except ValueError:
        raise UsageError(f"SLURMGEN_COLLECTIVE_TIMEOUT={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise UsageError(f"SLURMGEN_COLLECTIVE_TIMEOUT must be positive, got {raw}")
    return value


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def bf16_supported(denv: DistEnv | None = None) -> bool:
    """bf16 in hardware on this rank's own GPU (Ampere and newer).

    torch's default answer counts emulation, so V100/T4 would say yes and train slowly. The
    rank's device is selected first, so asking creates no CUDA context on GPU 0 for every rank.
    """
    import torch

    if not torch.cuda.is_available():
        return False
    if denv is not None:
        torch.cuda.set_device(denv.device_index)
    return torch.cuda.is_bf16_supported(including_emulation=False)


def bitsandbytes_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("bitsandbytes") is not None


def device_for(denv: DistEnv):
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", denv.device_index)
    return torch.device("cpu")


def init_process_group(denv: DistEnv, device) -> None:
    """nccl on CUDA, gloo on CPU (nccl on CPU fails); env:// from the exported variables."""
    import datetime

    import torch
    import torch.distributed as dist

    if not denv.distributed or dist.is_initialized():
        return
    kwargs: dict[str, Any] = {}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(
        backend="nccl" if device.type == "cuda" else "gloo",
        init_method="env://",
        rank=denv.rank,
        world_size=denv.world_size,
        timeout=datetime.timedelta(seconds=collective_timeout()),
        **kwargs,
    )


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _collective_device():
    import torch

    dist = _dist()
    if dist is not None and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier() -> None:
    dist = _dist()
    if dist is not None:
        dist.barrier()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    dist = _dist()
    if dist is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


_TERMINATED = False


def stop_on_term() -> None:
    """SIGTERM asks for a stop too: it is what ranks get at preemption where the site does not
    send the job's own signal, and what torchrun passes on. The rank finishes its step and
    checkpoints like at the stop file, instead of dying mid-step. A rank stuck in a collective
    never gets there, and torchrun kills it 30 s later as before."""

    global _TERMINATED
    _TERMINATED = False

    def note(signum, frame):
        global _TERMINATED
        _TERMINATED = True

    try:
        signal.signal(signal.SIGTERM, note)
    except ValueError:  # not the main thread (e.g. called from a test's worker thread)
        pass


def stop_requested(is_main: bool) -> bool:
    """Whether the stop file exists (seen by rank 0) or any rank got SIGTERM: agreed by every
    rank, so all stop at the same step.

    One 1-element all_reduce per call: cheap enough for every step.
    """
    if os.environ.get(STEP_SLEEP_ENV) and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
        time.sleep(float(os.environ[STEP_SLEEP_ENV]))
    path = os.environ.get(STOP_FILE_ENV)
    seen = _TERMINATED or bool(is_main and path and os.path.exists(path))
    dist = _dist()
    if dist is None:
        return seen
    import torch

    flag = torch.tensor([1 if seen else 0], dtype=torch.int32, device=_collective_device())
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def rank_report(denv: DistEnv, data_prep_seconds: float | None) -> dict[str, Any]:
    """What every rank contributes to metrics.json, gathered in one collective."""
    import resource

    mine = {
        "host": socket.gethostname(),
        # ru_maxrss is in KiB on Linux.
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "gpu_mb": None,
        "prep": data_prep_seconds,
        "local_world_size": denv.local_world_size,
    }
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            mine["gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    dist = _dist()
    if dist is None:
        everyone = [mine]
    else:
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    preps = [r["prep"] for r in everyone if r["prep"] is not None]
    report = {
        "ranks_per_host": dict(sorted(Counter(r["host"] for r in everyone).items())),
        "local_world_sizes": [r["local_world_size"] for r in everyone],
        "peak_rss_mb_per_rank": [round(r["rss_mb"], 1) for r in everyone],
        # The job waits for its slowest rank.
        "data_prep_seconds": max(preps) if preps else None,
    }
    if any(r["gpu_mb"] is not None for r in everyone):
        report["peak_gpu_mb_per_rank"] = [r["gpu_mb"] and round(r["gpu_mb"], 1) for r in everyone]
    return report


def destroy_process_group() -> None:
    dist = _dist()
    if dist is not None:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- outputs
def say(denv: DistEnv, message: str) -> None:
    """One log line from rank 0 only."""
    if denv.is_main:
        print(f"{LOG_PREFIX} {message}", flush=True)


def decide_resume(output_dir: str, denv: DistEnv, fallback: str | None = None) -> tuple[int, str] | None:
    """Rank 0 sets aside incomplete checkpoints and picks the newest complete one; all agree.

    ``fallback`` (e.g. --resume_from_checkpoint) is used only while output_dir has no
    complete checkpoint of its own, so a requeued job continues from its latest progress
    rather than from the starting point it was given. Needs the process group when world > 1.
    """
    choice: Any = None
    if denv.is_main:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        for moved in checkpoint.set_aside_incomplete(output_dir):
            say(denv, f"incomplete checkpoint set aside: {moved}")
        found = checkpoint.latest_complete(output_dir)
        if found is not None:
            choice = (found[0], str(found[1]))
        elif fallback:
            choice = _fallback_checkpoint(fallback)
    choice = broadcast_object(choice)
    if isinstance(choice, str):  # rank 0 found the given checkpoint unusable
        raise UsageError(choice)
    if choice is None:
        say(denv, "fresh start")
    else:
        say(denv, f"resuming from {choice[1]} at step {choice[0]}")
    return choice


def _fallback_checkpoint(path: str) -> tuple[int, str] | str:
    state = Path(path) / "trainer_state.json"
    if not state.is_file():
        return f"checkpoint not found: {path} (no trainer_state.json)"
    return int(json.loads(state.read_text()).get("global_step", 0)), str(path)


class ProgressLog:
    """Rank 0 appends one JSON line per logged step to output_dir/progress.jsonl."""

    def __init__(self, output_dir: str, denv: DistEnv, max_steps: int, global_batch: int):
        self.path = Path(output_dir) / "progress.jsonl"
        self.enabled = denv.is_main
        self.max_steps = max_steps
        self.global_batch = global_batch
        self.first_loss: float | None = None
        self.last_loss: float | None = None
        self._last: tuple[int, float] | None = None

    def start(self, step: int) -> None:
        self._last = (step, time.time())

    def log(self, step: int, loss: float, **extra: Any) -> None:
        loss = float(loss)
        if self.first_loss is None:
            self.first_loss = loss
        self.last_loss = loss
        if not self.enabled:
            return
        now = time.time()
        line: dict[str, Any] = {"step": step, "max_steps": self.max_steps, "loss": loss}
        if self._last is not None and step > self._last[0] and now > self._last[1]:
            line["samples_per_second"] = (step - self._last[0]) * self.global_batch / (now - self._last[1])
        line.update(extra)
        line["time"] = now
        self._last = (step, now)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(line) + "\n")


def finish(
    output_dir: str,
    denv: DistEnv,
    *,
    global_step: int,
    start_step: int,
    resumed_from_step: int | None,
    progress: ProgressLog,
    train_loss: float | None,
    elapsed: float,
    global_batch: int,
    tokens: int | None,
    stopped_early: bool,
    model=None,
    extra: Mapping[str, Any] | None = None,
    data_prep_seconds: float | None = None,
) -> dict[str, Any]:
    """Collective end of a run: gather hosts, write metrics.json on rank 0, return metrics."""
    steps = max(global_step - start_step, 0)
    rate = (lambda n: n / elapsed if elapsed > 0 and steps else None)
    metrics: dict[str, Any] = {
        "world_size": denv.world_size,
        "global_step": global_step,
        "train_loss": train_loss,
        "first_loss": progress.first_loss,
        "last_loss": progress.last_loss,
        "samples_per_second": rate(steps * global_batch),
        "tokens_per_second": rate(tokens) if tokens is not None else None,
        "train_runtime": elapsed,
        "resumed_from_step": resumed_from_step,
        "stopped_early": stopped_early,
        **rank_report(denv, data_prep_seconds),
    }
    if extra:
        metrics.update(extra)
    if model is not None:
        write_param_digest(model, denv)
    if stopped_early:
        say(denv, f"stop requested, saved checkpoint at step {global_step}")
    if denv.is_main:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        checkpoint.write_json_atomic(Path(output_dir) / "metrics.json", metrics)
        report_outcome(stopped_early, global_step)
    return metrics


def report_outcome(stopped_early: bool, step: int) -> None:
    """Rank 0's last word to the batch script: how training ended (see OUTCOME_FILE_ENV)."""
    path = os.environ.get(OUTCOME_FILE_ENV)
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{'stopped' if stopped_early else 'finished'} {step}\n")
    os.replace(tmp, path)


def param_digest(model) -> str:
    """sha256 over every parameter's name and fp32 bytes, in a fixed order."""
    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            h.update(name.encode())
            h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def write_param_digest(model, denv: DistEnv) -> None:
    """Test hook: each rank writes its final parameter digest so a test can compare ranks."""
    out = os.environ.get(DIGEST_DIR_ENV)
    if not out:
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{denv.rank}.sha256").write_text(param_digest(model) + "\n")


def exit_after(main: Callable[[list[str] | None], Any]) -> NoReturn:
    """Run an entry point as a program, then leave without interpreter finalization.

    DDP and the HF Trainer keep the gloo process group alive past destroy_process_group(): its
    worker threads may still be releasing the tensors of the last collective when Python
    finalizes, and a thread that then needs the GIL is ended inside a C++ destructor:
    std::terminate, SIGABRT ("terminate called without an active exception") after a run that
    succeeded, and srun fails the job. Output is flushed first; usage errors (SystemExit) and
    exceptions leave the normal way.
    """
    main(sys.argv[1:])
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_main(body: Callable[[list[str]], dict | None], argv: list[str] | None) -> dict | None:
    """Common wrapper of every ``main(argv)``: one-line errors, argv default."""
    args = list(sys.argv[1:] if argv is None else argv)
    stop_on_term()
    with cli_errors():
        result = body(args)
    # Trainer leaves the process group open; torch threads torn down at interpreter exit
    # can then abort a process that has succeeded (and srun fails the job).
    destroy_process_group()
    linger_on_store_host()
    return result


def linger_on_store_host(seconds: float = 2.0) -> None:
    """Under torchrun's static rendezvous the node-rank-0 agent hosts the store that every agent's
    exit barrier waits on. If that agent leaves first, the others log "Error waiting on exit
    barrier" with a C++ trace after a good run. Its workers leaving a moment after everyone
    else's makes it arrive last and release the others before it closes the store."""
    if os.environ.get("GROUP_RANK") == "0" and int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1:
        time.sleep(seconds)
