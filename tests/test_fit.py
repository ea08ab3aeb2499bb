"""`slurmgen fit`: what fits before queueing (issue 25 item 1, issue 42).

The seed's job (Llama-2-70b on 1,1,2,2, sequences of 512) against the published configuration
shipped as tests/data/llama-2-70b/config.json. The expected figures are worked out by hand from
the parameter count (68,976,648,192; 68,451,041,280 in the linear layers) and the bytes per
parameter each strategy keeps; the components themselves are checked against measured runs in
tests/test_fit_measured.py and against published runs in tests/test_fit_published.py.

Most runs count the model from config.json (fit_light; exact against the meta device,
tests/test_fit_light.py), which keeps them fast; one runs train.sizing on the meta device. No
test reaches a cluster: the cluster query is replaced, by nothing or by recorded sinfo text.
"""
import json
import re
from pathlib import Path

import pytest

from slurmgen.site import cluster, fit, fit_budget, fit_light, fit_text

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
LLAMA_70B = str(ROOT / "tests" / "data" / "llama-2-70b")
SEED_ARGS = ["--model_name_or_path", LLAMA_70B, "--max_length", "512"]
GIB = 1024 ** 3
P70, Q70 = 68_976_648_192, 68_451_041_280
# Llama-2-7b's published configuration (6,738,415,616 parameters)
LLAMA_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000}
SINFO = (  # `sinfo -h -N -o '%N|%P|%G|%T|%c|%E|%m'` on a 1,1,2,2 cluster, RealMemory in MB
    "node1|gpu*|gpu:1|idle|16|none|128000\n"
    "node2|gpu*|gpu:1|idle|16|none|128000\n"
    "node3|gpu*|gpu:a100:2(S:0-1)|mixed|32|none|1000000\n"
    "node4|gpu*|gpu:2|idle|32|none|1000000\n"
    "node5|gpu*|gpu:2|drained|32|bad dimm|64000\n"
)


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    """No test asks a real cluster: sinfo 'fails' unless a test records an answer."""
    def refuse():
        raise cluster.ClusterError("sinfo not found: is this a Slurm login node?")
    monkeypatch.setattr(cluster, "query", refuse)


@pytest.fixture
def light(monkeypatch):
    """Count from config.json, as on a login node without torch."""
    monkeypatch.setattr(fit, "torch_here", lambda: False)


def run(*args, gpus="1,1,2,2", nodes="4"):
    from click.testing import CliRunner

    from slurmgen.cli import cli

    return CliRunner().invoke(cli, ["fit", "--nodes", nodes, "--gpus", gpus, *args], catch_exceptions=False)


