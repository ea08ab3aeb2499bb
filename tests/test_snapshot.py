"""The code snapshot (issue 44 item 3): `render --script` copies the script's folder, or its git
repository's working tree, once into LOG_DIR/snapshots/HASH, and the job runs that copy; real git
repositories made here, real renders, real files."""
import os
import re
import subprocess
from pathlib import Path

import pytest

from slurmgen.observe.report_html import code_text
from slurmgen.observe.report_logs import read_log
from slurmgen.plan.code_snapshot import LOG_PREFIX
from slurmgen.observe import report_logs

LAYOUT = ["--nodes", "4", "--gpus", "1,1,2,2"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository with a committed script in a sub-folder, a helper module beside it, data ignored."""
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("import helper\nprint('v1')\n")
    (root / "src" / "helper.py").write_text("X = 1\n")
    (root / "README.md").write_text("project\n")
    (root / ".gitignore").write_text("data/\n*.ckpt\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"\0" * 4096)
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    return root


def render(render_args, script: Path, logs: Path, *more: str, output: str = "-"):
    return render_args("render", "-o", output, "--log-dir", str(logs), *LAYOUT, "--script", str(script), *more)


def snapshot_dirs(logs: Path) -> list[Path]:
    return sorted(p for p in (logs / "snapshots").iterdir() if p.is_dir()) if (logs / "snapshots").is_dir() else []


def target_of(text: str) -> str:
    return re.search(r"^TARGET=\(([^ )]+)", text, re.M)[1]


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_the_job_runs_a_copy_of_the_repository_with_its_uncommitted_and_untracked_files(render_args, repo, tmp_path):
    (repo / "src" / "helper.py").write_text("X = 2  # not committed\n")  # a change to a tracked file
    (repo / "src" / "extra.py").write_text("Y = 3\n")                       # untracked, not ignored
    (repo / "model.ckpt").write_bytes(b"weights")                              # ignored
    logs = tmp_path / "logs"
    result = render(render_args, repo / "src" / "train.py", logs)
    assert result.exit_code == 0, result.output
    [snap] = snapshot_dirs(logs)
    assert files_in(snap) == {".gitignore", "README.md", "src/train.py", "src/helper.py", "src/extra.py"}
    assert (snap / "src" / "helper.py").read_text() == "X = 2  # not committed\n"
    assert target_of(result.stdout) == str(snap / "src" / "train.py")
    commit = git(repo, "rev-parse", "HEAD").strip()
    said = f"{LOG_PREFIX}snapshot {snap} of {repo} (commit {commit} plus uncommitted changes; 5 file(s)"
    assert said in result.stdout  # the job log's line, printed by the script at every run
    assert f"code: snapshot {snap} of {repo} (commit {commit} plus uncommitted changes" in result.stderr


def test_a_clean_checkout_names_its_commit_alone(render_args, repo, tmp_path):
    result = render(render_args, repo / "src" / "train.py", tmp_path / "logs")
    commit = git(repo, "rev-parse", "HEAD").strip()
    assert f"(commit {commit}; 4 file(s)" in result.stderr


def test_an_edit_after_render_does_not_reach_the_job(render_args, repo, tmp_path):
    logs = tmp_path / "logs"
    text = render(render_args, repo / "src" / "train.py", logs).stdout
    (repo / "src" / "train.py").write_text("print('edited while queued')\n")
    assert Path(target_of(text)).read_text() == "import helper\nprint('v1')\n"


def test_the_same_content_is_the_same_folder_copied_once(render_args, repo, tmp_path):
    logs = tmp_path / "logs"
    first = render(render_args, repo / "src" / "train.py", logs).stdout
    [snap] = snapshot_dirs(logs)
    made = snap.stat().st_ino, (snap / "src" / "train.py").stat().st_mtime_ns
    second = render(render_args, repo / "src" / "train.py", logs, "--job-name", "again").stdout
    assert target_of(second) == target_of(first)
    assert snapshot_dirs(logs) == [snap]
    assert (snap.stat().st_ino, (snap / "src" / "train.py").stat().st_mtime_ns) == made  # not copied again
    (repo / "src" / "helper.py").write_text("X = 9\n")
    third = render(render_args, repo / "src" / "train.py", logs).stdout
    assert target_of(third) != target_of(first) and len(snapshot_dirs(logs)) == 2


def test_logs_and_rendered_scripts_inside_the_repository_stay_out(render_args, repo):
    """The usual layout: logs/ and job.sh in the project, not ignored. Neither is code: the second
    render's snapshot is the first's (a script naming the last snapshot would change it every time)."""
    logs = repo / "logs"
    script = repo / "src" / "train.py"
    render(render_args, script, logs, output=str(repo / "job.sh"))
    first = target_of((repo / "job.sh").read_text())
    render(render_args, script, logs, output=str(repo / "job2.sh"))
    assert target_of((repo / "job2.sh").read_text()) == first
    [snap] = snapshot_dirs(logs)
    assert files_in(snap) == {".gitignore", "README.md", "src/train.py", "src/helper.py"}


def test_outside_git_the_script_folder_is_copied(render_args, tmp_path):
    folder = tmp_path / "plain"
    (folder / "pkg").mkdir(parents=True)
    (folder / "train.py").write_text("print(1)\n")
    (folder / "pkg" / "mod.py").write_text("A = 1\n")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"cache")
    result = render(render_args, folder / "train.py", tmp_path / "logs")
    assert result.exit_code == 0, result.output
    [snap] = snapshot_dirs(tmp_path / "logs")
    assert files_in(snap) == {"train.py", "pkg/mod.py"}
    assert target_of(result.stdout) == str(snap / "train.py")
    assert "(not in a git repository; 2 file(s)" in result.stderr


def test_over_the_ceiling_is_one_line_and_nothing_is_written(render_args, repo, tmp_path):
    (repo / "src" / "weights.bin").write_bytes(b"\1" * 3 * 1024 * 1024)  # untracked, not ignored: 3 MiB
    logs = tmp_path / "logs"
    out = tmp_path / "job.sh"
    result = render(render_args, repo / "src" / "train.py", logs, "--snapshot-max-size", "2M", output=str(out))
    assert result.exit_code == 2
    assert result.stderr == (f"slurmgen: error: --script '{repo}/src/train.py': the code snapshot of its git"
                             f" repository {repo} is 3.0 MiB, over the 2.0 MiB ceiling; raise --snapshot-max-size,"
                             " keep data out of it (.gitignore), or give --no-snapshot\n")
    assert not logs.exists() and not out.exists()
    assert render(render_args, repo / "src" / "train.py", logs, "--snapshot-max-size", "4M").exit_code == 0


def test_a_bad_ceiling_is_one_line(render_args, repo, tmp_path):
    result = render(render_args, repo / "src" / "train.py", tmp_path / "logs", "--snapshot-max-size", "lots")
    assert (result.exit_code, result.stderr) == (2, "slurmgen: error: --snapshot-max-size 'lots': not a size; give"
                                                 " one like 100M, 2G or 500K\n")


def test_no_snapshot_runs_in_place_as_before(render_args, repo, tmp_path):
    """--no-snapshot: the launch lines name the script itself, and nothing is copied. With the
    snapshot, the only differences are the script's path and the line that says which code runs."""
    script = repo / "src" / "train.py"
    logs = tmp_path / "logs"
    in_place = render(render_args, script, logs, "--no-snapshot").stdout
    assert target_of(in_place) == str(script) and not snapshot_dirs(logs)
    snapped = render(render_args, script, logs).stdout
    [snap] = snapshot_dirs(logs)
    in_place = in_place.replace(" --no-snapshot ", " ", 1)  # the command in the header
    lines = [line for line in snapped.splitlines(keepends=True) if not line.startswith("echo 'slurmgen: code: ")]
    assert "".join(lines).replace(str(snap / "src" / "train.py"), str(script)) == in_place


def test_built_in_entry_points_are_not_snapshotted(render_args, tmp_path):
    result = render_args("render", "-o", "-", "--log-dir", str(tmp_path / "logs"), *LAYOUT)
    assert result.exit_code == 0 and "slurmgen: code:" not in result.stdout and "code:" not in result.stderr
    assert not (tmp_path / "logs" / "snapshots").exists()


def test_the_submit_path_runs_the_copy(repo, tmp_path):
    from slurmgen.snapshot import take
    from slurmgen.submit.command import spec_from_args
    from slurmgen.submit.parameters import make_task

    spec = spec_from_args([*LAYOUT, "--script", str(repo / "src" / "train.py"), "--log-dir", str(tmp_path / "logs")])
    spec, copy = take(spec, str(tmp_path / "logs" / "submitit"))
    assert copy.write() is True and copy.write() is False  # the second: already there
    task = make_task(spec)
    assert task.target == ("script", os.path.join(copy.code.folder, "src", "train.py"))
    assert task.code == copy.code.log_line() and Path(task.target[1]).is_file()


def test_files_written_between_the_measure_and_the_copy_leave_the_copy_as_measured(tmp_path):
    """Another job writing its log beside the code (a folder outside git copies it) while this render
    vets and renders: the copy is what was hashed, not a refusal ("files changed while it was copied"
    failed a render on a loaded machine)."""
    from slurmgen.snapshot import take
    from slurmgen.submit.command import spec_from_args

    folder = tmp_path / "plain"
    (folder / "other" / "logs").mkdir(parents=True)
    (folder / "train.py").write_text("print(1)\n")
    log = folder / "other" / "logs" / "job-7.out"
    log.write_text("step 1\n")
    spec = spec_from_args([*LAYOUT, "--script", str(folder / "train.py"), "--log-dir", str(tmp_path / "logs")])
    spec, copy = take(spec, str(tmp_path / "logs" / "submitit"))
    log.write_text("step 1\nstep 2\n")
    (folder / "train.py").write_text("print(2)\n")
    assert copy.write() is True
    home = Path(copy.code.folder)
    assert (home / "train.py").read_text() == "print(1)\n"
    assert (home / "other" / "logs" / "job-7.out").read_text() == "step 1\n"


def test_the_report_says_which_code_each_run_ran(tmp_path):
    assert report_logs.CODE == LOG_PREFIX  # the script's line is the one the report reads
    code = "snapshot /l/snapshots/ab12 of /proj (commit 1a2b plus uncommitted changes; 3 file(s), 1.0 KiB)"
    log = tmp_path / "job.out"
    log.write_text(f"{LOG_PREFIX}{code}\n"
                   "slurmgen: job 7 (restart 0 of at most 3) on node1: world size 6, master node1:29500\n"
                   "slurmgen: [checkpoint saved at step 5; ]requeueing job 7 (restart 1 of at most 3)\n"
                   f"{LOG_PREFIX}{code}\n"
                   "slurmgen: job 7 (restart 1 of at most 3) on node2: world size 6, master node2:29500\n")
    starts = read_log(log).starts
    assert [s.code for s in starts] == [code, code]
    assert code_text(starts) == code


def test_a_script_that_is_a_link_is_copied_as_its_content(render_args, tmp_path):
    """A --script link to a file elsewhere: the snapshot holds the file (a link would run the live
    file), in the snapshot folder."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "real.py").write_text("print('real')\n")
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.py").symlink_to(tmp_path / "elsewhere" / "real.py")
    text = render(render_args, folder / "train.py", tmp_path / "logs").stdout
    [snap] = snapshot_dirs(tmp_path / "logs")
    copied = Path(target_of(text))
    assert copied == snap / "train.py" and not copied.is_symlink() and copied.read_text() == "print('real')\n"


def test_the_snapshots_of_an_earlier_log_dir_in_the_repository_stay_out(render_args, repo, tmp_path):
    """An older --log-dir inside the repository (not ignored) holds snapshots: they are the jobs'
    record, not code, and are never copied into a new one."""
    script = repo / "src" / "train.py"
    render(render_args, script, repo / "old-logs")
    render(render_args, script, tmp_path / "logs")
    [snap] = snapshot_dirs(tmp_path / "logs")
    assert not any(name.startswith("old-logs/snapshots/") for name in files_in(snap)), files_in(snap)


def test_a_sweeps_runs_run_one_snapshot(render_args, repo, tmp_path):
    logs = tmp_path / "logs"
    result = render(render_args, repo / "src" / "train.py", logs, "--sweep", "learning_rate=1e-4,3e-4,1e-3",
                    "--", "--output_dir", str(tmp_path / "runs"), output=str(tmp_path / "sweep.sh"))
    assert result.exit_code == 0, result.output
    [snap] = snapshot_dirs(logs)
    assert target_of((tmp_path / "sweep.sh").read_text()) == str(snap / "src" / "train.py")  # every run's TARGET
