"""The hang watch and the failure bookkeeping without a cluster: a real faulthandler dump of a
real process parsed and summarized, stuck-rank detection, the node blamed for a crash from
torchrun's and srun's own words, exclusion and whether a layout still fits."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from slurmgen import contract
from slurmgen.job import hangs, stacks
from slurmgen.job import retry
from slurmgen.job.record import Failure

REPO = Path(__file__).resolve().parents[1]


def test_a_real_dump_names_where_a_blocked_process_is(tmp_path):
    """train.heartbeat's handler, a process blocked inside a function of its own: the dump taken
    by the signal names that function, called from the program's own code."""
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import os, signal, sys, threading, time
        from train import heartbeat
        heartbeat.install()
        signal.signal(signal.SIGUSR1, lambda *_: print("their own USR1", flush=True))  # Lightning's, after ours
        heartbeat.beat(7)
        def next_batch():
            print("ready", flush=True)
            threading.Event().wait()
        next_batch()
    """))
    env = dict(os.environ, SLURMGEN_HEARTBEAT_DIR=str(tmp_path / "hb"), RANK="3", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, str(prog)], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert proc.stdout.readline().strip() == "ready"
        beats = hangs.read_beats(tmp_path / "hb")
        assert beats[3].step == 7 and beats[3].pid == proc.pid
        time.sleep(0.5)  # from print() into the wait
        os.kill(proc.pid, signal.SIGRTMIN + contract.DUMP_SIGNAL_RT)  # the hang watch's question, not USR1
        stack = tmp_path / "hb" / "stack-3"
        for _ in range(50):
            if "next_batch" in stack.read_text():
                break
            time.sleep(0.1)
        frames = stacks.main_thread(stacks.parse_threads(stack.read_text()))
    finally:
        proc.kill()
    place = stacks.where(frames)
    assert frames[0].func == "wait" and frames[-1].func == "<module>", frames
    assert place.startswith("wait (") and re.search(r", called from next_batch \(\S*prog\.py:9\)$", place), place


def views(*specs):
    """RankViews; a place in torch counts as waiting in a collective, as in_collective finds it."""
    return [stacks.RankView(rank, host, step, state, place, "torch/" in place)
            for rank, host, step, state, place in specs]


def test_the_odd_rank_out_is_named_and_its_node_blamed():
    backward = "_engine_run_backward (torch/autograd/graph.py:829), called from _main (train/ddp_loop.py:185)"
    data = "batches (train/data.py:84), called from _main (train/ddp_loop.py:181)"
    lines, suspect = stacks.summarize(views(
        (0, "node1", 13, "S", backward), (1, "node2", 13, "S", backward), (2, "node3", 13, "S", backward),
        (3, "node3", 13, "S", data), (4, "node4", 13, "S", backward), (5, "node4", 13, "S", backward)))
    assert lines == [f"rank 3 on node3 (step 13) is in {data}",
                     f"ranks 0-2,4-5 on node[1-4] (step 13) wait in {backward}"]
    assert suspect == "node3"


def test_ranks_waiting_in_different_collectives_wait_for_the_one_that_is_not():
    broadcast = "_distributed_broadcast_coalesced (torch/nn/parallel/distributed.py:2000)"
    backward = "_engine_run_backward (torch/autograd/graph.py:829)"
    data = "batches (train/data.py:84)"
    lines, suspect = stacks.summarize(views(
        (0, "node1", 13, "S", backward), (1, "node2", 13, "S", broadcast), (2, "node3", 13, "S", broadcast),
        (3, "node3", 13, "S", data), (4, "node4", 13, "S", broadcast), (5, "node4", 13, "S", broadcast)))
    assert lines == [f"rank 3 on node3 (step 13) is in {data}",
                     f"ranks 0-2,4-5 on node[1-4] (step 13) wait in {broadcast} (1 elsewhere)"]
    assert suspect == "node3"


def test_a_stopped_rank_is_odd_even_where_the_others_are():
    same = "all_reduce (torch/distributed/distributed_c10d.py:2806)"
    lines, suspect = stacks.summarize(views((0, "node1", 5, "S", same), (1, "node2", 5, "T", same)))
    assert lines[0] == f"rank 1 on node2 (step 5, stopped by a signal (SIGSTOP?)) is in {same}"
    assert suspect == "node2"


def test_a_stopped_rank_is_blamed_not_its_peer_still_in_backward():
    """Seen in CI: rank 3 stopped (SIGSTOP) mid-backward, rank 2 on another node caught in its own
    backward (DDP's all_reduce waits inside it for rank 3), the rest in the next all_reduce. Both
    are odd ones out and both are named; only the stopped one's node is to blame."""
    backward = "_engine_run_backward (torch/autograd/graph.py:979), called from _main (train/ddp_loop.py:190)"
    reduce = "all_reduce (torch/distributed/distributed_c10d.py:3252), called from _main (train/ddp_loop.py:199)"
    lines, suspect = stacks.summarize(views(
        (0, "node1", 6, "S", reduce), (1, "node3", 6, "S", reduce), (2, "node3", 6, "S", backward),
        (3, "node4", 6, "T", backward), (4, "node4", 6, "S", reduce), (5, "node5", 6, "S", reduce)))
    assert lines[:2] == [f"rank 2 on node3 (step 6) is in {backward}",
                         f"rank 3 on node4 (step 6, stopped by a signal (SIGSTOP?)) is in {backward}"]
    assert suspect == "node4"


def test_ranks_that_agree_blame_no_node():
    lines, suspect = stacks.summarize(views((0, "node1", 5, "S", "x (a.py:1)"), (1, "node2", 5, "S", "x (a.py:1)")))
    assert lines == ["ranks 0-1 on node[1-2] (step 5) are all in x (a.py:1)"] and suspect is None


def test_stuck_ranks_count_from_the_first_beat():
    beat = lambda r, t: hangs.Beat(r, 1, t, "n", 1)
    assert hangs.stuck_ranks({}, 4, 1000.0, 10) == []  # loading: nothing counts yet
    beats = {0: beat(0, 100.0), 1: beat(1, 95.0)}
    assert hangs.stuck_ranks(beats, 3, 104.0, 10) == []
    assert hangs.stuck_ranks(beats, 3, 105.0, 10) == [1, 2]  # rank 2 never beat since 95
    assert stacks.ranges([0, 1, 2, 4, 5, 9]) == "0-2,4-5,9"


def test_ranks_that_ended_their_script_are_no_hang_and_one_that_did_not_is(tmp_path, monkeypatch):
    """A finished run whose launcher winds down past the timeout (torchrun's exit barrier) is no hang:
    each rank left its end mark. A rank without one among them is still named (CI run 37: a hang
    report for a plain loop that had finished)."""
    folder = tmp_path / "hb"
    folder.mkdir()
    for rank in range(3):
        (folder / f"rank-{rank}").write_text(f"{rank} 38 1000.000 node{rank + 1} 1{rank}\n")
        (folder / f"ended-{rank}").write_text("")
    monkeypatch.setattr(hangs, "ask_for_stacks", lambda *args, **kwargs: None)  # no srun: the stacks are not the point
    report, said = tmp_path / "hang-report.txt", []
    look = lambda: hangs.check(folder, 10, 3, report, [("-", "node[1-3]")], "7", say=said.append)  # noqa: E731
    assert look() is None and not report.exists() and said == []
    (folder / "ended-1").unlink()  # rank 1 never reached its end: it is stuck, the others are not
    found = look()
    assert found is not None and report.exists()
    assert said[0].startswith("slurmgen: hang: no progress for "), said


def test_a_save_within_its_allowance_is_no_hang_and_one_past_it_is(tmp_path):
    """Rank 0 writes a checkpoint (its beat says "save 600") while rank 1 waits for it, its beat
    older than the hang timeout: nobody is stuck until the save outlasts its allowance."""
    folder = tmp_path / "hb"
    folder.mkdir()
    (folder / "rank-0").write_text("0 20 1000.000 node1 11 save 600\n")
    (folder / "rank-1").write_text("1 20 1000.500 node2 12\n")
    beats = hangs.read_beats(folder)
    assert beats[0].save_allowance == 600 and beats[1].save_allowance == 0
    assert hangs.stuck_ranks(beats, 2, 1000.0 + 300, 10) == []
    assert hangs.stuck_ranks(beats, 2, 1000.0 + 601, 10) == [0, 1]
    # After the save, the usual timeout again.
    (folder / "rank-0").write_text("0 20 1300.000 node1 11\n")
    assert hangs.stuck_ranks(hangs.read_beats(folder), 2, 1311.0, 10) == [0, 1]


ROOT = """Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_10:30:0{sec}
  host      : {host}
  rank      : {rank} (local_rank: 0)
  exitcode  : {code} (pid: 12)
"""


def test_the_crashed_node_is_where_the_failure_began():
    log = ("slurmgen: job 9 (restart 0 ...)\n" + ROOT.format(sec=1, host="node3", rank=2, code=1)
           + "slurmgen: job 9 (restart 0 ...)\n" + ROOT.format(sec=2, host="node1", rank=0, code=1)
           + ROOT.format(sec=2, host="node3", rank=3, code=-9))
    assert retry.crashed_node(log) == "node3"  # the last run only; a signal, not the others' status 1
    tie = "slurmgen: job 9\n" + ROOT.format(sec=1, host="node1", rank=0, code=1) + ROOT.format(sec=1, host="node2", rank=1, code=1)
    assert retry.crashed_node(tie) == ""
    srun = "slurmgen: job 9\nsrun: error: node1: task 0: Killed\nsrun: error: node4: task 5: Exited with exit code 13\n"
    assert retry.crashed_node(srun) == "node4"


def test_exclusion_and_whether_the_layout_still_fits():
    crash = lambda node: Failure("crash", node)
    assert retry.to_exclude([crash("node3")], []) == []
    assert retry.to_exclude([crash("node3"), Failure("hang", "node3")], []) == ["node3"]
    assert retry.to_exclude([Failure("node", "node2")], ["node7"]) == ["node2", "node7"]
    assert retry.to_exclude([Failure("preflight", "node4")], []) == ["node4"]  # node-level: at once
    one_one_two_two = [(1, 2), (2, 2)]
    assert retry.layout_fits(one_one_two_two, [1, 1, 2, 2])
    assert retry.layout_fits(one_one_two_two, [2, 2, 2, 2])  # a 2-GPU node can host a 1-GPU part
    assert not retry.layout_fits(one_one_two_two, [1, 1, 1, 2, 2, 4][:4] + [1])
    assert not retry.layout_fits(one_one_two_two, [1, 1, 2])


def test_watch_shows_hang_and_retry_lines_as_they_come(tmp_path):
    from slurmgen.observe.watch import LogEvents

    log = tmp_path / "job.out"
    log.write_text("slurmgen: job 7 (restart 0 of at most 3)\nslurmgen-train: step 1\n")
    events = LogEvents()
    records = [{"StdOut": str(log), "StdErr": str(log)}]
    assert events.new(records) == []
    with log.open("a") as fh:
        fh.write("slurmgen: hang: no progress for 21 s (--hang-timeout 20); report: r.txt\n"
                 "slurmgen:   rank 3 on node3 (step 13) is in batches (train/data.py:84)\n"
                 "slurmgen: failure 1 of at most 2 (hang on node3): requeueing job 7 to resume\n"
                 "slurmgen: half a li")
    assert events.new(records) == [
        "slurmgen: hang: no progress for 21 s (--hang-timeout 20); report: r.txt",
        "slurmgen:   rank 3 on node3 (step 13) is in batches (train/data.py:84)",
        "slurmgen: failure 1 of at most 2 (hang on node3): requeueing job 7 to resume"]
    with log.open("a") as fh:
        fh.write("ne\nslurmgen: the last run of job 7 ended when node3 became DOWN+NOT_RESPONDING: failure 2\n")
    assert events.new(records) == ["slurmgen: the last run of job 7 ended when node3 became DOWN+NOT_RESPONDING: failure 2"]
    with log.open("a") as fh:  # slow nodes (the network check, the straggler watch), not their table
        fh.write("slurmgen: network check of 4 node(s) (gloo) took 7.5 s:\n  node   rank  send GB/s\n"
                 "slurmgen: slow link: node3: 0.01 GB/s sending against a median of 0.78 GB/s (below 0.5 of it)\n"
                 "slurmgen: straggler: rank 2 on node3: 2.5x the median compute time per step over the last 50 steps\n")
    assert events.new(records) == [
        "slurmgen: slow link: node3: 0.01 GB/s sending against a median of 0.78 GB/s (below 0.5 of it)",
        "slurmgen: straggler: rank 2 on node3: 2.5x the median compute time per step over the last 50 steps"]


def test_the_report_of_a_thousand_ranks_is_a_few_lines_and_names_the_odd_ones():
    """1,024 ranks on 128 nodes (8 each), rank 37 stopped in its data loader: the report has one
    table line and one stack per kind of rank, the odd one first, whatever the thread ids."""
    reduce = "all_reduce (torch/distributed/distributed_c10d.py:3252)"
    data = "batches (train/data.py:84)"
    vs = views(*[(r, f"node{r // 8 + 1}", 40, "T" if r == 37 else "S", data if r == 37 else reduce)
                 for r in range(1024)])
    stack = 'Thread 0x{:012x} (most recent call first):\n  File "/x/{}.py", line 9 in {}\n'
    texts = {v.rank: stack.format(0x7f0000000000 + v.rank, "data" if v.rank == 37 else "c10d",
                                  v.place.split()[0]) for v in vs}
    lines, suspect = stacks.summarize(vs)
    report = hangs.report_text("9", 130, 120, vs, texts, lines, suspect)
    table = report.split("ranks: ")[1].split("\n---")[0].strip().splitlines()
    assert table[2].split()[:5] == ["rank", "37", "node5", "40", "T"] and data in table[2], table
    assert table[3].split()[:5] == ["ranks", "0-36,38-1023", "node[1-128]", "40", "S"], table
    assert len(table) == 4, table
    sections = re.findall(r"^--- (.*) ---$", report, re.M)
    assert sections == ["rank 37 on node5", "ranks 0-36,38-1023 on node[1-128] (one stack for all 1023)"]
    assert "data.py" in report.split("--- rank 37 on node5 ---")[1].split("---")[0]
    assert len(report) < 2000 and "suspect node: node5" in report, report


def test_a_stopped_rank_with_the_others_stack_still_has_its_own_section():
    """Rank 3 stopped (SIGSTOP) inside the same all_reduce the others wait in: its stack reads like
    theirs, but the report shows it on its own, as the summary names it (a CI run's report once
    hid it in "ranks 0-5 (one stack for all 6)")."""
    reduce = "all_reduce (torch/distributed/distributed_c10d.py:3252)"
    vs = views(*[(r, f"node{r // 2 + 1}", 6, "T" if r == 3 else "S", reduce) for r in range(6)])
    texts = {v.rank: f'Thread 0x{v.rank:012x} (most recent call first):\n  File "/x/c10d.py", line 9 in all_reduce\n'
             for v in vs}
    lines, suspect = stacks.summarize(vs)
    report = hangs.report_text("9", 13, 10, vs, texts, lines, suspect)
    sections = re.findall(r"^--- (.*) ---$", report, re.M)
    assert sections == ["rank 3 on node2", "ranks 0-2,4-5 on node[1-3] (one stack for all 5)"], report
    assert suspect == "node2"
