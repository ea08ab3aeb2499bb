"""`slurmgen watch` following a sweep, without Slurm: recorded `scontrol show job -o` text for a job
array (running tasks and a record of grouped pending tasks) and for a sweep's het jobs, temporary
job logs with the batch script's sweep line, temporary progress.jsonl files."""
import io
import json

import pytest
from click.testing import CliRunner

from slurmgen.observe import watch
from slurmgen.observe import watch_sweep as w
from slurmgen.site.jobs import parse_records
from slurmgen.cli import cli

# Slurm 25.11's `scontrol show job -o 1201` for `#SBATCH --array=0-3%2`: tasks 0 and 1 run (jobs 1202,
# 1203), tasks 2 and 3 wait in the array's own record. StdErr is empty: it is the same file as StdOut.
ARRAY = """\
JobId=1202 ArrayJobId=1201 ArrayTaskId=0 ArrayTaskThrottle=2 JobName=sweep UserId=me(1000) GroupId=me(1000) MCS_label=N/A Priority=1 Nice=0 Account=(null) QOS=(null) JobState={s0} Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:41 TimeLimit=01:00:00 Partition=gpu NodeList=node1 BatchHost=node1 NumNodes=1 NumCPUs=4 NumTasks=1 TRES=cpu=4,node=1,billing=4,gres/gpu=1 Command={wd}/sweep.sh WorkDir={wd} StdErr= StdIn=/dev/null StdOut={wd}/logs/sweep-1202.out
JobId=1203 ArrayJobId=1201 ArrayTaskId=1 ArrayTaskThrottle=2 JobName=sweep UserId=me(1000) GroupId=me(1000) MCS_label=N/A Priority=1 Nice=0 Account=(null) QOS=(null) JobState={s1} Reason=None Dependency=(null) Requeue=1 Restarts={r1} BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:41 TimeLimit=01:00:00 Partition=gpu NodeList=node2 BatchHost=node2 NumNodes=1 NumCPUs=4 NumTasks=1 TRES=cpu=4,node=1,billing=4,gres/gpu=1 Command={wd}/sweep.sh WorkDir={wd} StdErr= StdIn=/dev/null StdOut={wd}/logs/sweep-1203.out
JobId=1201 ArrayJobId=1201 ArrayTaskId=2-3%2 ArrayTaskThrottle=2 JobName=sweep UserId=me(1000) GroupId=me(1000) MCS_label=N/A Priority=1 Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=JobArrayTaskLimit Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=01:00:00 Partition=gpu NodeList= NumNodes=1 NumCPUs=4 NumTasks=1 TRES=cpu=4,node=1,billing=4,gres/gpu=1 Command={wd}/sweep.sh WorkDir={wd} StdErr= StdIn=/dev/null StdOut={wd}/logs/sweep-1201.out
"""

# Two tasks done, the last two running: no grouped record any more (task 3 took the array's own id).
ARRAY_LATER = """\
JobId=1202 ArrayJobId=1201 ArrayTaskId=0 JobName=sweep JobState=COMPLETED Restarts=0 WorkDir={wd} StdErr= StdOut={wd}/logs/sweep-1202.out
JobId=1203 ArrayJobId=1201 ArrayTaskId=1 JobName=sweep JobState={s1} Restarts=0 WorkDir={wd} StdErr= StdOut={wd}/logs/sweep-1203.out
JobId=1204 ArrayJobId=1201 ArrayTaskId=2 JobName=sweep JobState={s2} Restarts=0 WorkDir={wd} StdErr= StdOut={wd}/logs/sweep-1204.out
JobId=1201 ArrayJobId=1201 ArrayTaskId=3 JobName=sweep JobState={s3} Restarts=0 WorkDir={wd} StdErr= StdOut={wd}/logs/sweep-1201.out
"""


def het(job, state0, state1, wd, reason="None"):
    """`scontrol show job -o JOB` for one run of an uneven sweep: a het job of two components."""
    return "".join(
        f"JobId={job + offset} HetJobId={job} HetJobIdSet={job}-{job + 1} HetJobOffset={offset} "
        f"JobName=sweep JobState={state} Reason={reason} Dependency=(null) Restarts=0 "
        f"NodeList=node{offset + 1} WorkDir={wd} StdErr= StdIn=/dev/null StdOut={wd}/logs/sweep-{job}.out\n"
        for offset, state in enumerate([state0, state1]))