def verdicts(output: str) -> dict[str, str]:
    """strategy -> its verdict, from the table."""
    out = {}
    for line in output.splitlines():
        m = re.match(r"(\S.*?)\s{2,}[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s{2}(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def estimates(*args, gpus="1,1,2,2", nodes="4") -> dict[str, dict]:
    result = run("--json", *args, gpus=gpus, nodes=nodes)
    data = json.loads(result.output)
    return {s["strategy"]: s for s in data["strategies"]} | {"chosen": data["chosen"], "_": data}


# ---------------------------------------------------------------------------- item 1: fp32 master weights
def test_fsdp_under_mixed_precision_keeps_fp32_master_weights(light):
    """accelerate's fsdp2_prepare_model upcasts what trains to fp32 under bf16 mixed precision:
    4 bytes per parameter, sharded over 16 ranks; 2 without mixed precision."""
    mixed = estimates("--gpu-mem", "64G", "--", *SEED_ARGS, "--dtype", "bfloat16", gpus="8,8", nodes="2")
    fsdp = mixed["FSDP full shard"]
    assert fsdp["parts"]["weights"] == pytest.approx(16.06, abs=0.01)  # P x 4 / 16
    assert fsdp["parts"]["gradients"] == pytest.approx(16.06, abs=0.01)
    assert fsdp["parts"]["optimizer"] == pytest.approx(32.12, abs=0.01)  # two fp32 states
    assert fsdp["verdict"].startswith("does not fit: ") and fsdp["verdict"].endswith(" GiB per GPU > 63.68")
    plain = estimates("--gpu-mem", "64G", "--", *SEED_ARGS, "--dtype", "bfloat16", "--bf16", "false",
                      gpus="8,8", nodes="2")["FSDP full shard"]
    assert plain["parts"]["weights"] == pytest.approx(8.03, abs=0.01)  # P x 2 / 16
    assert plain["parts"]["optimizer"] == pytest.approx(16.06, abs=0.01)
    # one reader: the bf16 model and the 5 GiB checkpoint shard it is read from
    assert plain["verdict"] == "GPU fits; host memory not checked (needs 133 GiB on a node)"


# ---------------------------------------------------------------------------- item 2: one reader
def test_cpu_ram_efficient_loading_reads_the_model_once_per_node(light):
    """With --mem 1000G on 2x8, a full fine-tuning that does not fit the GPUs sharded fits with
    CPU offload: one reader per node (the fp32 copy accelerate makes before sharding, 257 GiB),
    and later the node's 8 offloaded shards of weights, gradients and AdamW state (8 x P x 16 /
    16 = 514 GiB). Every rank reading would need 8 x 257 GiB: the old count, which left QLoRA."""
    one_reader = ["--fsdp", "--fsdp_config", '{"cpu_ram_efficient_loading": true}']
    result = run("--gpu-mem", "80G", "--mem", "1000G", "--", *SEED_ARGS, "--dtype", "bfloat16", *one_reader,
                 gpus="8,8", nodes="2")
    assert result.exit_code == 0
    assert "your arguments select FSDP full shard: does not fit: " in result.output
    assert ("recommended: FSDP + CPU offload, with the training arguments --fsdp --fsdp_config"
            " '{\"cpu_offload\": true, \"cpu_ram_efficient_loading\": true}'") in result.output
    by = estimates("--gpu-mem", "80G", "--mem", "1000G", "--", *SEED_ARGS, "--dtype", "bfloat16", "--fsdp",
                   gpus="8,8", nodes="2")
    assert by["FSDP full shard"]["host_per_node"] == pytest.approx([256.96, 256.96], abs=0.01)  # P x 4, once
    assert by["FSDP + CPU offload"]["host_per_node"] == pytest.approx([513.9, 513.9], abs=0.1)
    assert by["FSDP + CPU offload"]["verdict"] == "fits"
    every_rank = by["chosen"]  # --fsdp alone: every rank reads, then upcasts
    assert every_rank["host_per_node"] == pytest.approx([2055.7, 2055.7], abs=0.1)
    assert every_rank["verdict"].endswith("; 2056 GiB of host memory on a node > 1000")


# ---------------------------------------------------------------------------- item 3: unchecked budgets
def test_no_fits_for_a_budget_that_was_not_checked(light):
    result = run("--gpu-mem", "80G", "--", *SEED_ARGS)
    assert result.exit_code == 0
    assert "host memory unknown (no --mem, no answer from the cluster): not checked" in result.output
    seen = verdicts(result.output)
    assert "fits" not in seen.values()
    # a 2-GPU node: the fp32 model one rank reads (P x 4 = 257 GiB), the 5 GiB checkpoint shard
    # it reads from, and two shards of the weights (2 x P x 4 / 6 = 86 GiB); more than two ranks'
    # offloaded weights, gradients and AdamW state later (2 x P x 16 / 6 = 343 GiB)
    assert seen["FSDP + CPU offload"] == "GPU fits; host memory not checked (needs 348 GiB on a node)"
    assert result.output.rstrip().endswith(
        "recommended: FSDP + CPU offload, with the training arguments --fsdp --fsdp_config '{\"cpu_offload\": true,"
        " \"cpu_ram_efficient_loading\": true}' (GPU memory checked; host memory not checked: it needs 348 GiB"
        " on a node)")


def test_host_memory_is_read_from_the_cluster(light, monkeypatch):
    """RealMemory per node from sinfo: the 1-GPU nodes have 125 GiB, the 2-GPU nodes 977 GiB (the
    drained node5 does not count). Every 16-bit strategy reads the whole model once on each node
    (bf16: 128.5 GiB and a 5 GiB checkpoint shard; FSDP's fp32 copy: 257 GiB), more than a 1-GPU node has: only 4-bit loading,
    which streams 5 GiB shards, fits the hosts."""
    monkeypatch.setattr(cluster, "query", lambda: cluster.ClusterInfo("slurm 22.05.8", *cluster.parse_sinfo(SINFO)))
    result = run("--gpu-mem", "80G", "--", *SEED_ARGS, "--dtype", "bfloat16")
    assert "125,125,977,977 GiB host memory per node (RealMemory (sinfo))" in result.output
    seen = verdicts(result.output)
    # a 1-GPU node: the fp32 copy (P x 4) and its rank's weight shard (P x 4 / 6)
    assert seen["FSDP + CPU offload"] == "does not fit: 300 GiB of host memory on a node > 125"
    # the bf16 model, its fp32 adapters and the 5 GiB checkpoint shard being read
    assert seen["DDP + LoRA"].endswith("; 134 GiB of host memory on a node > 125")
    assert seen["DDP + QLoRA 4-bit"] == "fits"
    assert result.output.rstrip().endswith("recommended: DDP + QLoRA 4-bit, with the training arguments --use_peft"
                                           " --lora_r 16 --load_in_4bit")
    assert result.exit_code == 0


def test_realmemory_per_node_of_the_layout():
    default, nodes = cluster.parse_sinfo(SINFO)
    budget = fit_budget.from_cluster((1, 1, 2, 2), nodes, None, default)
    assert budget.gib == (125.0, 125.0, 976.5625, 976.5625)  # MB / 1024, the smallest able node
    assert budget.source == "RealMemory (sinfo)"
    pinned = fit_budget.from_cluster((1, 1, 2, 2), nodes, None, default, ("node1", "node2", "node3", "node9"))
    assert pinned.gib == (125.0, 125.0, 976.5625, None)  # node9 unknown: stays unchecked
    assert not pinned.checked


# ---------------------------------------------------------------------------- item 4: every strategy a row
def test_every_strategy_users_run_is_a_row(light):
    result = run("--gpu-mem", "80G", "--mem", "500G", "--", *SEED_ARGS, "--dtype", "bfloat16")
    assert list(verdicts(result.output)) == [
        "DDP", "DDP + LoRA", "DDP + QLoRA 4-bit", "FSDP full shard", "FSDP + CPU offload", "FSDP + LoRA",
        "FSDP + LoRA + CPU offload", "FSDP + QLoRA", "FSDP + QLoRA + CPU offload"]


@pytest.mark.parametrize("name", [s.name for s in fit.STRATEGIES])
def test_each_rows_arguments_select_it_again(name):
    strategy = next(s for s in fit.STRATEGIES if s.name == name)
    settings = fit_light.parse_settings(["--model_name_or_path", "m", *strategy.arguments(16)])
    assert fit.selected(fit.Training.from_settings(settings)).name == name


@pytest.mark.parametrize("settings, chosen", [
    ({}, "DDP"),
    ({"use_peft": True}, "DDP + LoRA"),
    ({"use_peft": True, "load_in_4bit": True}, "DDP + QLoRA 4-bit"),
    ({"fsdp": "True", "fsdp_config": '{"cpu_ram_efficient_loading": true}'}, "FSDP full shard"),
    ({"fsdp": "full_shard auto_wrap"}, "your arguments"),  # every rank reads: not a row
    ({"fsdp": "full_shard offload auto_wrap", "fsdp_config": '{"cpu_ram_efficient_loading": true}'},
     "FSDP + CPU offload"),
    ({"fsdp": True, "use_peft": True, "load_in_4bit": True, "bnb_4bit_quant_storage": "bfloat16",
      "dtype": "bfloat16"}, "FSDP + QLoRA"),
    ({"fsdp": True, "use_peft": True, "load_in_4bit": True}, "your arguments"),  # uint8: not sharded
])
def test_the_training_arguments_select_a_strategy(settings, chosen):
    assert fit.selected(fit.Training.from_settings(settings)).name == chosen


# ---------------------------------------------------------------------------- item 5: one decision
def test_a_strategy_outside_the_table_that_fits_is_recommended_and_exits_0(light, monkeypatch):
    """The table without FSDP + LoRA + CPU offload; the arguments choose it, and at 24 GB with
    200 GB of host memory it is the only thing that fits: recommended as given, exit 0 (the
    verdict said "fits" and the decision "nothing fits", exit 1, before)."""
    monkeypatch.setattr(fit, "STRATEGIES", tuple(s for s in fit.STRATEGIES if s.name != "FSDP + LoRA + CPU offload"))
    args = ["--use_peft", "--dtype", "bfloat16", "--fsdp", "--fsdp_config",
            '{"cpu_offload": true, "cpu_ram_efficient_loading": true}']
    result = run("--gpu-mem", "24G", "--mem", "200G", "--", *SEED_ARGS, *args)
    assert "your arguments select FSDP + CPU offload + LoRA: fits" in result.output
    assert "recommended: your arguments as given (FSDP + CPU offload + LoRA)" in result.output
    assert result.exit_code == 0


@pytest.mark.parametrize("gpu_mem", ["8G", "24G", "48G", "80G"])
@pytest.mark.parametrize("extra", [[], ["--use_peft"], ["--fsdp"], ["--use_peft", "--load_in_4bit"]])
def test_the_exit_status_follows_the_printed_decision(light, gpu_mem, extra):
    result = run("--gpu-mem", gpu_mem, "--mem", "300G", "--", *SEED_ARGS, "--dtype", "bfloat16", *extra)
    last = result.output.rstrip().splitlines()[-1]
    assert result.exit_code == (0 if last.startswith("recommended: ") else 1)
    assert last.startswith("recommended: ") or last.startswith("nothing fits: ")
    if ": fits" in result.output.split("your arguments select", 1)[1].splitlines()[0]:
        assert result.exit_code == 0


# ---------------------------------------------------------------------------- item 6
def seven_b(tmp_path) -> str:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_7B))
    return str(tmp_path)


