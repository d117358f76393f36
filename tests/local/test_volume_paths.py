"""Paths a job document gives that must stay inside a volume (issue 19, finding 10): a subPath, a
configMap item's path, a configMapKeyRef's key. Refused by validate() as the API server refuses
them (relative, no '..'; a key is a file name), and, for a job that never met validate(), by the
local runtime itself: every resolved path stays inside. Pure: nothing runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dialects.cli import torchjob
from tests.jobs import job_data
from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.core.shape.topology import Placement
from torchjob.local.inspect.render import render
from torchjob.local.start.launch import LocalOptions
from torchjob.local.start.volumes import prepare


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file beside the configMap's directory, which no key may name."""
    (tmp_path / "cm").mkdir()
    (tmp_path / "cm" / "ok.txt").write_text("fine")
    (tmp_path / "private").mkdir()
    path = tmp_path / "private" / "id_rsa"
    path.write_text("-----BEGIN PRIVATE KEY----- the secret")
    return path


def job(tmp_path: Path, *, sub_path: str | None = None, item_path: str | None = None,
        env_key: str | None = None) -> dict[str, Any]:
    data = job_data("paths", workers=0)
    pod = data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    c = pod["containers"][0]
    c["command"] = ["true"]
    if sub_path is not None:
        pod["volumes"] = [{"name": "scratch", "hostPath": {"path": str(tmp_path / "cm")}}]
        c["volumeMounts"] = [{"name": "scratch", "mountPath": str(tmp_path / "mnt"), "subPath": sub_path}]
    if item_path is not None:
        pod["volumes"] = [{"name": "conf", "configMap": {"name": "cm", "items": [{"key": "ok.txt",
                                                                                 "path": item_path}]}}]
        c["volumeMounts"] = [{"name": "conf", "mountPath": str(tmp_path / "mnt")}]
    if env_key is not None:
        c["env"] = [{"name": "LEAK", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": env_key}}}]
    return data


@pytest.mark.parametrize("kwargs,field,message", [
    ({"sub_path": "../private"}, "volumeMounts[0].subPath", "must not contain '..'"),
    ({"sub_path": "/etc"}, "volumeMounts[0].subPath", "must be a relative path"),
    ({"item_path": "../../private/x"}, "configMap.items[0].path", "must not contain '..'"),
    ({"item_path": "/tmp/x"}, "configMap.items[0].path", "must be a relative path"),
    ({"env_key": "../private/id_rsa"}, "configMapKeyRef.key", "is not a valid key"),
])
def test_validate_refuses_a_path_that_leaves_its_volume_naming_the_field(
        tmp_path: Path, secret: Path, kwargs: dict[str, str], field: str, message: str) -> None:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job(tmp_path, **kwargs)))
    for command in (["validate"], ["render", "--configmap", f"cm={tmp_path / 'cm'}"]):
        result = torchjob(*command, str(tmp_path / "job.yaml"))
        assert result.code == 2, result.out + result.err
        assert field in result.err and message in result.err
        assert "the secret" not in result.out + result.err


def unvalidated(data: dict[str, Any]) -> TorchJob:
    return TorchJob.model_validate(data)  # the model alone: what a caller that skips validate() holds


def test_a_key_that_is_a_path_is_never_read_even_past_validate(tmp_path: Path, secret: Path) -> None:
    opts = LocalOptions(configmaps={"cm": str(tmp_path / "cm")})
    where = Placement("127.0.0.1", 1, "127.0.0.1", 2)
    with pytest.raises(UserError, match="is not available locally"):
        render(unvalidated(job(tmp_path, env_key="../private/id_rsa")), where, opts, tmp_path / "job")
    specs = render(unvalidated(job(tmp_path, env_key="ok.txt")), where, opts, tmp_path / "job")
    assert specs[0].env["LEAK"] == "fine"


def test_a_subpath_or_item_path_that_leaves_its_volume_is_refused_even_past_validate(tmp_path: Path,
                                                                                    secret: Path) -> None:
    opts = LocalOptions(configmaps={"cm": str(tmp_path / "cm")})
    where = Placement("127.0.0.1", 1, "127.0.0.1", 2)
    for sub in ("../private", "/etc"):
        with pytest.raises(UserError, match="subPath"):
            render(unvalidated(job(tmp_path, sub_path=sub)), where, opts, tmp_path / "job")
    (tmp_path / "cm" / "out").symlink_to(tmp_path / "private")  # a link that leads out of the volume
    with pytest.raises(UserError, match="leads outside the volume"):
        render(unvalidated(job(tmp_path, sub_path="out")), where, opts, tmp_path / "job")
    escaped = tmp_path / "escaped"
    with pytest.raises(UserError, match=r"item 'ok\.txt' path"):
        prepare(unvalidated(job(tmp_path, item_path="../../../../../escaped")), tmp_path / "job", opts.configmaps, [])
    assert not escaped.exists()
