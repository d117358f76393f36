"""torchjob.report's Reporter against a real endpoint (the local one, in this process)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from torchjob.local.supervisor.progress import LocalEndpoint
from torchjob.progress import server
from torchjob.report import Reporter


@pytest.fixture
def endpoint() -> LocalEndpoint:
    ep = LocalEndpoint("j", lambda *a: None).start()
    yield ep  # type: ignore[misc]
    ep.stop()


def reporter(ep: LocalEndpoint, tmp_path: Path, interval: float = 0.05) -> Reporter:
    env = ep.env("master-0", 0, tmp_path)
    return Reporter(url=env["KUBEFLOW_TRAINER_SERVER_URL"], token_file=env["KUBEFLOW_TRAINER_SERVER_TOKEN"],
                    interval=interval)


def step_of(ep: LocalEndpoint) -> int | None:
    p = ep.reports.progress()
    return p.step if p is not None else None


def wait(pred, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_only_new_values_are_sent_so_a_hang_goes_quiet(endpoint: LocalEndpoint, tmp_path: Path) -> None:
    r = reporter(endpoint, tmp_path)
    for step in range(1, 101):
        r.report(step=step, total=100, loss=1 / step)
    wait(lambda: step_of(endpoint) == 100)
    time.sleep(5 * r.interval)  # the last send's answer is read (the server records before it answers)
    sent = r.sent
    assert 1 <= sent <= 100
    # the loop stops calling report (it hangs): nothing more goes out, however long
    version = endpoint.reports.version
    time.sleep(10 * r.interval)
    assert r.sent == sent and endpoint.reports.version == version
    r.report(step=101, total=100)
    wait(lambda: endpoint.reports.version > version)


def test_a_dropped_kept_alive_connection_is_made_again(endpoint: LocalEndpoint, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server._Handler, "timeout", 0.3)  # the server drops idle connections fast
    r = reporter(endpoint, tmp_path)
    assert r._send({"step": 1, "metrics": {}}, 5.0) == 0.0
    time.sleep(0.8)
    assert r._send({"step": 2, "metrics": {}}, 5.0) == 0.0
    assert (r.sent, r.refused) == (2, 0)


def test_no_endpoint_no_thread_and_a_refusal_is_told_once(endpoint: LocalEndpoint, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    quiet = Reporter(url="")
    quiet.report(step=1)
    assert quiet._thread is None
    forged = tmp_path / "forged"
    forged.write_text("tj1.master-0.0.deadbeef")
    r = Reporter(url=reporter(endpoint, tmp_path).url, token_file=str(forged))
    for _ in range(3):
        r._send({"step": 1, "metrics": {}}, 5.0)
    assert (r.sent, r.refused) == (0, 3)
    assert capsys.readouterr().err.count("torchjob.report: a progress report was not taken (403") == 1



def test_the_helper_is_one_file_of_the_standard_library_that_works_copied_alone(endpoint: LocalEndpoint,
                                                                                 tmp_path: Path) -> None:
    import ast
    import shutil
    import subprocess
    import sys

    import torchjob.report

    source = Path(torchjob.report.__file__)
    tree = ast.parse(source.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"__future__"} <= sys.stdlib_module_names, imported - sys.stdlib_module_names
    # copied into an "image" without torchjob: -I -S, no site-packages, no PYTHONPATH, no user site
    image = tmp_path / "image"
    image.mkdir()
    shutil.copy(source, image / "report.py")
    env = {"PATH": "/usr/bin:/bin", **endpoint.env("worker-0", 0, tmp_path)}
    script = ("import sys; sys.path.insert(0, sys.argv[1]); from report import report\n"
              "import importlib.util; assert importlib.util.find_spec('torchjob') is None\n"
              "for i in range(1, 6): report(step=i, total=5, loss=1 / i)\n")
    subprocess.run([sys.executable, "-I", "-S", "-c", script, str(image)], env=env, check=True, timeout=30)
    wait(lambda: step_of(endpoint) == 5)  # the last values, sent at exit
    p = endpoint.reports.progress()
    assert p is not None and p.reporter == "worker-0" and p.percent == 100.0


def test_values_refused_by_the_rate_limit_go_again_and_the_last_one_at_exit(endpoint: LocalEndpoint,
                                                                            tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from torchjob.progress import book

    monkeypatch.setattr(book, "FAIR_S", 60.0)  # no once-a-second pass: the job's bucket alone decides
    endpoint.reports.limit = book.RateLimit(rate=1.0, burst=1)
    r = reporter(endpoint, tmp_path)
    r.report(step=1, total=10)
    wait(lambda: step_of(endpoint) == 1)
    r.report(step=2, total=10)  # refused (429, Retry-After 1): sent again after the wait, not dropped
    wait(lambda: step_of(endpoint) == 2, timeout=5)
    assert r.refused >= 1
    refused = r.refused
    r._wake.clear()
    r._pending.append((10, 10, {}))  # the last values, as report() keeps them, left for the exit's flush
    r.flush()  # the bucket is empty: the flush waits the second it is told, once, and sends them
    assert step_of(endpoint) == 10 and r.refused == refused + 1


def test_a_torchrun_worker_names_its_rank_and_a_plain_replica_does_not(endpoint: LocalEndpoint, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int | None] = []
    record = endpoint.reports.record
    monkeypatch.setattr(endpoint.reports, "record", lambda rep, att, report, at: (seen.append(report.rank),
                                                                                  record(rep, att, report, at))[1])
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun's worker: two of them on this node
    r = reporter(endpoint, tmp_path)
    r.report(step=1, total=10)
    wait(lambda: seen == [3])
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # a plain replica is one rank: named by its replica
    r.report(step=2, total=10)
    wait(lambda: seen == [3, None])
