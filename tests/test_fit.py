"""`slurmgen fit`: what fits before queueing, from config.json alone (issue 25, item 1).

The seed's job (Llama-2-70b on 1,1,2,2, sequences of 512) against the published configuration
shipped as tests/data/llama-2-70b/config.json; the predicted bytes against what a tiny model
really holds after an optimizer step."""
import functools
import json
from pathlib import Path

import pytest

from tests.train_fixtures import tiny  # noqa: F401 (fixture)

LLAMA_70B = str(Path(__file__).parent / "data" / "llama-2-70b")
SEED_ARGS = ["--model_name_or_path", LLAMA_70B, "--max_length", "512"]
GIB = 1024 ** 3


def fit(_unused, *args):
    return _fit(args)


@functools.cache  # each run builds a 70B model on the meta device: the tests share runs
def _fit(args: tuple):
    from click.testing import CliRunner

    from slurmgen.cli import cli

    return CliRunner().invoke(cli, ["fit", "--nodes", "4", "--gpus", "1,1,2,2", *args], catch_exceptions=False)


def verdicts(output: str) -> dict[str, str]:
    """strategy -> 'fits' or 'does not fit: ...', from the table."""
    names = ("DDP + LoRA", "DDP + QLoRA 4-bit", "FSDP full shard", "FSDP + CPU offload", "FSDP + QLoRA", "DDP")
    out = {}
    for line in output.splitlines():
        name = next((n for n in names if line.startswith(n + " ")), None)
        if name and name not in out:
            out[name] = "fits" if line.rstrip().endswith("  fits") else line.split("  does not fit: ", 1)[1]
    return out


def test_seed_70b_at_80_gib_ddp_does_not_fit_qlora_does(render_args):
    result = fit(render_args, "--gpu-mem", "80G", "--", *SEED_ARGS)
    assert result.exit_code == 0, result.output
    seen = verdicts(result.output)
    assert set(seen) == {"DDP", "DDP + LoRA", "DDP + QLoRA 4-bit", "FSDP full shard", "FSDP + CPU offload",
                         "FSDP + QLoRA"}
    assert seen["DDP"].startswith("1"), seen  # about 1,300 GiB per GPU > 80
    assert seen["DDP"].endswith("GiB per GPU > 80")
    assert seen["DDP + QLoRA 4-bit"] == "fits"
    assert "your arguments select DDP: does not fit" in result.output
    # full fine-tuning asked for: the recommendation keeps every parameter trained
    assert "recommended: FSDP + CPU offload, with the training arguments --fsdp --fsdp_config '{\"cpu_offload\": true}'" \
        in result.output


def test_seed_70b_at_24_gib_only_sharded_4_bit_or_offload_fits(render_args):
    result = fit(render_args, "--gpu-mem", "24G", "--", *SEED_ARGS, "--use_peft", "--dtype", "bfloat16")
    assert result.exit_code == 0, result.output
    seen = verdicts(result.output)
    assert seen["DDP + QLoRA 4-bit"].endswith("GiB per GPU > 24"), seen
    assert seen["FSDP + QLoRA"] == "fits"
    assert "your arguments select DDP + LoRA: does not fit" in result.output
    assert ("recommended: FSDP + QLoRA, with the training arguments --use_peft --lora_r 16 --load_in_4bit"
            " --bnb_4bit_quant_storage bfloat16 --dtype bfloat16 --fsdp\n") \
        in result.output


def test_host_memory_per_node_counts_every_rank_that_reads_the_model(render_args):
    result = fit(render_args, "--gpu-mem", "80G", "--mem", "200G", "--json", "--", *SEED_ARGS, "--dtype", "bfloat16")
    data = json.loads(result.output)
    by = {s["strategy"]: s for s in data["strategies"]}
    model = data["params"] * 2 / GIB
    assert by["DDP + LoRA"]["host_per_node"] == pytest.approx([model, model, 2 * model, 2 * model], rel=0.01)
    # FSDP too: transformers 5 reads the whole checkpoint in every rank (bench/bench_load_once.py)
    assert by["FSDP full shard"]["host_per_node"] == pytest.approx([model, model, 2 * model, 2 * model], rel=0.01)
    assert by["FSDP + QLoRA"]["host_per_node"] == pytest.approx([5, 5, 10, 10], rel=0.01)  # 5 GiB shards
    assert "GiB of host memory on a node > 200" in by["DDP + LoRA"]["why"]