def sweep_line(run, values, directory):
    return f"slurmgen: sweep run {run}: {json.dumps(values)} -> {directory}\n"


def write_log(path, *lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("slurmgen: job starting\n" + "".join(lines) + "slurmgen-train: step 1\n")


def write_progress(run_dir, *steps, max_steps=30):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "progress.jsonl").write_text("".join(
        json.dumps({"step": step, "max_steps": max_steps, "loss": loss}) + "\n" for step, loss in steps))


def runs_after(polls):
    """Feed (job_id, records) polls to a Sweep, read the sweep lines as watch_sweep does."""
    sweep, logs = w.Sweep(), w.SweepLogs()
    for job_id, text in polls:
        sweep.update(job_id, parse_records(text))
        for run in sweep.runs():
            if run.values is None and run.log is not None and (found := logs.find(run.log)):
                w.apply_sweep_line(run, found)
    return sweep.runs()


# ---- pure parts ----

@pytest.mark.parametrize("spec, tasks", [
    ("2", [2]), ("2-3%2", [2, 3]), ("0-3", [0, 1, 2, 3]), ("0,4-8:2%3", [0, 4, 6, 8]),
    ("[5-7]", [5, 6, 7]), ("7-9:5", [7]), ("x", []),
])
def test_array_task_ranges_expand(spec, tasks):
    assert w.expand_array_tasks(spec) == tasks


def test_sweep_line_parses():
    line = 'slurmgen: sweep run 2: {"learning_rate": "1e-2", "seed": "1"} -> /abs/out/learning_rate-1e-2_seed-1'
    assert w.parse_sweep_line(line) == (2, {"learning_rate": "1e-2", "seed": "1"}, "/abs/out/learning_rate-1e-2_seed-1")
    # a directory with spaces and an arrow in a value are kept whole
    assert w.parse_sweep_line('slurmgen: sweep run 10: {"tag": "a -> b"} -> out dir/tag-a') == (
        10, {"tag": "a -> b"}, "out dir/tag-a")
    for other in ["slurmgen: sweep run x: {} -> d", "slurmgen: sweep run 1: {} d",
                  'slurmgen: sweep run 1: {"a": "b"} -> ', "slurmgen: sweep run 1: [1] -> d",
                  "slurmgen: no run 7 in this sweep of 4", 'xslurmgen: sweep run 1: {} -> d']:
        assert w.parse_sweep_line(other) is None, other
    text = "slurmgen: job 5\n" + line + "\nslurmgen-train: step 1\n"
    assert w.find_sweep_line(text)[0] == 2


def test_array_records_become_one_run_per_task(tmp_path):
    text = ARRAY.format(wd=tmp_path, s0="RUNNING", s1="RUNNING", r1="0")
    records = parse_records(text)
    assert w.is_array(records) and not w.is_array(parse_records(het(1300, "RUNNING", "RUNNING", tmp_path)))
    runs = w.runs_from_records("1201", records)
    assert [(r.job, r.task, r.state) for r in runs] == [
        ("1201_0", 0, "RUNNING"), ("1201_1", 1, "RUNNING"), ("1201_2", 2, "PENDING"), ("1201_3", 3, "PENDING")]
    assert runs[0].log == tmp_path / "logs" / "sweep-1202.out"
    assert runs[2].log is None and runs[3].log is None  # a group of pending tasks has no one log
    assert [w.run_line(r) for r in runs] == [
        "run 0  job 1201_0  RUNNING", "run 1  job 1201_1  RUNNING",
        "run 2  job 1201_2  PENDING", "run 3  job 1201_3  PENDING"]


def test_array_runs_read_their_sweep_lines_and_progress(tmp_path):
    values = [{"learning_rate": lr, "seed": "1"} for lr in ("3e-3", "1e-2")]
    dirs = [tmp_path / "out" / f"learning_rate-{v['learning_rate']}_seed-1" for v in values]
    write_log(tmp_path / "logs" / "sweep-1202.out", sweep_line(0, values[0], dirs[0]))
    write_log(tmp_path / "logs" / "sweep-1203.out", sweep_line(1, values[1], dirs[1]))
    write_progress(dirs[0], (4, 4.5), (5, 4.21))
    runs = runs_after([("1201", ARRAY.format(wd=tmp_path, s0="RUNNING", s1="RUNNING", r1="1"))])
    assert runs[0].run_dir == dirs[0] and runs[1].index == 1
    assert [w.run_line(r, w.last_progress(r.run_dir)) for r in runs] == [
        "run 0 learning_rate=3e-3 seed=1  job 1201_0  RUNNING  step 5/30 loss 4.2100",
        "run 1 learning_rate=1e-2 seed=1  job 1201_1  RUNNING restart 1",
        "run 2  job 1201_2  PENDING",
        "run 3  job 1201_3  PENDING"]


