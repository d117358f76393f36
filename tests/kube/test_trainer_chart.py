"""The chart's `trainerApi` values render what `torchjob install --trainer-api` applies (real Helm)."""

from __future__ import annotations

import json
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
        if obj["kind"] == "ClusterTrainingRuntime":  # made once the CRDs are (scripts/gen-chart.py)
            obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}),
                                              "helm.sh/hook": "post-install,post-upgrade",
                                              "helm.sh/hook-delete-policy": "before-hook-creation"}
    assert rendered == want
    runtime = rendered[("ClusterTrainingRuntime", "", "torch-distributed")]
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert node["containers"] == [{"name": "node", "image": "img:1"}]


def test_trainer_runtime_readers_value_is_the_binding_install_makes(helm: str) -> None:  # noqa: F811
    """trainerApi.runtimeReaders: the subjects of the runtimes' reader binding, as --trainer-runtime-reader
    makes it; [] makes none (the ClusterRole stays)."""
    def rendered(*values: str) -> dict[tuple[str, str, str], dict[str, Any]]:
        return {_key(o): _strip(o) for o in template(helm, "trainerApi.enabled=true", *values, namespace="team")
                if o["metadata"]["name"] == trainer_objects.RUNTIME_READERS}

    def installed(readers: list[dict[str, str]]) -> dict[tuple[str, str, str], dict[str, Any]]:
        return {_key(o): o for o in trainer_objects.trainer_api_objects("team", runtime_readers=readers)
                if o["metadata"]["name"] == trainer_objects.RUNTIME_READERS}

    sa = [{"kind": "ServiceAccount", "name": "runner", "namespace": "ci"},
          {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:serviceaccounts:team-a"}]
    assert rendered(f"trainerApi.runtimeReaders={json.dumps(sa)}") == installed(sa)
    assert rendered() == installed(list(trainer_objects.DEFAULT_RUNTIME_READERS))
    none = rendered("trainerApi.runtimeReaders=[]")
    assert none == installed([]) and list(none) == [("ClusterRole", "", trainer_objects.RUNTIME_READERS)]
