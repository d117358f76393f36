"""The chart's `trainerApi` values render what `torchjob install --trainer-api` applies (real Helm)."""

from __future__ import annotations

from typing import Any

from tests.kube.test_chart import _key, _strip, helm, template  # noqa: F401 (the fixture)
from torchjob.kube.served import trainer_objects


def _ours(objs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    names = {_key(o) for o in trainer_objects.trainer_api_objects("team", runtime_image="img:1")}
    return {_key(o): _strip(o) for o in objs if _key(o) in names}


def test_trainer_api_values_render_the_install_objects(helm: str) -> None:  # noqa: F811
    assert _ours(template(helm, namespace="team")) == {}  # off by default
    rendered = _ours(template(helm, "trainerApi.enabled=true", "trainerApi.runtimeImage=img:1", namespace="team"))
    want = {_key(o): o for o in trainer_objects.trainer_api_objects("team", runtime_image="img:1")}
    for obj in want.values():
        if obj["kind"] == "CustomResourceDefinition":
            obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}),
                                              "helm.sh/resource-policy": "keep"}
    assert rendered == want
    runtime = rendered[("ClusterTrainingRuntime", "", "torch-distributed")]
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert node["containers"] == [{"name": "node", "image": "img:1"}]