def test_a_relative_run_dir_is_relative_to_the_jobs_workdir(tmp_path):
    values = {"learning_rate": "1e-2", "seed": "1"}
    write_log(tmp_path / "logs" / "sweep-1202.out", sweep_line(0, values, "out/learning_rate-1e-2_seed-1"))
    write_progress(tmp_path / "out" / "learning_rate-1e-2_seed-1", (7, 3.5))
    run = runs_after([("1201", ARRAY.format(wd=tmp_path, s0="RUNNING", s1="PENDING", r1="0"))])[0]
    assert run.run_dir == tmp_path / "out" / "learning_rate-1e-2_seed-1"
    assert w.run_line(run, w.last_progress(run.run_dir)) == \
        "run 0 learning_rate=1e-2 seed=1  job 1201_0  RUNNING  step 7/30 loss 3.5000"
    assert w.resolve_run_dir("/abs/out", "/elsewhere") == w.Path("/abs/out")
    assert w.resolve_run_dir("out", "(null)") == w.Path("out")


def test_het_jobs_are_one_run_each(tmp_path):
    wd = tmp_path
    write_log(wd / "logs" / "sweep-1300.out", sweep_line(0, {"lr": "3e-3"}, "runs/lr-3e-3"))
    write_log(wd / "logs" / "sweep-1310.out", sweep_line(1, {"lr": "1e-2"}, "runs/lr-1e-2"))
    write_progress(wd / "runs" / "lr-3e-3", (30, 1.25))
    polls = [("1300", het(1300, "COMPLETED", "COMPLETED", wd)),
             ("1310", het(1310, "FAILED", "RUNNING", wd)),  # the worst component names the run
             ("1320", het(1320, "PENDING", "PENDING", wd, reason="Dependency"))]
    runs = runs_after(polls)
    assert [w.run_line(r, w.last_progress(r.run_dir)) for r in runs] == [
        "run 0 lr=3e-3  job 1300  COMPLETED  step 30/30 loss 1.2500",
        "run 1 lr=1e-2  job 1310  FAILED",
        "run ?  job 1320  PENDING"]  # not started: no log, no run number yet
    assert runs[0].log == wd / "logs" / "sweep-1300.out"  # the leader's (HetJobOffset=0) log
    # its log names it run 2 once it starts; the order follows the run numbers
    write_log(wd / "logs" / "sweep-1320.out", sweep_line(2, {"lr": "3e-2"}, str(wd / "runs" / "lr-3e-2")))
    runs = runs_after(polls[::-1] + [("1320", het(1320, "RUNNING", "RUNNING", wd))])
    assert [r.index for r in runs] == [0, 1, 2] and runs[2].run_dir == wd / "runs" / "lr-3e-2"


def test_a_run_line_without_values_or_full_progress():
    run = w.Run(("job", "9"), "9", "RUNNING")
    assert w.run_line(run) == "run ?  job 9  RUNNING"
    assert w.run_line(run, {"step": 3}) == "run ?  job 9  RUNNING  step 3"
    assert w.run_line(run, {"step": 3, "max_steps": 10, "loss": None}) == "run ?  job 9  RUNNING  step 3/10"
    run.index, run.values = 4, {"seed": 2, "lr": "1e-3"}
    assert w.run_line(run, {"loss": 2}) == "run 4 seed=2 lr=1e-3  job 9  RUNNING  loss 2.0000"


def test_summary_line_and_exit_status():
    states = ["COMPLETED", "FAILED", "COMPLETED", "COMPLETED"]
    assert w.sweep_summary(states) == "sweep: 4 run(s): 3 COMPLETED, 1 FAILED"
    assert w.sweep_summary(["TIMEOUT", "COMPLETED", "CANCELLED"]) == \
        "sweep: 3 run(s): 1 COMPLETED, 1 CANCELLED, 1 TIMEOUT"
    assert w.sweep_summary(["COMPLETED", "RUNNING"], timed_out=True) == \
        "sweep: 2 run(s): 1 COMPLETED, 1 RUNNING (WATCH_TIMEOUT)"
    assert w.sweep_done(states) and not w.sweep_ok(states)
    assert w.sweep_ok(["COMPLETED"] * 4)
    assert not w.sweep_done(["COMPLETED", "PENDING"]) and not w.sweep_ok([])


