"""The flags that build a job without a document (`run`/`submit` -j, --nnodes, -m, --env, ...), drawn at
random with values of any kind, always with --dry-run: an answer (the job printed) or a refusal naming
the flag (exit 2), never a traceback, and nothing runs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.dialects.test_no_traceback import answered
from tests.fuzz import examples

VALUES = st.one_of(st.text(max_size=10), st.sampled_from(["2x4", "1:4x2", "0x2", "2x", "x", "3:1x2", "1", "0",
                                                          "-1", "a=b", "=", "²x²", "99999999999999999999x1"]))
FLAGS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["-j", "--nnodes", "--nproc-per-node", "-m", "--name", "--image", "--env", "-o"]),
              VALUES).map(list),
    st.sampled_from([["--kube"], ["-q"], ["--"], ["train.py"], ["missing.py"], ["job.yaml"], ["pkg"]]).map(list)),
    max_size=5).map(lambda groups: [a for g in groups for a in g])


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["run", "submit"]), FLAGS)
def test_no_traceback_for_any_job_building_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: str,
                                                 flags: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("TORCHJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "pkg").mkdir(exist_ok=True)
    (tmp_path / "pkg" / "__main__.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"apiVersion": "torchjob.dev/v1", "kind": "TorchJob",
                                                       "metadata": {"name": "j"}, "spec": {"pytorchReplicaSpecs": {
                                                           "Master": {"template": {"spec": {"containers": [
                                                               {"name": "pytorch", "command": ["true"]}]}}}}}}))
    i = flags.index("--") if "--" in flags else len(flags)
    result = answered(verb, *flags[:i], "--dry-run", *flags[i:], usage=True)
    if result.code == 0 and "--help" not in flags:
        assert "kind: TorchJob" in result.out or result.out.lstrip().startswith("{"), result.out
    assert not (tmp_path / "home" / "jobs").exists() or not list((tmp_path / "home" / "jobs").iterdir())