def test_one_gpu_trains_without_ddp_and_its_bucket_copy(light, tmp_path):
    args = ["--", "--model_name_or_path", seven_b(tmp_path), "--dtype", "bfloat16"]
    one = estimates("--gpu-mem", "80G", *args, gpus="1", nodes="1")
    assert "1 GPU" in one and "DDP" not in one
    assert one["1 GPU"]["buckets"] == 0
    two = estimates("--gpu-mem", "80G", *args, gpus="2", nodes="1")
    assert two["DDP"]["buckets"] == pytest.approx(12.55, abs=0.01)  # 6,738,415,616 x 2 bytes
    assert two["DDP"]["total"] - one["1 GPU"]["total"] == pytest.approx(12.55 * 1.1, abs=0.02)


def test_eager_attention_keeps_the_attention_matrix(light):
    """Without checkpointing, eager attention keeps per layer and token 64 heads x 512 positions
    of probabilities (fp32 and bf16: 6 bytes), and k and v repeated to all 64 heads: 225,280 more
    bytes, x 80 layers x 4,096 tokens = 68.75 GiB."""
    common = ["--gpu-mem", "80G", "--", *SEED_ARGS, "--dtype", "bfloat16", "--gradient_checkpointing", "false"]
    sdpa = estimates(*common)["DDP"]["activations"]
    eager = estimates(*common, "--attn_implementation", "eager")["DDP"]["activations"]
    assert eager - sdpa == pytest.approx(68.75, abs=0.01)