def test_a_run_scontrol_stops_listing_keeps_its_last_state_and_an_unknown_id_is_unknown(tmp_path):
    sweep = w.Sweep()
    sweep.update("1300", parse_records(het(1300, "RUNNING", "RUNNING", tmp_path)))
    sweep.update("1300", [])  # scontrol did not answer this time
    sweep.update("999", [])
    assert [(r.job, r.state) for r in sweep.runs()] == [("1300", "RUNNING"), ("999", "UNKNOWN")]
    sweep.update("999", parse_records(het(999, "PENDING", "PENDING", tmp_path)))
    assert [(r.job, r.state) for r in sweep.runs()] == [("1300", "RUNNING"), ("999", "PENDING")]


# ---- the loop and the command, scontrol replaced by recorded answers ----

def fake_scontrol(monkeypatch, answers):
    """job_records answers from ANSWERS[job_id], one poll after another (the last one repeats)."""
    calls = {}

    def job_records(job_id):
        calls[job_id] = calls.get(job_id, 0) + 1
        texts = answers[job_id]
        return parse_records(texts[min(calls[job_id] - 1, len(texts) - 1)])

    for module in (w, watch):  # a sweep's loop and one plain job's
        monkeypatch.setattr(module, "job_records", job_records)
    monkeypatch.setattr(w.time, "sleep", lambda seconds: None)
    return calls


