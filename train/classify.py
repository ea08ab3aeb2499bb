"""Sequence classification with transformers.Trainer (the seed: BERT on IMDB), any world size.

    python -m train.classify --model_name_or_path OUT/bert \\
        --train_file OUT/data/labelled_train.jsonl --eval_file OUT/data/labelled_eval.jsonl \\
        --output_dir RUN --max_steps 20 --learning_rate 1e-3

Options: the dataclass below plus every TrainingArguments field. Data comes from local
files (--train_file/--eval_file) or a hub/local data set (--dataset_name with splits).
The loss is averaged per example, not per token across devices, so it does not grow with
the world size (average_tokens_across_devices=False).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from train import cli, data, distenv, hub, program

RENAMED = {
    **cli.RENAMED_ARGS,
    "max_seq_length": "use --max_length",
    "dataset_text_field": cli.TEXT_FIELD_MOVED,
}


@dataclass
class ClassifyArguments:
    model_name_or_path: str | None = field(default=None, metadata={"help": "Local model dir or hub id."})
    train_file: str | None = field(default=None, metadata={"help": ".jsonl/.json/.parquet/.arrow/.csv"})
    eval_file: str | None = field(default=None, metadata={"help": "Evaluation file (accuracy reported)."})
    dataset_name: str | None = field(default=None, metadata={"help": "Hub name or local dir, instead of files."})
    dataset_config: str | None = None
    train_split: str = "train"
    eval_split: str = "test"
    text_column: str = "text"
    label_column: str = "label"
    max_length: int = field(default=256, metadata={"help": "Truncate inputs to this many tokens."})
    num_labels: int | None = field(default=None, metadata={"help": "Default: from the model config."})
    max_train_samples: int | None = None
    max_eval_samples: int | None = None


def load_split(cargs: ClassifyArguments, which: str):
    path = cargs.train_file if which == "train" else cargs.eval_file
    if path:
        return data.load_data(path), path
    if cargs.dataset_name:
        split = cargs.train_split if which == "train" else cargs.eval_split
        return data.load_data(cargs.dataset_name, split, cargs.dataset_config), cargs.dataset_name
    return None, None


def prepare(ds, name: str, cargs: ClassifyArguments, tokenizer, limit: int | None):
    data.require_columns(ds, name, [cargs.text_column, cargs.label_column])
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))

    def tokenize(batch):
        enc = tokenizer(batch[cargs.text_column], truncation=True, max_length=cargs.max_length)
        enc["labels"] = batch[cargs.label_column]
        return enc

    # Dynamic padding in the collator, not padding="max_length" here: no wasted compute.
    return ds.map(tokenize, batched=True, remove_columns=ds.column_names, desc=f"tokenize {name}")


def accuracy(eval_pred) -> dict[str, float]:
    import numpy as np

    logits, labels = eval_pred
    logits = logits[0] if isinstance(logits, tuple) else logits
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


def _parse(argv: list[str], denv: distenv.DistEnv):
    """(cargs, targs) as transformers' own parser reads them, the old names refused first."""
    cli.reject_old_args(argv, RENAMED)
    from train import hf  # imports transformers: after the cheap checks

    parser = arg_parser()
    parser.set_defaults(**hf.capability_defaults(denv))
    return hf.parse_or_usage_error(parser, lambda: parser.parse_args_into_dataclasses(args=argv))


# Beyond what the parser requires: (options of which one is given, the refusal). check_args, and a
# plain render's parse from the option list (train.args_check writes these into it).
NEEDED = ((("--model_name_or_path",), "--model_name_or_path is required"),
          (("--train_file", "--dataset_name"), "give --train_file (and --eval_file) or --dataset_name"))


def arg_parser():
    """transformers' own parser of this entry point's command line (its option list: train.args_check)."""
    from transformers import HfArgumentParser, TrainingArguments

    return HfArgumentParser((ClassifyArguments, TrainingArguments))


def check_args(argv: list[str]) -> None:
    """The command line as a job would read it, before the queue wait (train.args_check): it parses,
    and names a model and data. Paths are the job's to check: they may be the nodes' own."""
    cargs, _ = _parse(argv, distenv.setup({}))
    cli.check_needed(NEEDED, {"--model_name_or_path": cargs.model_name_or_path, "--train_file": cargs.train_file,
                              "--dataset_name": cargs.dataset_name})


def _main(argv: list[str]) -> dict | None:
    denv = distenv.setup()
    cargs, targs = _parse(argv, denv)
    from train import hf

    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer

    hf.one_precision(targs)
    # Loss per example, not per token: otherwise the reported loss is world size times too big.
    targs.average_tokens_across_devices = False
    hf.count_tokens_by_default(targs, argv)

    hub.check_model_path(cargs.model_name_or_path)
    if not (cargs.train_file or cargs.dataset_name):
        raise cli.UsageError("give --train_file (and --eval_file) or --dataset_name")
    for flag, value in (("--train_file", cargs.train_file), ("--eval_file", cargs.eval_file),
                        ("--dataset_name", cargs.dataset_name)):
        if value:
            data.check_data_path(value, flag)
    hf.touch_distributed(targs)

    tokenizer = AutoTokenizer.from_pretrained(cargs.model_name_or_path)
    t0 = time.perf_counter()
    with targs.main_process_first(local=False, desc="prepare data"):
        train_raw, train_name = load_split(cargs, "train")
        train_ds = prepare(train_raw, train_name, cargs, tokenizer, cargs.max_train_samples)
        eval_raw, eval_name = load_split(cargs, "eval") if (cargs.eval_file or cargs.dataset_name) else (None, None)
        eval_ds = (prepare(eval_raw, eval_name, cargs, tokenizer, cargs.max_eval_samples)
                   if eval_raw is not None else None)
    data_prep_seconds = time.perf_counter() - t0

    extra = {} if cargs.num_labels is None else {"num_labels": cargs.num_labels}
    model = AutoModelForSequenceClassification.from_pretrained(cargs.model_name_or_path, **extra)
    trainer = hf.sharded_on_cpus(Trainer)(
        model=model,
        args=targs,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=accuracy,
    )

    def evaluate(stopped: bool) -> dict:
        # Skip the evaluation when stopping: the job is about to be killed.
        if eval_ds is None or stopped:
            return {"eval_accuracy": None}
        metrics = trainer.evaluate()
        return {"eval_accuracy": metrics.get("eval_accuracy"), "eval_loss": metrics.get("eval_loss")}

    return hf.train_and_finish(trainer, denv, extra_after=evaluate, data_prep_seconds=data_prep_seconds)


def main(argv: list[str] | None = None) -> dict | None:
    """Run classification training; returns the metrics dict (also in output_dir/metrics.json)."""
    return program.run_main(_main, argv)


if __name__ == "__main__":
    program.exit_after(main)
