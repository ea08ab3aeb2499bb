"""Supervised fine-tuning with TRL's SFTTrainer, on any number of hosts and GPUs.

    python -m train.sft --model_name_or_path OUT/lm --dataset_name OUT/data/text.jsonl \\
        --output_dir RUN --max_steps 10 --save_steps 5 --per_device_train_batch_size 4 \\
        --learning_rate 1e-3 --logging_steps 1

Arguments are TRL's own (ScriptArguments, SFTConfig, ModelConfig; ``--config recipe.yaml``
works). ``--dataset_name`` is a hub name or a local .jsonl/.json/.parquet/.arrow file or
directory, with a ``text`` (or ``--dataset_text_field``) or ``messages`` column.
Launch it under torchrun, or as one Slurm task per GPU: train.distenv works out the rank.
"""

from __future__ import annotations

import time

from train import cli, data, devices, distenv, hub, program

RENAMED = cli.RENAMED_ARGS
CONVERSATIONAL = ("messages", "conversations", "prompt")


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


def load_model(model_args, denv):
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {"revision": model_args.model_revision, "attn_implementation": model_args.attn_implementation}
    dtype = model_args.dtype
    kwargs["dtype"] = dtype if dtype in ("auto", None) else getattr(torch, dtype)
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


def _main(argv: list[str]) -> dict | None:
    cli.reject_old_args(argv, RENAMED)
    cli.reject_old_config_keys(argv, RENAMED)
    denv = distenv.setup()
    from train import hf  # imports transformers: after the cheap checks

    from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser, get_peft_config

    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    parser.set_defaults(**hf.capability_defaults(denv))
    script_args, cfg, model_args = hf.parse_or_usage_error(parser, lambda: parser.parse_args_and_config(argv))
    hf.count_tokens_by_default(cfg, argv)

    hub.check_model_path(model_args.model_name_or_path)
    data.check_data_path(script_args.dataset_name, "--dataset_name")
    check_quantization(model_args)
    hf.touch_distributed(cfg)

    # One rank prepares (and caches) the data, the others then read the cache; SFTTrainer
    # tokenizes the same way. Timed (without model loading) for bench/bench_dataprep.py.
    t0 = time.perf_counter()
    with cfg.main_process_first(local=False, desc="load dataset"):
        train_ds = data.load_data(script_args.dataset_name, script_args.dataset_train_split,
                                     script_args.dataset_config, script_args.dataset_streaming)
        eval_ds = None
        if cfg.eval_strategy != "no":
            eval_ds = data.load_data(script_args.dataset_name, script_args.dataset_test_split,
                                        script_args.dataset_config, script_args.dataset_streaming)
    check_text_columns(train_ds, script_args.dataset_name, cfg.dataset_text_field)
    prep = time.perf_counter() - t0

    model, tokenizer = load_model(model_args, denv), load_tokenizer(model_args)
    t0 = time.perf_counter()
    trainer = SFTTrainer(
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
