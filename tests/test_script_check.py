"""A user's script read before queueing (issue 25, item 7): the lines of seed 000's train.py
that fail on every rank after the queue wait, each with its fix; the fixed script passes."""
import subprocess
import sys
from pathlib import Path

import pytest

from slurmgen.site.user_script import read

SEED = Path(__file__).parent / "data" / "seed000" / "train.py"


def fixed_seed_source() -> str:
    """The seed's code with the four fixes check names (and nothing else changed)."""
    text = SEED.read_text()
    text = text.replace('from trl import SFTTrainer', 'from trl import SFTConfig, SFTTrainer')
    text = text.replace(',\n    device_map="auto"  # 自动分配模型权重到可用GPU\n', '\n')
    text = text.replace('    tokenizer=tokenizer,', '    processing_class=tokenizer,')
    return text.replace('    dataset_text_field="text",\n    max_seq_length=512,\n',
                        '    args=SFTConfig(dataset_text_field="text", max_length=512),\n')


def adapted_seed_source(assets: Path, output_dir: Path, config: str = "max_steps=3") -> str:
    """The fixed seed script with this machine's differences only: the tiny offline model and data,
    a few steps on CPUs (use_cpu, gloo), the process group torn down at the end and the process left
    without finalization (gloo on CPUs: a rank can abort at exit otherwise, "terminate called
    without an active exception", seen with and without the teardown; the entry points leave the
    same way, train.program.exit_after)."""
    source = fixed_seed_source()
    source = source.replace('"NousResearch/Llama-2-70b-hf"', repr(str(assets / "lm")))
    source = source.replace('load_dataset("imdb", split="train")',
                            f'load_dataset("json", data_files={str(assets / "data" / "text.jsonl")!r}, split="train")')
    source = source.replace('args=SFTConfig(dataset_text_field="text", max_length=512)',
                            'args=SFTConfig(dataset_text_field="text", max_length=512, output_dir='
                            f'{str(output_dir)!r}, {config}, per_device_train_batch_size=2, use_cpu=True,'
                            ' bf16=False, ddp_backend="gloo", report_to="none", gradient_checkpointing=False)')
    source += ("\nimport os, sys\nimport torch.distributed as dist\nif dist.is_initialized():\n"
               "    dist.destroy_process_group()\nsys.stdout.flush()\nsys.stderr.flush()\nos._exit(0)\n")
    assert "device_map" not in source and "processing_class=tokenizer" in source and "use_cpu" in source
    return source


def test_the_seeds_script_is_named_line_by_line_with_fixes():
    reading = read(str(SEED))
    assert reading.note == ""
    lines = {line.split(": ", 1)[0].rsplit(":", 1)[1]: line.split(": ", 1)[1] for line in reading.findings}
    assert sorted(lines, key=int) == ["12", "20", "22", "23"], reading.findings
    assert lines["12"].startswith("from_pretrained(device_map='auto'): spreads one model over every GPU of the"
                                  " node in every rank, wrong under torchrun (DDP, FSDP); drop it")
    assert lines["20"].endswith("takes no tokenizer=; pass it as processing_class=... (TRL renamed tokenizer= to"
                                " processing_class=)")
    assert lines["22"].endswith("takes no dataset_text_field=; give SFTConfig(dataset_text_field=...) as args="
                                " (an SFTConfig option now)")
    assert lines["23"].endswith("takes no max_seq_length=; give SFTConfig(max_length=...) as args= (renamed, and"
                                " moved to SFTConfig)")
    assert all(line.startswith(f"{SEED}:") for line in reading.findings)
    # Not a failure, but a requeued run would start again from step 0: said once, with its fix.
    assert reading.advice == (f"{SEED}:27: note: trainer.train() passes no resume_from_checkpoint: a requeued"
                              " run (time limit, preemption, retry) starts again from step 0; render with"
                              " --resume auto, or pass resume_from_checkpoint=True",)
    assert read(str(SEED), resume_auto=True).advice == ()


def test_the_fixed_script_passes(tmp_path):
    fixed = tmp_path / "train.py"
    fixed.write_text(fixed_seed_source())
    assert read(str(fixed)).findings == ()


@pytest.mark.parametrize("source, cpu_only, expected", [
    ('m = AutoModelForCausalLM.from_pretrained("x", load_in_8bit=True)\n', False,
     "1: from_pretrained(load_in_8bit=...): transformers takes it only inside a quantization config;"
     " use quantization_config=BitsAndBytesConfig(load_in_8bit=True)"),
    ('import torch.distributed as dist\ndist.init_process_group("nccl")\n', True,
     '2: init_process_group("nccl"): the job\'s nodes have no GPU and nccl needs one; use "gloo", or leave'
     ' the backend out (torch picks gloo on CPU, nccl on GPUs)'),
    ('args = TrainingArguments(output_dir="o", evaluation_strategy="steps")\n', False,
     "1: TrainingArguments(evaluation_strategy=...): transformers"),
    ('args = SFTConfig(output_dir="o", no_such_option=1)\n', False,
     "1: SFTConfig(no_such_option=...): trl"),
])
def test_each_kind_of_finding(tmp_path, source, cpu_only, expected):
    script = tmp_path / "s.py"
    script.write_text(source)
    findings = read(str(script), cpu_only).findings
    assert len(findings) == 1 and findings[0].startswith(f"{script}:{expected}"), findings


