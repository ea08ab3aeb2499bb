"""Shell safety, proven by property: arbitrary printable values in the job name, environment
values, setup lines' arguments, paths, log names, pass-through sbatch, srun and launcher
arguments, the program and training arguments give scripts that pass `bash -n` and shellcheck,
and, run with recording stand-ins, every value arrives byte for byte.

shellcheck takes most of the time per script (30 ms of an example's 50 of CPU); it lints the
drawn scripts in batches (one process for LINT_BATCH scripts) once every example has run, and a
finding names the example's values."""
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmgen import __version__
from slurmgen.job import prepare
from slurmgen.job.runtime import RUNTIME as RUNTIME_SH
from slurmgen.plan.layout import materialize
from slurmgen.plan.runtime import runtime_spec
from slurmgen.plan.spec import JobSpec
from slurmgen.runtime_spec import FORMAT as RUNTIME_FORMAT
from slurmgen.runtime_spec import RuntimeSpec
from slurmgen.script.render import render, shell_quote

EXAMPLES = int(os.environ.get("SLURMGEN_FUZZ_EXAMPLES", "2000"))
LINT_BATCH = 250
# Printable text with a bias to what breaks shells: quotes, $, backticks, backslashes, globs, #.
NASTY = "'\"$`\\ !*?[]{}();&|<>#~%=-\t"
printable = st.text(
    alphabet=st.one_of(st.sampled_from(NASTY.replace("\t", "")), st.characters(codec="utf-8",
                       categories=("L", "N", "P", "S", "Zs"))),
    min_size=1, max_size=24)

# Fast stand-ins (sh: dash starts in half a bash's time; bash only where bash is needed): one node,
# so each runs once; they record NUL-separated values.
SRUN = """#!/bin/sh
printf '%s\\0' "$@" > "$SHIM_DIR/srun_argv"
while case $1 in --*) ;; *) false;; esac; do shift; done
SLURM_NODEID=0 exec "$@"
"""
SCONTROL = """#!/bin/sh
[ "$1 $2" = "show hostnames" ] && printf '%s\\n' "$3"
"""
# The job's Python (--python, default python3) starts torchrun as `python3 -m torch.distributed.run`.
# The job runtime (`-m slurmgen.job`, tested in test_job_runtime.py and end to end) is stood in
# for by what it does with a component: its launch function, in a bash that read launch.sh
# (slurmgen/job/steps.py; here one bash for the job's components, a subshell each); a Python per
# example would triple this test's time. The runtime's format and path are answered without a Python
# too, and prepare's assignments (the job's folder, its variables) are the real function's, computed
# in this process; other runs of slurmgen are not followed. Six runs an example: answered by builtins.
PYTHON = f"""#!/bin/sh
case "$1 ${{2-}}" in
"-m slurmgen.job.prepare")
    while IFS= read -r line || [ -n "$line" ]; do printf '%s\\n' "$line"; done < "$SHIM_DIR/settings"
    exit 0;;
"-m slurmgen.job") exec bash "${{0%/*}}/job_runtime" "${{SLURMGEN_STOP_FILE%/*}}/launch.sh";;  # the job's folder
"-m slurmgen.job.runtime") printf '%s\\n' "{RUNTIME_FORMAT} {__version__} {RUNTIME_SH}"; exit 0;;
"-m slurmgen."* | "-c "*) exit 0;;
esac
printf '%s\\0' "$@" > "$SHIM_DIR/argv"
printf '%s\\0' "$FUZZ_VALUE" > "$SHIM_DIR/env"
"""
JOB_RUNTIME = """source "$1" || exit
for i in {0..9}; do  # component_0, component_1, ... in turn
    declare -F "component_$i" > /dev/null || exit 0
    ("component_$i") || exit
done
"""


@pytest.fixture(scope="module")
def shim_dir():
    directory = Path(tempfile.mkdtemp(prefix="slurmgen-shims-"))
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("python3", PYTHON), ("job_runtime", JOB_RUNTIME)):
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)
    yield directory
    shutil.rmtree(directory)


def sbatch_value(text: str, option: str) -> str:
    """Decode an #SBATCH --option=VALUE line as sbatch does (double quotes, backslash escapes)."""
    line = next(l for l in text.splitlines() if l.startswith(f"#SBATCH --{option}="))
    raw = line.split("=", 1)[1]
    if not raw.startswith('"'):
        return raw
    out, escaped = [], False
    for char in raw[1:-1]:
        if escaped or char not in '\\"':
            out.append(char)
            escaped = False
        else:
            escaped = char == "\\"
    return "".join(out)


def safe_log_name(text: str) -> str:
    """A file name: no /, not . or .., and a literal % written %% (the patterns are Slurm's)."""
    name = text.replace("/", "_").replace("%", "%%")
    return name + ".log" if name in (".", "..") else name