@pytest.mark.parametrize("text, gib", [("80G", 79.6), ("80GB", 79.6), ("24G", 23.88), ("48G", 47.76),
                                       ("141G", 140.29), ("80GiB", 80.0), ("81559M", 79.65), ("45GiB", 45.0)])
def test_a_card_is_taken_at_the_size_it_is_sold(text, gib):
    """80G is an 80 GB card, which reports 79.6 GiB to CUDA (81,559 MiB on an H100)."""
    assert fit_budget.gpu_sizes(text, 1) == (gib,)


def test_the_table_says_what_a_card_holds(light):
    result = run("--gpu-mem", "80G", "--", *SEED_ARGS)
    assert "layout 1,1,2,2: 6 ranks on 4 nodes, 79.6 GiB per GPU" in result.output


def test_4_bit_scales_are_held_whole_by_every_rank(light):
    """FSDP shards the packed 4-bit weights; their fp32 scales (one per 64 weights: Q x 4/64 bytes
    = 3.98 GiB) are attributes, not parameters: every rank holds them all, at 16 ranks as at 32."""
    def weights(gpus, *extra):
        return estimates("--gpu-mem", "80G", "--", *SEED_ARGS, *extra, gpus=gpus, nodes="2")["FSDP + QLoRA"][
            "parts"]["weights"]
    w16, w32 = weights("8,8"), weights("16,16")
    assert 2 * w32 - w16 == pytest.approx(3.984, abs=0.005)  # the part that does not shrink with more ranks
    n16, n32 = weights("8,8", "--use_bnb_nested_quant"), weights("16,16", "--use_bnb_nested_quant")
    assert 2 * n32 - n16 == pytest.approx(1.012, abs=0.005)  # nested: 8-bit scales, fp32 per 256 of them


def test_4_bit_loading_holds_the_whole_quantized_model_on_each_gpu(light):
    """transformers 5 quantizes 4-bit weights on the rank's own GPU as they load, before FSDP
    shards them (accelerate's fsdp2_prepare_model notes the spike): Q x 0.5625 bytes of 4-bit
    weights and scales (35.86 GiB) and the bf16 embeddings and head (0.98 GiB) on each GPU, with
    the CUDA context and 10% for fragmentation."""
    qlora = estimates("--gpu-mem", "24G", "--", *SEED_ARGS, "--use_peft")["FSDP + QLoRA"]
    assert qlora["loading"] == pytest.approx((35.86 + 0.98 + 1) * 1.1, abs=0.02)
    assert qlora["verdict"] == "does not fit: 41.6 GiB while loading > 23.88"