def array_sweep(tmp_path):
    """A 4-run array: RUNNING with progress, then all COMPLETED."""
    for task, job in enumerate([1202, 1203, 1204, 1201]):
        values = {"learning_rate": ["3e-3", "1e-2"][task // 2], "seed": str(task % 2 + 1)}
        name = f"learning_rate-{values['learning_rate']}_seed-{values['seed']}"
        write_log(tmp_path / "logs" / f"sweep-{job}.out", sweep_line(task, values, f"out/{name}"))
        write_progress(tmp_path / "out" / name, (5, 4.21))
    return [ARRAY.format(wd=tmp_path, s0="RUNNING", s1="RUNNING", r1="0")] * 3 + [  # 3rd: nothing changed
            ARRAY_LATER.format(wd=tmp_path, s1="COMPLETED", s2="RUNNING", s3="RUNNING"),
            ARRAY_LATER.format(wd=tmp_path, s1="COMPLETED", s2="COMPLETED", s3="COMPLETED")]


def test_watch_command_follows_an_array_from_running_to_completed(tmp_path, monkeypatch):
    calls = fake_scontrol(monkeypatch, {"1201": array_sweep(tmp_path)})
    result = CliRunner().invoke(cli, ["watch", "1201", "--interval", "0"])
    assert result.exit_code == 0, result.output
    blocks = result.output.split("\n\n")
    assert blocks[0].splitlines() == [
        "run 0 learning_rate=3e-3 seed=1  job 1201_0  RUNNING  step 5/30 loss 4.2100",
        "run 1 learning_rate=3e-3 seed=2  job 1201_1  RUNNING  step 5/30 loss 4.2100",
        "run 2  job 1201_2  PENDING",
        "run 3  job 1201_3  PENDING"]
    assert len(blocks) == 3  # the unchanged poll printed nothing
    assert blocks[-1].splitlines() == [
        "run 0 learning_rate=3e-3 seed=1  job 1201_0  COMPLETED  step 5/30 loss 4.2100",
        "run 1 learning_rate=3e-3 seed=2  job 1201_1  COMPLETED  step 5/30 loss 4.2100",
        "run 2 learning_rate=1e-2 seed=1  job 1201_2  COMPLETED  step 5/30 loss 4.2100",
        "run 3 learning_rate=1e-2 seed=2  job 1201_3  COMPLETED  step 5/30 loss 4.2100",
        "sweep: 4 run(s): 4 COMPLETED"]
    assert calls["1201"] == 5  # the look that found an array, then four polls


def test_watch_command_follows_het_jobs_and_fails_when_one_run_failed(tmp_path, monkeypatch):
    wd = tmp_path
    write_log(wd / "logs" / "sweep-1300.out", sweep_line(0, {"lr": "3e-3"}, "runs/a"))
    write_log(wd / "logs" / "sweep-1310.out", sweep_line(1, {"lr": "1e-2"}, "runs/b"))
    fake_scontrol(monkeypatch, {
        "1300": [het(1300, "RUNNING", "RUNNING", wd), het(1300, "COMPLETED", "COMPLETED", wd)],
        "1310": [het(1310, "RUNNING", "RUNNING", wd), het(1310, "FAILED", "COMPLETED", wd)]})
    result = CliRunner().invoke(cli, ["watch", "1300", "1310", "--interval", "0"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[-3:] == [
        "run 0 lr=3e-3  job 1300  COMPLETED", "run 1 lr=1e-2  job 1310  FAILED",
        "sweep: 2 run(s): 1 COMPLETED, 1 FAILED"]


def test_watch_command_timeout_and_output_dir_with_a_sweep(tmp_path, monkeypatch):
    fake_scontrol(monkeypatch, {"1300": [het(1300, "RUNNING", "RUNNING", tmp_path)],
                                "1310": [het(1310, "PENDING", "PENDING", tmp_path)]})
    result = CliRunner().invoke(cli, ["watch", "1300", "1310", "--interval", "0", "--timeout", "0"])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == "sweep: 2 run(s): 1 PENDING, 1 RUNNING (WATCH_TIMEOUT)"
    result = CliRunner().invoke(cli, ["watch", "1300", "1310", "--output-dir", str(tmp_path)])
    assert result.exit_code == 2 and "--output-dir goes with one job" in result.output


def test_watch_command_with_one_plain_job_is_unchanged(tmp_path, monkeypatch):
    write_progress(tmp_path, (30, 1.5), max_steps=30)
    plain = "JobId=77 JobName=train JobState={} Restarts=0 WorkDir=/w StdErr= StdOut=/nonexistent/77.out\n"
    fake_scontrol(monkeypatch, {"77": [plain.format("RUNNING"), plain.format("RUNNING"), plain.format("COMPLETED")]})
    result = CliRunner().invoke(cli, ["watch", "77", "--interval", "0", "--output-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    bar = "#" * 24
    assert result.output.splitlines() == [
        f"[RUNNING   ] step 30/30 [{bar}] loss 1.5000",
        f"[COMPLETED ] step 30/30 [{bar}] loss 1.5000",
        "job 77: COMPLETED"]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_the_block_is_redrawn_in_place(tmp_path, monkeypatch):
    fake_scontrol(monkeypatch, {"1300": [het(1300, "RUNNING", "RUNNING", tmp_path),
                                         het(1300, "COMPLETED", "COMPLETED", tmp_path)],
                                "1310": [het(1310, "PENDING", "PENDING", tmp_path),
                                         het(1310, "COMPLETED", "COMPLETED", tmp_path)]})
    out = Terminal()
    states, timed_out = w.watch_sweep(["1300", "1310"], interval=0, out=out)
    assert (states, timed_out) == (["COMPLETED", "COMPLETED"], False)
    assert out.getvalue() == (
        "\r\x1b[2Krun ?  job 1300  RUNNING\n\r\x1b[2Krun ?  job 1310  PENDING\n"
        "\x1b[2A\r\x1b[2Krun ?  job 1300  COMPLETED\n\r\x1b[2Krun ?  job 1310  COMPLETED\n")


def test_last_progress_reads_only_the_end_of_a_long_run(tmp_path, monkeypatch):
    """watch asks every second: it reads the file's last bytes, whatever the run's length."""
    lines = [json.dumps({"step": s, "max_steps": 200000, "loss": 1.0}) for s in range(1, 200001)]
    (tmp_path / "progress.jsonl").write_text("\n".join(lines) + "\n" + '{"step": 200001, "lo')  # one being written
    read = []
    real_open = open

    def counting_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        real_read = handle.read
        handle.read = lambda *a: read.append(len(data := real_read(*a))) or data
        return handle

    monkeypatch.setattr("builtins.open", counting_open)
    assert watch.last_progress(tmp_path) == {"step": 200000, "max_steps": 200000, "loss": 1.0}
    assert sum(read) <= watch.PROGRESS_TAIL
