"""bench/operator_scale.py --rounds: the order of the phases in each round and the summary over
rounds (each ratio against the peer of its own round; median, least, greatest), a millisecond test
of what the real run (minutes on a cluster of its own) prints at its end."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


@functools.cache  # once: its generic resources are registered with lightkube's registry on import
def bench() -> ModuleType:
    """The bench as a module. It registers generic classes of core kinds (ConfigMap, Event...) with
    lightkube's process-wide registry, which refuses them where an earlier test of this worker loaded
    the typed class of a kind (codecs do): the import gets a registry of its own, and this process's
    is put back after it."""
    from lightkube.core.resource_registry import resource_registry

    saved = dict(resource_registry._registry)
    resource_registry.clear()
    sys.path.insert(0, str(BENCH))  # its sibling modules (scale_floor, scale_measure)
    try:
        spec = importlib.util.spec_from_file_location("bench_operator_scale", BENCH / "operator_scale.py")
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench_operator_scale"] = mod
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))
        resource_registry.clear()
        resource_registry._registry.update(saved)


def result(mod: ModuleType, name: str, jobs_running_s: float | None, cpu_s: float) -> object:
    return mod.Result(name, 40, pods_s=8.0, pods_running_s=9.0, jobs_running_s=jobs_running_s, rss_peak_mb=60.0,
                      cpu_s=cpu_s, cpu_pods_s=cpu_s - 1, jobs=10)


def args() -> argparse.Namespace:
    return argparse.Namespace(jobs=10, nodes=4, workers=4, fast_scheduler=False, kubeconfig=None,
                              job_pods=None, pods=4)


def test_every_other_round_runs_the_phases_in_reverse() -> None:
    mod = bench()
    assert [mod.round_order(["torchjob", "floor"], n) for n in range(3)] == [
        ["torchjob", "floor"], ["floor", "torchjob"], ["torchjob", "floor"]]


def test_the_summary_gives_each_ratio_of_its_own_round_and_their_median(capsys: pytest.CaptureFixture[str]) -> None:
    mod = bench()
    tj, floor = "torchjob", mod.FLOOR
    # jobs Running/s per round: torchjob 10/10, 10/20, 10/8 against the floor's 10/10 each: 1.0, 0.5, 1.25
    rounds = [[result(mod, tj, 10.0, 12.0), result(mod, floor, 10.0, 10.0)],
              [result(mod, floor, 10.0, 10.0), result(mod, tj, 20.0, 15.0)],
              [result(mod, tj, 8.0, 11.0), result(mod, floor, 10.0, 10.0)]]
    mod.report_rounds(args(), rounds, "peer: none")
    out = capsys.readouterr().out
    assert "round 2: writes floor, torchjob" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("torchjob / writes floor: jobs Running/s")
                and "(" in x)
    assert re.search(r"1\.00 \(0\.50-1\.25\)\s+1\.00 0\.50 1\.25$", line), line
    cpu = next(x for x in out.splitlines() if "torchjob / writes floor: CPU time" in x and "(" in x)
    assert re.search(r"1\.20 \(1\.10-1\.50\)", cpu), cpu
    assert ">= 0.8x the writes floor's jobs Running/s: median of 3 rounds 1.00, met" in out


def test_a_round_that_did_not_finish_is_no_median(capsys: pytest.CaptureFixture[str]) -> None:
    mod = bench()
    tj, floor = "torchjob", mod.FLOOR
    rounds = [[result(mod, tj, 10.0, 12.0), result(mod, floor, 10.0, 10.0)],
              [result(mod, floor, 10.0, 10.0), result(mod, tj, None, 15.0)]]
    mod.report_rounds(args(), rounds, "peer: none")
    out = capsys.readouterr().out
    assert "median of 2 rounds -, NOT met" in out and "every job Running: NOT met" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("torchjob / writes floor: jobs Running/s")
                and "(" in x)
    assert "of 1" in line and line.rstrip().endswith("1.00 -"), line


def test_a_round_count_under_one_is_refused_naming_the_flag() -> None:
    run = subprocess.run([sys.executable, str(BENCH / "operator_scale.py"), "--rounds", "0"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "--rounds 0: a round count is 1 or more" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_a_job_through_volcano_and_kueue_is_put_against_torchjob_alone() -> None:
    """--phases torchjob,volcano,kueue: what each admitter adds to the time to every pod Running."""
    mod = bench()
    tj = mod.Result("torchjob", 40, pods_running_s=10.0, cpu_s=4.0)
    volcano = mod.Result("torchjob+volcano", 40, pods_running_s=15.0, cpu_s=5.0)
    kueue = mod.Result("torchjob+kueue", 40, pods_running_s=12.0, cpu_s=4.4)
    assert dict(mod.ratios([tj, volcano, kueue])) == {
        "torchjob+volcano / torchjob: every pod Running": 1.5, "torchjob+volcano / torchjob: operator CPU time": 1.25,
        "torchjob+kueue / torchjob: every pod Running": 1.2, "torchjob+kueue / torchjob: operator CPU time": 1.1}
    job = mod.torchjob("j0", "ns", workers=7)
    assert mod.admitters.gang(job)["spec"]["runPolicy"]["schedulingPolicy"] == {"schedulerName": "volcano",
                                                                                 "minAvailable": 8}
    queued = mod.admitters.queued(mod.torchjob("j0", "ns", workers=7))
    assert queued["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "bench"}
    assert {c["resources"]["requests"]["cpu"] for r in queued["spec"]["pytorchReplicaSpecs"].values()
            for c in r["template"]["spec"]["containers"]} == {"10m"}
