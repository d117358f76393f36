"""A dry run never refuses what only running would (case 6): `render` renders with a warning, `run`
refuses; `validate` says that a container with no command needs one for a local run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dialects.cli import torchjob
from tests.dialects.util import SEEDS, doc

GPUS = doc("""
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    metadata: {name: big}
    spec:
      pytorchReplicaSpecs:
        Master:
          template:
            spec:
              containers:
                - name: pytorch
                  command: [python, train.py]
                  resources: {limits: {nvidia.com/gpu: 8}}
                  volumeMounts: [{name: code, mountPath: /code}]
              volumes: [{name: code, configMap: {name: code}}]
""")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # this machine has one GPU, the job asks for 8


def test_render_renders_what_run_refuses(tmp_path: Path) -> None:
    (tmp_path / "big.yaml").write_text(GPUS)
    r = torchjob("render", str(tmp_path / "big.yaml"))
    assert r.code == 0, r.err
    assert "master-0:" in r.out and "gpus: (none)" in r.out
    assert "warning: the job asks for 8 GPUs (master-0: 8) but this machine has 1; fix: lower" in r.err
    assert "warning: master-0: volume 'code' is configMap 'code', which exists only on a cluster; fix: pass " \
           "--configmap code=PATH" in r.err
    run = torchjob("run", str(tmp_path / "big.yaml"))
    assert run.code == 2 and "error: the job asks for 8 GPUs" in run.err and "Traceback" not in run.err


def test_render_json_lists_the_same_warnings(tmp_path: Path) -> None:
    (tmp_path / "big.yaml").write_text(GPUS)
    r = torchjob("render", str(tmp_path / "big.yaml"), "-o", "json")
    import json

    data = json.loads(r.out)
    assert any("asks for 8 GPUs" in w for w in data["warnings"])
    assert data["replicas"][0]["gpus"] == []


@pytest.mark.parametrize("seed", ["000-volcano.yaml", "002-kubeflow-nccl.yaml"])
def test_no_command_is_a_warning_for_validate_and_render(seed: str) -> None:
    v = torchjob("validate", str(SEEDS / seed))
    assert v.code == 0
    assert "has no command: a local run needs one (on a cluster the image's entrypoint runs)" in v.err
    r = torchjob("render", str(SEEDS / seed))
    assert r.code == 0 and "command: '<the entrypoint of " in r.out
    assert "has no command: a local run needs one" in r.err


def test_a_t9k_claim_for_tensorboard_is_a_warning_in_render(tmp_path: Path) -> None:
    (tmp_path / "tb.yaml").write_text(doc("""
        apiVersion: batch.tensorstack.dev/v1beta1
        kind: PyTorchTrainingJob
        metadata: {name: tb}
        spec:
          tensorboardSpec: {trainingLogFilesets: ["t9k://pvc/logs/run"]}
          replicaSpecs:
            - type: worker
              template: {spec: {containers: [{name: pytorch, command: [python, t.py]}]}}
        """))
    r = torchjob("render", str(tmp_path / "tb.yaml"))
    assert r.code == 0 and "warning: tensorboard log directory t9k://pvc/logs/run is on PVC 'logs'" in r.err
