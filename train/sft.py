"""Supervised fine-tuning with TRL's SFTTrainer, on any number of hosts and GPUs.

    python -m train.sft --model_name_or_path OUT/lm --dataset_name OUT/data/text.jsonl \\
        --output_dir RUN --max_steps 10 --save_steps 5 --per_device_train_batch_size 4 \\
        --learning_rate 1e-3 --logging_steps 1

Arguments are TRL's own (ScriptArguments, SFTConfig, ModelConfig; ``--config recipe.yaml``
works). ``--dataset_name`` is a hub name or a local .jsonl/.json/.parquet/.arrow file or
directory, with a ``text`` (or ``--dataset_text_field``) or ``messages`` column.
Launch it under torchrun, or as one Slurm task per GPU: train.distenv works out the rank.

Prepared data (tokenizing inside a multi-node job can time out its collectives):
  * SLURMGEN_PREPARE_ONLY=1 SLURMGEN_PREPARED_DATA=DIR: one CPU process prepares the data as
    SFTTrainer would for training, saves it to DIR/train (and DIR/eval), and exits;
  * SLURMGEN_PREPARED_DATA=DIR alone: train on DIR/train (DIR/eval) without tokenizing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from train import cli, contract, data, devices, distenv, hub, outputs, program

RENAMED = cli.RENAMED_ARGS
CONVERSATIONAL = ("messages", "conversations", "prompt")
PREPARED_ENV, PREPARE_ONLY_ENV = contract.PREPARED_DATA_ENV, contract.PREPARE_ONLY_ENV


def check_quantization(model_args) -> None:
    if not (model_args.load_in_4bit or model_args.load_in_8bit):
        return
    flag = "--load_in_4bit" if model_args.load_in_4bit else "--load_in_8bit"
    have_cuda, have_bnb = devices.cuda_available(), devices.bitsandbytes_available()
    if not (have_cuda and have_bnb):
        raise cli.UsageError(
            f"{flag} needs CUDA and bitsandbytes (CUDA: {'yes' if have_cuda else 'no'}, "
            f"bitsandbytes: {'yes' if have_bnb else 'no'}); drop it to train without quantization"
        )


def check_text_columns(ds, name: str, text_field: str) -> None:
    present = data.column_names(ds)
    if text_field in present or any(c in present for c in CONVERSATIONAL):
        return
    raise cli.UsageError(
        f"data set {name} has no column {text_field!r} or 'messages' "
        f"(columns present: {', '.join(present) or 'none'})"
    )


def prepared_data_dir() -> str | None:
    return os.environ.get(PREPARED_ENV) or None


def prepare_only() -> bool:
    if os.environ.get(PREPARE_ONLY_ENV, "").lower() not in ("1", "true", "yes"):
        return False
    if not prepared_data_dir():
        raise cli.UsageError(f"{PREPARE_ONLY_ENV}=1 needs {PREPARED_ENV}=DIR (where to save the prepared data)")
    return True


def data_parts(cfg) -> list[str]:
    return ["train", "eval"] if cfg.eval_strategy != "no" else ["train"]


def check_prepared(directory: str, parts: list[str]) -> None:
    # Checked before any model loading: a training job started before its prep job finished
    # (or after it failed) stops at once with a line that says so.
    for part in parts:
        if not (Path(directory).expanduser() / part).is_dir():
            raise cli.UsageError(
                f"{PREPARED_ENV}={directory} has no {part}/: the data prep job "
                f"({PREPARE_ONLY_ENV}=1) has not written it"
            )


def load_raw_data(script_args, cfg):
    """The train (and eval) data set as given, untokenized; None for eval when not evaluating."""
    def load(split):
        return data.load_data(script_args.dataset_name, split, script_args.dataset_config,
                              script_args.dataset_streaming)

    train_ds = load(script_args.dataset_train_split)
    eval_ds = load(script_args.dataset_test_split) if cfg.eval_strategy != "no" else None
    return train_ds, eval_ds


def load_prepared(directory: str, cfg):
    """The prepared train (and eval) sets, and SFTTrainer told not to prepare them again."""
    sets = [data.load_data(str(Path(directory).expanduser() / part)) for part in data_parts(cfg)]
    data.require_columns(sets[0], f"{directory}/train", ["input_ids"])
    cfg.dataset_kwargs = {**(cfg.dataset_kwargs or {}), "skip_prepare_dataset": True}
    return sets[0], (sets[1] if len(sets) > 1 else None)


def reads_elsewhere(cfg, denv) -> bool:
    """FSDP with cpu_ram_efficient_loading: rank 0 alone reads the weights, and accelerate sends
    every other rank its shard when it prepares the model (a 70B model is read once, not once per
    rank: 140 GB of host memory per rank otherwise)."""
    return bool(cfg.fsdp) and bool((cfg.fsdp_config or {}).get("cpu_ram_efficient_loading")) and denv.rank != 0


def saved_names(path: str) -> set[str]:
    """The tensor names of a local safetensors checkpoint, from its headers (no weights read)."""
    import json
    import os

    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as fh:
            return set(json.load(fh)["weight_map"])
    single = os.path.join(path, "model.safetensors")
    if not os.path.isfile(single):
        return set()
    from safetensors import safe_open

    with safe_open(single, "pt") as fh:
        return set(fh.keys())


def load_model(model_args, denv, empty: bool = False):
    """The model from its checkpoint, or with ``empty`` its parameters on the meta device (no
    weights read; buffers such as rotary frequencies, which are not saved, stay real)."""
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {"revision": model_args.model_revision, "attn_implementation": model_args.attn_implementation}
    dtype = model_args.dtype
    kwargs["dtype"] = dtype if dtype in ("auto", None) else getattr(torch, dtype)
    if empty and not (model_args.load_in_4bit or model_args.load_in_8bit):  # quantized: every rank loads
        from accelerate import init_empty_weights
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
        if getattr(config, "tie_word_embeddings", False) and "lm_head.weight" in saved_names(model_args.model_name_or_path):
            config.tie_word_embeddings = False  # as from_pretrained builds it on rank 0: its own lm_head
        with init_empty_weights(include_buffers=False):
            model = AutoModelForCausalLM.from_config(config, dtype=kwargs["dtype"] if kwargs["dtype"] != "auto" else None,
                                                     attn_implementation=model_args.attn_implementation)
        model.tie_weights()  # inside the context each assigned parameter was copied to meta, untied
        return model
    if model_args.load_in_4bit or model_args.load_in_8bit:
        from trl import get_quantization_config

        kwargs["quantization_config"] = get_quantization_config(model_args)
        # Quantized weights are placed at load time: this rank's own GPU, never "auto"
        # (that would spread one model over all local GPUs in every process).
        kwargs["device_map"] = {"": denv.device_index}
    return AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, **kwargs)


def load_tokenizer(model_args):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
    if tok.pad_token is None:  # e.g. Llama: padding with EOS is the usual choice
        tok.pad_token = tok.eos_token
    return tok


def load_weightless_model(model_args):
    """The model's architecture on the meta device: SFTTrainer wants a model even just to
    prepare data, which depends on the tokenizer only; the prep job has no GPU to load it on."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def prepare_data(script_args, cfg, model_args, denv, directory: str) -> None:
    """Let SFTTrainer prepare the data exactly as for training (same config, same tokenizer),
    then save what it made, for training jobs that must not tokenize."""
    from trl import SFTTrainer

    class PrepOnlyTrainer(SFTTrainer):
        def _move_model_to_device(self, model, device):
            pass  # a meta model has no weights to move (and .to() refuses to try)

    if denv.world_size > 1:
        raise cli.UsageError(f"{PREPARE_ONLY_ENV}=1 runs as one process, not {denv.world_size} ranks")
    if script_args.dataset_streaming:
        raise cli.UsageError(f"{PREPARE_ONLY_ENV}=1 cannot save a streamed data set (drop --dataset_streaming)")
    train_ds, eval_ds = load_raw_data(script_args, cfg)
    check_text_columns(train_ds, script_args.dataset_name, cfg.dataset_text_field)
    # No peft_config: adapters change the model, not how the data is prepared.
    trainer = PrepOnlyTrainer(model=load_weightless_model(model_args), args=cfg, train_dataset=train_ds,
                              eval_dataset=eval_ds, processing_class=load_tokenizer(model_args))
    prepared = {"train": trainer.train_dataset, "eval": trainer.eval_dataset}
    for part in data_parts(cfg):
        data.save_atomically(prepared[part], Path(directory).expanduser() / part)
    outputs.say(denv, f"prepared data saved to {directory} ({len(prepared['train'])} rows)")