def test_weights_and_optimizer_agree_with_the_meta_models_count(render_args):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(LLAMA_70B))
    params = sum(p.numel() for p in meta.parameters())
    assert 68.5e9 < params < 69.5e9
    data = json.loads(fit(render_args, "--gpu-mem", "80G", "--json", "--", *SEED_ARGS).output)
    ddp = next(s for s in data["strategies"] if s["strategy"] == "DDP")
    assert ddp["weights"] * GIB == pytest.approx(params * 4, rel=0.05)  # float32, TRL's default --dtype
    assert ddp["optimizer"] * GIB == pytest.approx(params * 4 * 2, rel=0.05)  # AdamW: two states
    fsdp = next(s for s in data["strategies"] if s["strategy"] == "FSDP full shard")
    assert fsdp["optimizer"] * GIB == pytest.approx(params * 4 * 2 / 6, rel=0.05)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_predicted_bytes_match_what_a_tiny_model_holds_after_a_step(render_args, tiny, lora):  # noqa: F811
    """Weights, gradients and AdamW state of a real (tiny) model after one step, within 10%."""
    import torch
    from transformers import AutoModelForCausalLM

    extra = ["--use_peft"] if lora else []
    data = json.loads(fit(render_args, "--gpu-mem", "80G", "--json", "--",
                          "--model_name_or_path", str(tiny / "lm"), *extra).output)
    predicted = data["chosen"]
    model = AutoModelForCausalLM.from_pretrained(tiny / "lm", dtype=torch.float32)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, task_type="CAUSAL_LM"))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable)
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    held = {
        "weights": sum(p.numel() * p.element_size() for p in model.parameters()),
        "gradients": sum(p.grad.numel() * p.grad.element_size() for p in trainable),
        "optimizer": sum(t.numel() * t.element_size() for state in optimizer.state.values()
                         for t in state.values() if t.dim() > 0),
    }
    for part, value in held.items():
        assert predicted[part] * GIB == pytest.approx(value, rel=0.10), part


def test_nothing_fits_exit_1(render_args):
    result = fit(render_args, "--gpu-mem", "2G", "--", *SEED_ARGS)
    assert result.exit_code == 1
    assert "nothing fits: more GPUs, GPUs with more memory" in result.output


@pytest.mark.parametrize("args, message", [
    (["--gpu-mem", "80X", "--", *SEED_ARGS],
     "--gpu-mem '80X': '80X' is not a size like 80G (one for every node, or one per node)"),
    (["--gpu-mem", "80G,80G", "--", *SEED_ARGS], "--gpu-mem '80G,80G': 2 sizes for 4 nodes; give one, or one per node"),
    (["--gpu-mem", "80G"], "give the model: slurmgen fit ... -- --model_name_or_path M"),
    (["--gpu-mem", "80G", "--", "--model_name_or_path", "/no/such/model"],
     "--model_name_or_path /no/such/model: cannot read its config.json"),
    (["--gpu-mem", "80G", "--", *SEED_ARGS, "--use_peft", "--lora_target_modules", "qkv"],
     "--lora_target_modules qkv: the model has no such linear layer (it has down_proj, gate_proj, k_proj,"
     " o_proj, q_proj, up_proj, v_proj)"),
])
def test_bad_input_is_one_line_exit_2(render_args, args, message):
    result = fit(render_args, *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("slurmgen: error: " + message), result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize("settings, chosen", [
    ({}, "DDP"),
    ({"use_peft": True}, "DDP + LoRA"),
    ({"use_peft": True, "load_in_4bit": True}, "DDP + QLoRA 4-bit"),
    ({"fsdp": "True"}, "FSDP full shard"),
    ({"fsdp": "full_shard auto_wrap"}, "FSDP full shard"),
    ({"fsdp": "True", "fsdp_config": '{"cpu_offload": true}'}, "FSDP + CPU offload"),
    ({"fsdp": "full_shard offload auto_wrap"}, "FSDP + CPU offload"),
    ({"fsdp": "True", "use_peft": True, "load_in_4bit": True}, "FSDP + QLoRA"),
])
def test_the_training_arguments_select_a_strategy(settings, chosen):
    from slurmgen.site.fit import STRATEGIES, Training

    assert Training.from_settings(settings).chosen.name == chosen
    # and each strategy's own arguments select it again
    strategy = next(s for s in STRATEGIES if s.name == chosen)
    args = strategy.arguments(16)
    parsed = {"use_peft": "--use_peft" in args, "load_in_4bit": "--load_in_4bit" in args,
              "fsdp": "True" if "--fsdp" in args else None,
              "fsdp_config": args[args.index("--fsdp_config") + 1] if "--fsdp_config" in args else None}
    assert Training.from_settings(parsed).chosen.name == chosen
