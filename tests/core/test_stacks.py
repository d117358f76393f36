"""core.stacks: faulthandler's dumps read, grouped by identical stack and told (issue 42). The dumps
here are as CPython 3.11's faulthandler writes them (copied from a real run of
tests/programs/hang_collective.py, paths shortened), after the header torchjob's hook writes."""

from __future__ import annotations

from torchjob.core.diagnosis.stacks import (
    Frame,
    ProcessStacks,
    Stacks,
    answer_in,
    as_data,
    differs,
    full,
    group,
    parse,
    ranges,
    short,
    text,
)

SITE = "/venv/lib/python3.11/site-packages"
MAIN = "0x00007f3ee920db80"


def dump(rank: int, pid: int, user: list[tuple[int, str]], lib: str, extra_thread: bool = False) -> str:
    out = [f"# torchjob stacks: rank={rank} pid={pid} main={MAIN}"]
    if extra_thread:
        out += ["Thread 0x00007f3ee0bff640 (most recent call first):",
                '  File "/usr/lib/python3.11/threading.py", line 324 in wait',
                '  File "/work/train.py", line 12 in heartbeat', ""]
    out += [f"Current thread {MAIN} (most recent call first):",
            f'  File "{SITE}/torch/distributed/distributed_c10d.py", line 4181 in {lib}',
            f'  File "{SITE}/torch/distributed/c10d_logger.py", line 83 in wrapper']
    out += [f'  File "/work/train.py", line {n} in {f}' for n, f in user]
    return "\n".join(out) + "\n"


def procs(*dumps: tuple[str, str]) -> Stacks:
    out = []
    for replica, d in dumps:
        rank, pid, threads = parse(d)
        assert pid is not None
        out.append(ProcessStacks(replica, rank, pid, tuple(threads)))
    return Stacks(out, library_dirs=("/usr/lib/python3.11",))


WAITING = [(41, "step"), (60, "main"), (63, "<module>")]
RECEIVING = [(33, "recv_from"), (58, "main"), (63, "<module>")]


def test_a_dump_is_read_with_its_rank_pid_and_main_thread() -> None:
    rank, pid, threads = parse(dump(3, 4242, RECEIVING, "recv", extra_thread=True))
    assert (rank, pid) == (3, 4242)
    assert [t.main for t in threads] == [False, True]
    assert threads[1].frames[0] == Frame(f"{SITE}/torch/distributed/distributed_c10d.py", 4181, "recv")
    assert threads[1].frames[2] == Frame("/work/train.py", 33, "recv_from")


def test_a_second_dump_in_the_same_text_replaces_the_first() -> None:
    first = dump(0, 1, [(10, "load"), (60, "main")], "broadcast")
    second = dump(0, 1, WAITING, "all_reduce").split("\n", 1)[1]  # the header is written once
    _, _, threads = parse(first + second)
    assert len(threads) == 1 and threads[0].frames[2].func == "step"


def test_frames_unknown_and_odd_lines_are_kept_or_skipped() -> None:
    d = (f"# torchjob stacks: rank=0 pid=7 main={MAIN}\nCurrent thread {MAIN} (most recent call first):\n"
         '  File "/work/t.py", line ??? in <lambda>\n  ...\n  <no Python frame>\n')
    _, _, threads = parse(d)
    assert threads[0].frames == (Frame("/work/t.py", None, "<lambda>"),)


def test_identical_stacks_are_grouped_with_their_ranks_named() -> None:
    st = procs(*(("master-0", dump(r, 100 + r, WAITING, "all_reduce")) for r in (0, 1, 2)),
               ("worker-0", dump(3, 200, RECEIVING, "recv")))
    assert [g.ranks for g in group(st)] == [(0, 1, 2), (3,)]
    lines = text(st).splitlines()
    assert lines[0] == ("ranks 0-2: all_reduce (torch/distributed/distributed_c10d.py:4181) [2 library frames] "
                        "<- step (train.py:41) <- main (train.py:60) <- <module> (train.py:63)")
    assert lines[1].startswith("rank 3: recv (torch/distributed/distributed_c10d.py:4181) [2 library frames] "
                               "<- recv_from (train.py:33)")
    # rank 3, alone in recv while the others wait for it in all_reduce, is named as the one that differs
    assert lines[2] == "rank 3 differs from the rest (ranks 0-2): look there first"
    assert short(st) == ("ranks 0-2 in step (train.py:41); rank 3 in recv_from (train.py:33); "
                         "rank 3 differs from the rest (ranks 0-2)")
    assert as_data(st)["differs"] == [[3]]


def test_no_rank_differs_without_a_clear_rest() -> None:
    def ranks(*stacks: list[tuple[int, str]]) -> Stacks:
        return procs(*((f"worker-{r}", dump(r, 100 + r, s, "all_reduce")) for r, s in enumerate(stacks)))

    one_each = ranks(WAITING, RECEIVING)  # two ranks, two stacks: neither is the rest
    half = ranks(WAITING, WAITING, RECEIVING, RECEIVING)  # two against two
    same = ranks(WAITING, WAITING, WAITING)
    for st in (one_each, half, same):
        assert differs(group(st)) is None and as_data(st)["differs"] == [] and "differ" not in text(st)
    two_odd = ranks(WAITING, RECEIVING, WAITING, WAITING, [(5, "load")])
    assert differs(group(two_odd)) == "rank 1 and rank 4 differ from the rest (ranks 0,2-3)"
    assert as_data(two_odd)["differs"] == [[1], [4]]