def _parse(argv: list[str], denv: distenv.DistEnv):
    """(script_args, cfg, model_args) as TRL's own parser reads them, the old names refused first."""
    cli.reject_old_args(argv, RENAMED)
    cli.reject_old_config_keys(argv, RENAMED)
    from train import hf  # imports transformers: after the cheap checks

    parser = arg_parser()
    parser.set_defaults(**hf.capability_defaults(denv))
    return hf.parse_or_usage_error(parser, lambda: parser.parse_args_and_config(argv))


# Beyond what the parser requires: (options of which one is given, the refusal). check_args, and a
# plain render's parse from the option list (train.args_check writes these into it).
NEEDED = ((("--model_name_or_path",), "--model_name_or_path is required"),
          (("--dataset_name",), "--dataset_name is required"))


def arg_parser():
    """TRL's own parser of this entry point's command line (its option list: train.args_check)."""
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser

    return TrlParser((ScriptArguments, SFTConfig, ModelConfig))


def check_args(argv: list[str]) -> None:
    """The command line as a job would read it, before the queue wait (train.args_check): it parses,
    and names a model and a data set. Paths are the job's to check: they may be the nodes' own."""
    script_args, _, model_args = _parse(argv, distenv.setup({}))
    cli.check_needed(NEEDED, {"--model_name_or_path": model_args.model_name_or_path,
                              "--dataset_name": script_args.dataset_name})


