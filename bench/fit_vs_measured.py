"""`slurmgen fit`'s figures against what training really holds, component by component.

Runs one training step's worth of train.sft (two steps; the second is measured, see
bench/fit_measure.py) for every strategy that runs on a CPU: one rank without DDP, DDP, LoRA,
FSDP full shard with and without mixed precision, FSDP + LoRA, FSDP with CPU offload, gradient
checkpointing on and off, SDPA and eager attention, two sequence lengths; on a tiny Llama (hidden
64), and a small one (112 M parameters, hidden 1024, grouped-query attention). Beside each
measured figure it prints fit's own for the same arguments (slurmgen.site.fit, figured for a CPU
run: torch's dropout keeps a mask in the activations' dtype, not a bool, and TRL's loss head
runs torch's fallback of its Triton kernel), and the ratio.

    python bench/fit_vs_measured.py [--models tiny,small] [--quick] [--work DIR] [--only TEXT]

--quick runs the subset the test suite asserts (tests/test_fit_measured.py, on a 13 M "mini"
Llama: --models mini --quick). Exit status 1 when a component is more than 15% off.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TOLERANCE = 0.15
MIB = 1024 ** 2
BF16 = ["--dtype", "bfloat16", "--bf16", "true"]


@dataclass(frozen=True)
class Case:
    name: str
    ranks: int
    args: tuple
    long: bool = False  # the longer of the model's two sequence lengths
    quick: bool = False  # in the suite's subset


CASES = (
    Case("1 rank, fp32", 1, (), quick=True),
    Case("1 rank, fp32", 1, (), long=True),
    Case("1 rank, fp32, checkpointing", 1, ("--gradient_checkpointing", "true"), quick=True),
    Case("1 rank, fp32, checkpointing", 1, ("--gradient_checkpointing", "true"), long=True),
    Case("1 rank, bf16 weights", 1, ("--dtype", "bfloat16")),
    Case("1 rank, fp32, eager attention", 1, ("--attn_implementation", "eager"), long=True, quick=True),
    Case("DDP, fp32", 2, (), quick=True),
    Case("DDP + LoRA", 2, ("--use_peft",)),
    Case("1 rank, LoRA all-linear, bf16", 1, ("--use_peft", "--lora_target_modules", "all-linear",
                                             "--dtype", "bfloat16"), quick=True),
    Case("FSDP, bf16 mixed precision", 2, ("--fsdp", *BF16), quick=True),
    Case("FSDP, no mixed precision", 2, ("--fsdp", "--dtype", "bfloat16", "--bf16", "false")),
    Case("FSDP, bf16 mixed, checkpointing", 2, ("--fsdp", *BF16, "--gradient_checkpointing", "true"), long=True),
    Case("FSDP + LoRA", 2, ("--fsdp", "--use_peft", *BF16), quick=True),
    Case("FSDP + CPU offload", 2, ("--fsdp", "--fsdp_config", '{"cpu_offload": true}', *BF16), quick=True),
)
MODELS = {"tiny": {"seq": (128, 256), "batch": 2}, "mini": {"seq": (256, 512), "batch": 2},
          "small": {"seq": (256, 512), "batch": 2}}
SHAPES = {  # Llamas built from the tiny one (its tokenizer, 659 tokens), untied, grouped-query attention
    "mini": {"hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8,
             "num_key_value_heads": 2, "head_dim": 64, "tie_word_embeddings": False},
    "small": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 10, "num_attention_heads": 16,
              "num_key_value_heads": 4, "head_dim": 64, "tie_word_embeddings": False},
}
COMPONENTS = ("weights", "gradients", "optimizer", "buckets", "transient", "peak")


def build(work: Path, models: list[str]) -> dict[str, Path]:
    """The tiny assets, the larger Llamas asked for (SHAPES) with its tokenizer, and a data set of
    long texts (each sample fills --max_length, so every step has the same tokens)."""
    from train import tiny as tiny_mod

    tiny = tiny_mod.build(work / "tiny", seed=0) if not (work / "tiny" / "lm").is_dir() else work / "tiny"
    paths = {"tiny": tiny / "lm", "data": work / "long.jsonl"}
    if not paths["data"].exists():
        rows = [json.loads(line)["text"] for line in (tiny / "data" / "text.jsonl").read_text().splitlines()]
        texts = [" ".join(rows[i * 60:(i + 1) * 60]) for i in range(len(rows) // 60)]
        paths["data"].write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    for name in models:
        if name in SHAPES:
            paths[name] = work / name
            if not (paths[name] / "config.json").exists():
                from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

                config = AutoConfig.from_pretrained(tiny / "lm")
                config.update(SHAPES[name])
                AutoModelForCausalLM.from_config(config).save_pretrained(paths[name])
                AutoTokenizer.from_pretrained(tiny / "lm").save_pretrained(paths[name])
    return paths


def sft_args(model: Path, data: Path, out: Path, seq: int, batch: int, case: Case) -> list[str]:
    return ["--model_name_or_path", str(model), "--dataset_name", str(data), "--output_dir", str(out / "run"),
            "--max_steps", "2", "--save_strategy", "no", "--per_device_train_batch_size", str(batch),
            "--max_length", str(seq), "--report_to", "none", "--disable_tqdm", "true", "--logging_steps", "1",
            *case.args]


class Measurer:
    """bench/fit_measure.py --serve: one process imports the training stack once and forks each
    run's ranks (bench/fit_serve.py); a run is its figures, the largest over the ranks."""

    def __init__(self, work: Path):
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_DATASETS_CACHE=str(work / "runs" / "cache"),
                   PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false", MALLOC_MMAP_THRESHOLD_="131072")
        self.server = subprocess.Popen([sys.executable, str(REPO / "bench" / "fit_measure.py"), "--serve"], cwd=REPO,
                                       env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def measure(self, case: Case, args: list[str], out: Path) -> dict:
        self.server.stdin.write(json.dumps({"out": str(out), "ranks": case.ranks, "args": args}) + "\n")
        self.server.stdin.flush()
        answer = self.server.stdout.readline().split()
        ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
        if answer[:1] != ["done"] or any(s != "0" for s in answer[1:]) or len(ranks) != case.ranks:
            logs = "".join(p.read_text()[-3000:] for p in sorted(out.glob("rank*.log")))
            raise RuntimeError(f"{case.name}: the run failed (exit statuses {answer[1:] or 'none'}):\n{logs}")
        merged = {key: max(r[key] for r in ranks) for key in ranks[0] if key != "rank"}
        merged["buckets"] = merged.pop("resident")
        return merged

    def close(self) -> None:
        self.server.stdin.close()
        self.server.wait()


def predicted(model: Path, args: list[str], ranks: int) -> dict:
    """fit's figures for the same arguments, for a CPU run, per rank in bytes."""
    from train import sizing
    from slurmgen.site import fit

    settings = sizing.parse_settings(args)
    # train.sft's defaults on a CPU (train.hf.capability_defaults): no bf16, no checkpointing unless asked
    settings["bf16"] = settings["bf16"] if "--bf16" in args else False
    settings["gradient_checkpointing"] = "--gradient_checkpointing" in args and settings["gradient_checkpointing"]
    config, meta = sizing.meta_model(str(model))
    counts = fit.Model.from_json(sizing.shape(meta, config))
    training = fit.with_cpu(fit.Training.from_settings(settings))
    est = fit.estimate(counts, training, training.chosen, (ranks,))
    gib = fit.GIB
    parts = {k: v * gib for k, v in est.parts.items()}
    return {"weights": parts["weights"], "gradients": parts["gradients"], "optimizer": parts["optimizer"],
            "buckets": parts["buckets"], "transient": parts["gathered"] + parts["activations"],
            "peak": parts["weights"] + parts["optimizer"] + parts["buckets"]
            + max(parts["gradients"] + parts["fsdp_buffers"], parts["gathered"] + parts["activations"])}


def compare(measured: dict, fit: dict) -> list[tuple]:
    """(component, measured, fit, ratio) for every component that has a figure."""
    rows = []
    for key in COMPONENTS:
        # "resident" holds 12 KB of other tensors too (rotary tables, the batch): buckets smaller
        # than a MiB are below what it can tell apart
        if key == "buckets" and fit[key] < MIB:
            continue
        ratio = fit[key] / measured[key] if measured[key] else float("inf")
        rows.append((key, measured[key], fit[key], ratio))
    return rows


def run(models: list[str], quick: bool, work: Path, say=print, only: str = "") -> list[dict]:
    paths = build(work, models)
    measurer = Measurer(work)
    try:
        return [measured_case(name, case, paths, work, measurer, say) for name in models for case in CASES
                if (case.quick or not quick) and only in case.name]
    finally:
        measurer.close()


def measured_case(name: str, case: Case, paths: dict, work: Path, measurer: Measurer, say) -> dict:
    spec = MODELS[name]
    seq = spec["seq"][1 if case.long else 0]
    label = f"{name} {case.name}, {seq} tokens x {spec['batch']}"
    out = work / "runs" / label.replace(" ", "_").replace(",", "").replace("+", "plus")
    args = sft_args(paths[name], paths["data"], out, seq, spec["batch"], case)
    measured = measurer.measure(case, args, out)
    rows = compare(measured, predicted(paths[name], args, case.ranks))
    say(f"\n{label} ({case.ranks} rank{'s' if case.ranks > 1 else ''}): {' '.join(case.args)}")
    for key, m, f, ratio in rows:
        mark = "" if abs(ratio - 1) <= TOLERANCE else "  <-- off by more than 15%"
        say(f"  {key:<10} measured {m / MIB:10.2f} MiB   fit {f / MIB:10.2f} MiB   fit/measured {ratio:5.2f}{mark}")
    say(f"  {'rss peak':<10} measured {measured['rss_peak'] / MIB:10.2f} MiB above the floor (glibc and Python too)")
    return {"case": label, "rows": rows, "rss_peak": measured["rss_peak"]}


def markdown(results: list[dict]) -> str:
    """The docs' table: per run, each component measured (MiB) and fit's figure over it."""
    lines = ["| run | weights | gradients | optimizer | DDP buckets | in passing | peak |", "|---|---|---|---|---|---|---|"]
    for r in results:
        cells = {key: f"{m / MIB:.1f} MiB, fit x{ratio:.2f}" for key, m, _, ratio in r["rows"]}
        lines.append(f"| {r['case']} | " + " | ".join(cells.get(k, "-") for k in COMPONENTS) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="tiny,small", help="tiny, small, or both")
    parser.add_argument("--quick", action="store_true", help="the subset the test suite asserts")
    parser.add_argument("--work", help="a directory to keep the models and runs in (a temporary one otherwise)")
    parser.add_argument("--only", default="", help="only the cases whose name holds this text")
    parser.add_argument("--markdown", action="store_true", help="end with the table the docs show")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    if args.work:
        results = run(models, args.quick, Path(args.work), only=args.only)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            results = run(models, args.quick, Path(tmp), only=args.only)
    if args.markdown:
        print("\n" + markdown(results))
    off = [(r["case"], key) for r in results for key, _, _, ratio in r["rows"] if abs(ratio - 1) > TOLERANCE]
    print(f"\n{sum(len(r['rows']) for r in results)} figures, {len(off)} off by more than 15%"
          + "".join(f"\n  {case}: {key}" for case, key in off))
    sys.exit(1 if off else 0)


if __name__ == "__main__":
    main()