def test_per_rank_device_map_and_gpu_backends_are_fine(tmp_path):
    script = tmp_path / "s.py"
    script.write_text('import os\nm = AutoModelForCausalLM.from_pretrained("x", device_map={"": int(os.environ["LOCAL_RANK"])})\n'
                      'dist.init_process_group("nccl")\n')
    assert read(str(script)).findings == ()  # nccl: fine where the nodes have GPUs


def test_an_unparsable_script_is_a_note_not_a_finding(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("def broken(:\n")
    reading = read(str(script))
    assert reading.findings == ()
    assert reading.note.startswith(f"{script} not read: {script}: cannot read it as Python (line 1)")
    run = subprocess.run([sys.executable, "-m", "train.script_check", str(script)], capture_output=True, text=True)
    assert run.returncode == 2


def test_a_tool_this_python_cannot_run_names_the_train_extra():
    """A train/ tool that fails for a missing module is said as the [train] extra it needs."""
    from slurmgen.site.train_tools import run_tool

    run = run_tool("train.no_such_tool", [])
    assert run.missing and run.returncode == 1
    assert run.why == "No module named train.no_such_tool: pip install 'slurmgen[train]'"


LIGHTNING_SCRIPT = """import lightning as L
open("ran", "w").close()  # a side effect, had the script been run
trainer = L.Trainer(strategy="ddp", devices=2, num_nodes=4)
"""


def test_a_users_train_py_in_the_working_folder_is_read_never_run(tmp_path, monkeypatch):
    """`python -m train.script_check` in the user's folder imported their train.py (the seed's file
    name) as the package train, so ran it, and found nothing; the tool now runs without the working
    folder on its path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(LIGHTNING_SCRIPT)
    reading = read("train.py", gpus=(1, 1, 2, 2))
    assert not (tmp_path / "ran").exists()
    assert len(reading.findings) == 1 and reading.findings[0].startswith(
        "train.py:3: L.Trainer(...): Lightning assumes the same number of devices on every node, and these nodes"
        " have 1,1,2,2 GPUs"), reading


@pytest.mark.parametrize("gpus, source, named", [
    ("1,1,2,2", LIGHTNING_SCRIPT, True),
    ("2", LIGHTNING_SCRIPT, False),  # a uniform layout: Lightning's own ddp is right
    ("1,1,2,2", "from train.lightning import UnevenDDPStrategy\n" + LIGHTNING_SCRIPT.replace(
        'strategy="ddp", devices=2, num_nodes=4', 'strategy=UnevenDDPStrategy(), devices="auto"'), False),
])
def test_render_names_a_lightning_trainer_that_uneven_nodes_would_stop(tmp_path, gpus, source, named):
    from click.testing import CliRunner

    from slurmgen.cli import cli

    script = tmp_path / "fit_model.py"
    script.write_text(source)
    nodes = "4" if "," in gpus else "2"
    result = CliRunner().invoke(cli, ["render", "--nodes", nodes, "--gpus", gpus, "--script", str(script),
                                      "--log-dir", str(tmp_path / "logs"), "-o", str(tmp_path / "job.sh")])
    assert result.exit_code == 0 and (tmp_path / "job.sh").is_file(), result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("slurmgen: warning: ")]
    assert warnings == ([f"slurmgen: warning: {script}:3: L.Trainer(...): Lightning assumes the same number of devices on"
                         " every node, and these nodes have 1,1,2,2 GPUs: every rank would stop at start (devices x"
                         " num_nodes is not the world size, 6); pass strategy=UnevenDDPStrategy() (from"
                         " train.lightning import UnevenDDPStrategy)"] if named else []), result.stderr


def test_a_job_from_python_warns_of_the_same_lightning_trainer(tmp_path):
    """slurmgen.Job takes render's steps (slurmgen.render_steps): the same warning, as a Python warning."""
    import warnings

    from slurmgen import Job

    script = tmp_path / "fit_model.py"
    script.write_text(LIGHTNING_SCRIPT)
    job = Job(nodes=4, gpus="1,1,2,2", script=str(script), log_dir=str(tmp_path / "logs"), snapshot=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job.write(tmp_path / "job.sh")
    said = [str(w.message) for w in caught if str(w.message).startswith("slurmgen: warning: ")]
    assert len(said) == 1 and said[0].startswith(
        f"slurmgen: warning: {script}:3: L.Trainer(...): Lightning assumes the same number of devices on every node"), said