def test_other_threads_are_counted_and_shown_on_request() -> None:
    st = procs(("master-0", dump(0, 1, WAITING, "all_reduce", extra_thread=True)),
               ("master-0", dump(1, 2, WAITING, "all_reduce", extra_thread=True)))
    assert "(2 other thread(s) not shown: --all-threads)" in text(st)
    groups = group(st, all_threads=True)
    assert [(g.ranks, g.main, g.threads) for g in groups] == [((0, 1), True, 2), ((0, 1), False, 2)]
    assert "ranks 0-1 [thread, 2x]: wait (threading.py:324) <- heartbeat (train.py:12)" in text(st, True)


def test_the_standard_library_is_not_the_users_code() -> None:
    st = procs(("master-0", dump(0, 1, WAITING, "all_reduce", extra_thread=True)))
    data = as_data(st)
    thread = data["groups"][1]["frames"]
    assert [f["user"] for f in thread] == [False, True]  # threading.py is the library's, train.py the user's
    assert data["groups"][0]["frames"][2] == {"file": "/work/train.py", "line": 41, "function": "step", "user": True}


def test_the_full_form_marks_library_frames_and_names_who_did_not_answer() -> None:
    st = procs(("master-0", dump(0, 1, WAITING, "all_reduce")))
    st.missing.append("worker-0 pid 9")
    body = full(st)
    assert body.startswith("rank 0 (main thread), most recent call first:\n"
                           f"  . all_reduce ({SITE}/torch/distributed/distributed_c10d.py:4181)\n")
    assert "    step (/work/train.py:41)\n" in body
    assert body.endswith("worker-0 pid 9: no stacks (it did not answer)\n")
    assert short(st).endswith("; worker-0 pid 9: no answer")


def test_no_process_and_a_process_without_a_rank() -> None:
    assert text(Stacks([])).startswith("no process answered (is the job running?)")
    d = dump(0, 5, WAITING, "all_reduce").replace("rank=0", "rank=-1")
    rank, _, threads = parse(d)
    assert rank == -1
    st = Stacks([ProcessStacks("master-0", None, 5, tuple(threads))])
    assert text(st).startswith("master-0 (pid 5): all_reduce")


def test_a_warm_spares_launcher_is_not_the_users_code() -> None:
    launcher = Frame("/work/src/torchjob/local/spares/launcher/torchjob_spare.py", 193, "_run_script")
    assert not launcher.user() and Frame("/work/sleeper.py", 3, "idle").user()


def test_ranges() -> None:
    assert ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert ranges([]) == ""


def test_a_stalls_message_carries_where_the_ranks_were() -> None:
    from dataclasses import replace

    from tests.core.sim import at, running
    from tests.jobs import make_job
    from torchjob.core.round.reconcile import World

    job = make_job("j", workers=1, run_policy={"progressDeadlineSeconds": 5})
    d, w = running(job)
    obs = {n: replace(o, last_report=at(0)) for n, o in w.replicas.items()}
    where = "rank 0 in step (train.py:41); rank 1 in recv_from (train.py:33)"
    plan = d(World(replicas=obs, stacks=where), 5)
    failure = plan.status.failure
    assert failure is not None and failure.reason == "ProgressDeadlineExceeded"
    assert failure.message == ("master-0, worker-0 sent no progress report for 5s (runPolicy.progressDeadlineSeconds); "
                               f"where the ranks were: {where}: the job is stalled")
    stalled = [e.message for e in plan.events if e.reason == "Stalled"]
    assert stalled == [failure.message.removesuffix(": the job is stalled")]


def test_a_pods_answer_is_read_from_its_log() -> None:
    """What kube/inpod/torchjob_stacks.py writes to a container's log: each dump between begin and end lines
    (another line of the pod's may come between them), then the line that says the pod answered."""
    log = ["epoch 3", "torchjob-stacks: begin request=old", *dump(0, 1, RECEIVING, "recv").splitlines(),
           "torchjob-stacks: end request=old", "torchjob-stacks: answered request=old processes=1 missing= stdlib=/x",
           "torchjob-stacks: begin request=r2", *dump(0, 1, WAITING, "all_reduce").splitlines(),
           "torchjob-stacks: end request=r2", "torchjob-stacks: begin request=r2",
           *dump(1, 2, WAITING, "all_reduce").splitlines()[:3], "[rank1]: a line of the user's",
           *dump(1, 2, WAITING, "all_reduce").splitlines()[3:], "torchjob-stacks: end request=r2"]
    assert answer_in(log, "r2") is None  # not answered whole yet
    log.append("torchjob-stacks: answered request=r2 processes=2 missing=31,32 stdlib=/usr/lib/python3.11")
    got = answer_in(log, "r2")
    assert got is not None and got.missing == [31, 32] and got.stdlib == "/usr/lib/python3.11"
    assert [(rank, pid) for rank, pid, _ in got.processes] == [(0, 1), (1, 2)]
    assert all(threads[0].frames[2].func == "step" and len(threads[0].frames) == 5 for _, _, threads in got.processes)