# ---------------------------------------------------------------------------- the seed, as the docs show it
@pytest.mark.parametrize("gpu_mem", ["24G", "48G", "80G"])
def test_the_seeds_70b_is_recommended_only_what_fits_gpu_and_host(light, gpu_mem):
    result = run("--gpu-mem", gpu_mem, "--mem", "500G", "--", *SEED_ARGS, "--use_peft", "--dtype", "bfloat16")
    rec = re.search(r"^recommended: (.+?), with", result.output, re.M)
    assert result.exit_code == 0 and rec, result.output
    assert verdicts(result.output)[rec.group(1)] == "fits"


def test_the_docs_show_what_fit_prints(light):
    """docs/pages/guides/big-models.md shows fit's output for the seed at 24, 48 and 80 GB."""
    page = (ROOT / "docs" / "pages" / "guides" / "big-models.md").read_text()
    shown = re.findall(r"```console\n\$ (slurmgen fit [^\n]+)\n(.*?)```", page, re.S)
    assert len(shown) >= 3
    for command, output in shown:
        args = command.split()[2:]
        args = [LLAMA_70B if a == "meta-llama/Llama-2-70b-hf" else a for a in args]
        from click.testing import CliRunner

        from slurmgen.cli import cli

        printed = CliRunner().invoke(cli, ["fit", *args], catch_exceptions=False).output
        assert printed.replace(LLAMA_70B, "meta-llama/Llama-2-70b-hf") == output, command


# ---------------------------------------------------------------------------- the meta device
def test_the_meta_device_count_where_torch_is_installed():
    """With torch here, fit counts the model built on the meta device (train.sizing)."""
    result = run("--gpu-mem", "80G", "--json", "--", *SEED_ARGS)
    data = json.loads(result.output)
    assert data["params"] == P70
    ddp = next(s for s in data["strategies"] if s["strategy"] == "DDP")
    assert ddp["parts"]["weights"] * GIB == P70 * 4  # float32, TRL's default --dtype
    assert ddp["parts"]["optimizer"] * GIB == P70 * 8


# ---------------------------------------------------------------------------- bad input
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
    (["--gpu-mem", "80G", "--", *SEED_ARGS, "--attn_implementation", "fast"],
     "--attn_implementation 'fast': expected eager, sdpa, flash_attention_2, flash_attention_3 or flex_attention"),
    (["--gpu-mem", "80G", "--", *SEED_ARGS, "--use_peft", "maybe"], "--use_peft 'maybe': expected true or false"),
])
def test_bad_input_is_one_line_exit_2(light, args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("slurmgen: error: " + message), result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_fit_text_never_says_fits_for_an_unchecked_host():
    est = fit.Estimate("X", [], 1, 1, 1, 1, 1, 5, [40.0], fits=True, host_checked=False)
    assert fit_text.verdict(est) == "GPU fits; host memory not checked (needs 40 GiB on a node)"


def test_check_refuses_arguments_that_do_not_fit_and_names_the_nearest(light, monkeypatch):
    """slurmgen check with --gpu-mem: the strategy the arguments choose, judged with the cluster's
    RealMemory (no start estimate is asked for a job that cannot run)."""
    from click.testing import CliRunner

    from slurmgen.cli import cli

    monkeypatch.setattr(cluster, "query", lambda: cluster.ClusterInfo("slurm 22.05.8", *cluster.parse_sinfo(SINFO)))
    result = CliRunner().invoke(cli, ["check", "--nodes", "4", "--gpus", "1,1,2,2", "--gpu-mem", "80G", "--",
                                      *SEED_ARGS, "--dtype", "bfloat16"], catch_exceptions=False)
    assert result.exit_code == 1
    # a 1-GPU node: the bf16 model and the checkpoint shard it is read from, 133 GiB of its 125
    assert (f"cannot run: {LLAMA_70B} with DDP does not fit (707.6 GiB per GPU > 79.6; 133 GiB of host memory on a"
            " node > 125); the nearest that fits: DDP + QLoRA 4-bit, with the training arguments --use_peft"
            " --lora_r 16 --load_in_4bit") in result.output
    assert "result: the layout can run, but the model does not fit it with these training arguments" in result.output