def test_values_arrive_byte_for_byte(shim_dir, tmp_path):
    drawn = []  # the values of each example, in order; its script is tmp_path/lint/N.sh
    lint_dir = tmp_path / "lint"
    lint_dir.mkdir()
    each_example(shim_dir, lint_dir, drawn)
    assert len(drawn) == EXAMPLES
    findings = lint(sorted(lint_dir.iterdir(), key=lambda p: int(p.stem)))
    assert not findings, "shellcheck found, for these drawn values:\n" + "\n\n".join(
        f"{drawn[int(Path(name).stem)]}\n{text}" for name, text in sorted(findings.items())[:5])


def lint(scripts: list[Path]) -> dict[str, str]:
    """shellcheck's findings by script, one shellcheck process per LINT_BATCH scripts."""
    findings: dict[str, list[str]] = {}
    for start in range(0, len(scripts), LINT_BATCH):
        batch = [str(p) for p in scripts[start:start + LINT_BATCH]]
        run = subprocess.run(["shellcheck", "--severity=style", "--format=gcc", *batch],
                             capture_output=True, text=True)
        assert run.returncode in (0, 1) and not run.stderr, run.stderr  # 1: findings, below
        for line in run.stdout.splitlines():
            findings.setdefault(line.split(":", 1)[0], []).append(line)
        assert (run.returncode == 1) == any(name in findings for name in batch), run.stdout
    return {name: "\n".join(lines) for name, lines in findings.items()}


def each_example(shim_dir, lint_dir, drawn):
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(job_name=printable, env_value=printable, setup_arg=printable, dir_name=printable,
           train_args=st.lists(printable, max_size=4), log_name=printable, passed=printable,
           run_exec=st.booleans())
    def example(**values):
        (lint_dir / f"{len(drawn)}.sh").write_text(check_example(shim_dir, **values))
        drawn.append(values)

    example()


def check_example(shim_dir, job_name, env_value, setup_arg, dir_name, train_args, log_name, passed, run_exec):
    """Render one drawn example, check it with `bash -n`, run it with the stand-ins and compare
    every value byte for byte; returns the script for the batched shellcheck."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        safe_dir = dir_name.replace("/", "_")
        log_dir = root / f"logs {safe_dir}"
        script_path = root / f"train {safe_dir}.py"
        script_path.write_text("")
        setup_out = root / "setup.out"
        spec = JobSpec(
            gpus=(1,), job_name=job_name, log_dir=str(log_dir), preflight=False,
            env=(("FUZZ_VALUE", env_value),),
            # A setup line is the user's shell code; its argument quoted as slurmgen quotes values.
            setup=(f"printf '%s' {shell_quote(setup_arg)} > {shell_quote(str(setup_out))}",),
            script=None if run_exec else str(script_path), exec=str(script_path) if run_exec else None,
            module=None, train_args=tuple(train_args),
            log_name=safe_log_name(log_name), error_log=True,
            sbatch=(f"comment={passed}",), srun_args=(f"--comment={passed}",),
            launcher_args=(f"--role={passed}",),
        ).validate()
        plan = materialize(spec)
        text = render(plan, command=shlex.join(["slurmgen", "render", "--job-name", job_name]))
        job = root / "job.sh"
        job.write_text(text)
        log_dir.mkdir()
        subprocess.run(["bash", "-n", str(job)], check=True)
        env = dict(os.environ, PATH=f"{shim_dir}:{os.environ['PATH']}", SHIM_DIR=str(root),
                   SLURM_JOB_ID="42", SLURM_JOB_NODELIST="node1", SLURMGEN_POLL_SECONDS="0.02")
        env.pop("FUZZ_VALUE", None)
        runtime = RuntimeSpec.from_json(runtime_spec(plan, "").to_json())
        (root / "settings").write_text(prepare.settings(runtime, env))
        run = subprocess.run(["bash", str(job)], env=env, capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, run.stderr
        argv = (root / "argv").read_bytes().split(b"\0")[:-1]
        expected = [*(["--no-python"] if run_exec else []), f"--role={passed}", str(script_path), *train_args]
        assert [a.decode() for a in argv[-len(expected):]] == expected
        srun_argv = (root / "srun_argv").read_bytes().split(b"\0")
        assert f"--comment={passed}".encode() in srun_argv
        assert (root / "env").read_bytes() == env_value.encode() + b"\0"
        assert setup_out.read_text() == setup_arg
        assert sbatch_value(text, "job-name") == job_name
        assert sbatch_value(text, "output") == str(log_dir).replace("%", "%%") + "/" + spec.log_name
        assert sbatch_value(text, "error") == str(log_dir).replace("%", "%%") + "/" + spec.error_name
        assert sbatch_value(text, "comment") == passed
        assert sorted(p.name for p in root.iterdir()) == sorted(
            ["argv", "env", "job.sh", log_dir.name, script_path.name, "settings", "setup.out", "srun_argv"])
        return text
