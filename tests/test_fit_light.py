"""`slurmgen fit` on a login node without torch (issue 42, item 8): the counts from config.json
alone are exactly those of the model built on the meta device, for every family fit_light
knows, and the command runs in a Python where torch cannot be imported."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurmgen.site import fit_light

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
LLAMA_70B = REPO / "tests" / "data" / "llama-2-70b"
SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=100)

# Each family's tiny config, in the shapes its real checkpoints take (grouped-query attention,
# explicit head_dim, biases, tied embeddings, Falcon's three decoder layouts).
CONFIGS = [
    ("llama", dict(SMALL, num_key_value_heads=2)),
    ("llama", dict(SMALL, num_key_value_heads=4, attention_bias=True, mlp_bias=True, tie_word_embeddings=True)),
    ("mistral", dict(SMALL, num_key_value_heads=2, head_dim=32)),
    ("mistral", dict(SMALL, num_key_value_heads=1)),
    ("qwen2", dict(SMALL, num_key_value_heads=2)),
    ("qwen2", dict(SMALL, num_key_value_heads=2, tie_word_embeddings=True)),
    ("qwen3", dict(SMALL, num_key_value_heads=2, head_dim=24)),
    ("qwen3", dict(SMALL, num_key_value_heads=2)),  # head_dim left to the default (128)
    ("gemma", dict(SMALL, num_key_value_heads=1, head_dim=32)),
    ("gemma", dict(SMALL, num_key_value_heads=1)),  # head_dim default (256)
    ("gemma2", dict(SMALL, num_key_value_heads=2, head_dim=32)),
    ("gemma3_text", dict(SMALL, num_key_value_heads=2, head_dim=32)),
    ("gpt_neox", dict(SMALL)),
    ("gpt_neox", dict(SMALL, attention_bias=False, tie_word_embeddings=True)),
    ("falcon", dict(SMALL)),  # Falcon-7B's layout: multi-query, parallel attention, one LayerNorm
    ("falcon", dict(SMALL, new_decoder_architecture=True, num_kv_heads=2)),  # Falcon-40B/180B
    ("falcon", dict(SMALL, multi_query=False, parallel_attn=False, bias=True, ffn_hidden_size=80)),  # Falcon-RW
]


def meta_counts(config_dir: Path) -> dict:
    """train.sizing's counts of the model built on the meta device."""
    from train import sizing

    config, model = sizing.meta_model(str(config_dir))
    return sizing.shape(model, config)


@pytest.mark.parametrize("family, values", CONFIGS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CONFIGS)])
def test_config_json_counts_equal_the_meta_models(tmp_path, family, values):
    from transformers import AutoConfig

    AutoConfig.for_model(family, **values).save_pretrained(tmp_path)  # the file as transformers writes it
    light = fit_light.count(fit_light.read_config(str(tmp_path)), "test")
    meta = meta_counts(tmp_path)
    assert light == meta


def test_the_published_70b_config_counts_68_976_648_192():
    light = fit_light.count(fit_light.read_config(str(LLAMA_70B)), "test")
    assert light["params"] == 68_976_648_192  # DESIGN.md: counted on the meta device
    assert light["quantizable_params"] == 68_451_041_280


def test_the_light_parser_reads_what_trls_parser_reads():
    """The settings the arithmetic uses, from the same arguments, both ways."""
    from train import sizing

    argv = ["--model_name_or_path", str(LLAMA_70B), "--max-length", "512", "--use_peft", "--lora_target_modules",
            "q_proj", "v_proj", "--load_in_4bit", "--bnb_4bit_quant_storage", "bfloat16", "--dtype", "bfloat16",
            "--fsdp", "--fsdp_config", '{"cpu_offload": true}', "--gradient_checkpointing", "false",
            "--per_device_train_batch_size=2", "--attn_implementation", "eager", "--lora_dropout", "0.1",
            "--bf16", "true", "--optim", "paged_adamw_8bit", "--use_bnb_nested_quant"]
    light = fit_light.parse_settings(argv)
    trl = sizing.parse_settings(argv)
    assert {k: light[k] for k in trl} == trl
    defaults = sizing.parse_settings(["--model_name_or_path", "m"])
    assert {k: fit_light.parse_settings(["--model_name_or_path", "m"])[k] for k in defaults} == defaults


def test_unknown_family_without_torch_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mixtral", "hidden_size": 8}))
    with pytest.raises(fit_light.FitError) as err:
        fit_light.count(fit_light.read_config(str(tmp_path)), f"--model_name_or_path {tmp_path}")
    assert str(err.value) == (f"--model_name_or_path {tmp_path}: model_type 'mixtral': without torch, slurmgen fit"
                              f" counts llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, gpt_neox, falcon;"
                              f" for others it builds the model on the meta device: pip install 'slurmgen[train]'")


HEAVY = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers", "safetensors", "bitsandbytes")
FIT = """
import sys
from slurmgen.cli import cli
sys.argv = ['slurmgen', 'fit', '--nodes', '4', '--gpus', '1,1,2,2', '--gpu-mem', '80G', '--mem', '500G', '--',
            '--model_name_or_path', sys.argv[1], '--max_length', '512', '--dtype', 'bfloat16']
try:
    cli()
except SystemExit as exit:
    heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'trl', 'datasets'})
    print('heavy:', heavy, 'exit:', exit.code)
"""


def login_node_packages(tmp_path: Path) -> Path:
    """This venv's packages without the [train] extra, as a login node has them: a folder of links
    to the light ones, and a sitecustomize that takes the venv's own site-packages off sys.path
    (in every Python started with it, the tools fit could run too)."""
    import site

    venv = site.getsitepackages()[0]
    light = tmp_path / "site-packages"
    light.mkdir()
    for entry in Path(venv).iterdir():
        if not entry.name.split("-")[0].split(".")[0].lower().startswith(HEAVY + ("nvidia", "triton", "sitecustomize")):
            (light / entry.name).symlink_to(entry)
    (light / "sitecustomize.py").write_text(f"import sys\nsys.path[:] = [p for p in sys.path if p != {venv!r}]\n")
    return light


def test_fit_runs_where_torch_is_not_installed(tmp_path):
    """A login node without the [train] extra: the same table, counted from config.json."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{login_node_packages(tmp_path)}:{REPO}", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", FIT, str(LLAMA_70B)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert "heavy: [] exit: 0" in done.stdout, done.stdout + done.stderr
    assert "llama, 68.98 B parameters, 80 layers" in done.stdout
    # full fine-tuning was asked for: a full-parameter strategy that fits GPU and host
    assert "recommended: FSDP + CPU offload, with the training arguments --fsdp --fsdp_config" in done.stdout