def _main(argv: list[str]) -> dict | None:
    denv = distenv.setup()
    script_args, cfg, model_args = _parse(argv, denv)
    from train import hf

    from trl import SFTTrainer, get_peft_config

    hf.one_precision(cfg)
    hf.count_tokens_by_default(cfg, argv)

    hub.check_model_path(model_args.model_name_or_path)
    data.check_data_path(script_args.dataset_name, "--dataset_name")
    prepared_dir = prepared_data_dir()
    if prepare_only():
        return prepare_data(script_args, cfg, model_args, denv, prepared_dir)
    if prepared_dir:
        check_prepared(prepared_dir, data_parts(cfg))
    check_quantization(model_args)
    hf.touch_distributed(cfg)

    # One rank prepares (and caches) the data, the others then read the cache; SFTTrainer
    # tokenizes the same way. Timed (without model loading) for bench/bench_dataprep.py.
    t0 = time.perf_counter()
    if prepared_dir:  # memory-mapped by every rank at once: nothing to write, nothing to wait for
        train_ds, eval_ds = load_prepared(prepared_dir, cfg)
        outputs.say(denv, f"using the data prepared in {prepared_dir} (no tokenization here)")
    else:
        with cfg.main_process_first(local=False, desc="load dataset"):
            train_ds, eval_ds = load_raw_data(script_args, cfg)
        check_text_columns(train_ds, script_args.dataset_name, cfg.dataset_text_field)
    prep = time.perf_counter() - t0

    model, tokenizer = load_model(model_args, denv, empty=reads_elsewhere(cfg, denv)), load_tokenizer(model_args)
    t0 = time.perf_counter()
    trainer = hf.sharded_on_cpus(SFTTrainer)(
        model=model,
        args=cfg,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    prep += time.perf_counter() - t0
    return hf.train_and_finish(trainer, denv, data_prep_seconds=prep)


def main(argv: list[str] | None = None) -> dict | None:
    """Run SFT; returns the metrics dict (also written to output_dir/metrics.json)."""
    return program.run_main(_main, argv)


if __name__ == "__main__":
    program.exit_after(main)
