"""The TorchJob CRD's status schema (kube/objects/install/crd.py), generated from the status model: it names
every key the operator writes (a key it lacks the API server prunes, and the operator would lose
what it decided), the chart's CRD holds the same schema, the printer columns and the scale
subresource read typed fields, and `kubectl explain` has a description for every field. The last
test writes the operator's statuses to a real API server and reads them back whole."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from lightkube import Client
from lightkube.types import PatchType
from pydantic import BaseModel

from tests.core.sim import T0, at, ended, running, up, world
from tests.jobs import job_data, make_job
from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.status import InitializerStatus, KeptTail, Reason, StepState
from torchjob.core.diagnosis.stacks import ProcessStacks, Stacks, parse
from torchjob.core.round import kept
from torchjob.core.round.reconcile import Refusal, refuse
from torchjob.core.shape.topology import ReplicaId
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.install.crd import OperatorStatus, crd, status_schema
from torchjob.kube.served.kinds import TORCHJOB
from torchjob.progress.book import Book
from torchjob.progress.protocol import Report

REPO = Path(__file__).resolve().parents[2]
CHART_CRD = REPO / "charts" / "torchjob" / "crds" / "torchjobs.yaml"
GENERATION = 3


# --- the API server's side, for the parts of a schema the status uses --------------------------------


def problems(value: Any, schema: dict[str, Any], path: str = "status") -> list[str]:
    """What a kube-apiserver would prune from `value` (a key the schema does not name) or refuse in it
    (a wrong type, a missing required key, a value not in an enum, a bad date-time)."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: null, and not nullable"]
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if schema.get("x-kubernetes-int-or-string"):
        return [] if isinstance(value, int | str) and not isinstance(value, bool) else [f"{path}: not int-or-string"]
    kind = schema.get("type")
    ok = {"object": dict, "array": list, "string": str, "integer": int, "number": int | float, "boolean": bool}
    if kind not in ok or not isinstance(value, ok[kind]) or (kind in ("integer", "number") and isinstance(value, bool)):
        return [f"{path}: {value!r} is not of type {kind}"]
    out = []
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if schema.get("format") == "date-time":
        try:
            datetime.fromisoformat(value)
        except ValueError:
            out.append(f"{path}: {value!r} is not a date-time")
    if kind == "array":
        for i, item in enumerate(value):
            out += problems(item, schema["items"], f"{path}[{i}]")
    if kind == "object":
        out += [f"{path}.{k}: required, missing" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            sub = schema.get("properties", {}).get(k, schema.get("additionalProperties"))
            if sub is None:
                out.append(f"{path}.{k}: not in the schema: the API server prunes it")
            else:
                out += problems(v, sub, f"{path}.{k}")
    return out


def merged(stored: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386) applied, as the API server applies the operator's status patches."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(stored) if isinstance(stored, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merged(out.get(k), v)
    return out


# --- what the operator writes --------------------------------------------------------------------


def rounds() -> list[tuple[TorchJob, JobStatus]]:
    """Each decided status of a job that starts, runs, restarts a worker twice (the second time after a
    backoff) and fails when a third exit passes its backoffLimit, as core.reconcile decides them."""
    d, _ = running(make_job("llm", workers=2, restart_policy="OnFailure", run_policy={"backoffLimit": 2}))
    out = [(d.job, d.status)]
    m, w0, w1 = ReplicaId("Master", 0), ReplicaId("Worker", 0), ReplicaId("Worker", 1)
    for attempt, (t, code) in enumerate([(5.0, 1), (50.0, 1), (100.0, 137)]):
        d(world(up(m), up(w0), ended(w1, code, t, attempt=attempt, reason="OOMKilled" if code == 137 else None)), t)
        out.append((d.job, d.status))
        if not d.status.finished:
            d(world(up(m), up(w0), up(w1, attempt + 1)), t + 30)  # made again once its backoff is over
            out.append((d.job, d.status))
    # the job's end deleted the master's pod: the end of its log the kubelet kept (observe.kept_tails)
    said = KeptTail(replica="master-0", attempt=0, exitCode=143, tail="epoch 3\nstopping on SIGTERM\n")
    out.append((d.job, kept.keep(d.status, [said])))
    # a stall's stacks, taken of its pods before its replicas were stopped (kube/controller/pods/stall_stacks.py)
    dump = ("# torchjob stacks: rank=0 pid=1 main=0x00007f0000000001\n"
            "Current thread 0x00007f0000000001 (most recent call first):\n"
            '  File "/opt/train.py", line 41 in step\n')
    taken = Stacks([ProcessStacks("master-0", 0, 1, tuple(parse(dump)[2]))])
    out.append((d.job, kept.keep_stacks(d.status, kept.stacks_kept(taken, {"master-0": 0}, ["master-0"], T0))))
    # a TrainJob's initializer step that failed past its retries (core/round/initializers.py's words)
    # and one whose retry waits out a Job's backoff (notBefore)
    step = InitializerStatus(state=StepState.FAILED, attempt=2, message="model-initializer: no such model")
    waits = InitializerStatus(state=StepState.PENDING, attempt=1, message="hub unreachable", notBefore=at(20))
    out.append((d.job, d.status.model_copy(update={"initializers": {"model-initializer": step,
                                                                    "dataset-initializer": waits}})))
    return out


def progress_patch() -> dict[str, Any]:
    """The progress writer's patch (kube/progress/hub.py) of a job whose replicas reported steps and metrics."""
    book = Book()
    for step in range(1, 11):
        book.record(f"worker-{step % 2}", 0, Report(step=step * 10, total=1000, percent=step, metrics={
            "loss": f"{2.5 / step:.6g}", "lr": "0.0003"}), T0 + timedelta(seconds=step))
    progress = book.progress()
    assert progress is not None
    return TORCHJOB.progress_patch(progress.model_dump(mode="json", exclude_none=True))


def straggler_patch() -> dict[str, Any]:
    """The progress writer's patch of a job one of whose three reporters takes three times the others'
    step time (its reports' step_time): a straggler in the progress, a torchrun worker's (its rank named)."""
    book = Book()
    for step in range(1, 21):
        for replica, rank, seconds in (("master-0", 0, 0.1), ("worker-0", 1, 0.1), ("worker-0", 2, 0.3)):
            book.record(replica, 0, Report(step=step, total=100, metrics={"step_time": str(seconds)}, rank=rank),
                        T0 + timedelta(seconds=step))
    progress = book.progress()
    assert progress is not None and [(s.replica, s.rank) for s in progress.stragglers] == [("worker-0", 2)]
    return TORCHJOB.progress_patch(progress.model_dump(mode="json", exclude_none=True))


def patches() -> list[dict[str, Any]]:
    """The status patches the operator sends for that job, in order: the reconciler's (the kind's status
    patch and the generation decided on), the progress writer's among them."""
    out: list[dict[str, Any]] = []
    for job, status in rounds():
        out.append({**TORCHJOB.status_patch(job, status, at(0)), "observedGeneration": GENERATION})
        if len(out) == 3:
            out.append(progress_patch())
            out.append(straggler_patch())
    return out


def unreadable_patch() -> dict[str, Any]:
    """The reconciler's patch of a job it cannot read (no job: no workerSelector), refused."""
    plan = refuse(JobStatus(), Refusal(Reason.INVALID_SPEC, "spec.pytorchReplicaSpecs: Field required"), at(0))
    return {**TORCHJOB.status_patch(None, plan.status, at(0)), "observedGeneration": GENERATION}


def stored_statuses() -> list[dict[str, Any]]:
    """The stored status after each patch."""
    out, stored = [], {}
    for patch in patches():
        stored = merged(stored, patch)
        out.append(stored)
    return out


def model_paths(model: Any, prefix: str = "status") -> set[str]:
    """Every field of a pydantic model, nested models included: `status.replicas.*.notBefore`."""
    out = set()
    for name, f in model.model_fields.items():
        path = f"{prefix}.{name}"
        out.add(path)
        out |= _nested(f.annotation, path)
    return out


def _nested(tp: Any, path: str) -> set[str]:
    origin, args = get_origin(tp), get_args(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return model_paths(tp, path)
    if origin is list:
        return _nested(args[0], f"{path}[]")
    if origin is dict:
        return _nested(args[1], f"{path}.*")
    return set().union(*(_nested(a, path) for a in args)) if args else set()


def schema_paths(schema: dict[str, Any], path: str = "status") -> set[str]:
    out = set()
    for name, sub in schema.get("properties", {}).items():
        out |= {f"{path}.{name}", *schema_paths(sub, f"{path}.{name}")}
    if isinstance(schema.get("additionalProperties"), dict):
        out |= schema_paths(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        out |= schema_paths(schema["items"], f"{path}[]")
    return out


def data_paths(value: Any, path: str = "status") -> set[str]:
    """The paths set (not null) in a stored status, map keys as `*`, list items as `[]`."""
    if isinstance(value, list):
        return set().union(*(data_paths(v, f"{path}[]") for v in value))
    if not isinstance(value, dict):
        return set()
    out = set()
    for k, v in value.items():
        p = f"{path}.*" if path.endswith((".replicaStatuses", ".replicas", ".initializers")) else f"{path}.{k}"
        if v is not None:
            out |= {p, *data_paths(v, p)}
    return out


# --- the tests -----------------------------------------------------------------------------------


def test_the_status_schema_names_every_field_of_the_model_and_every_key_the_operator_adds() -> None:
    expected = model_paths(JobStatus) | model_paths(OperatorStatus)
    assert schema_paths(status_schema()) == expected
    assert "x-kubernetes-preserve-unknown-fields" not in str(status_schema())  # nothing is free-form


def test_every_status_the_operator_writes_survives_the_schema() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    for patch, stored in [*zip(patches(), stored_statuses(), strict=True), (unreadable_patch(),) * 2]:
        assert problems(stored, schema) == [], patch
    # what was written covers the whole model: a new field of the status is written here too
    written = set().union(*map(data_paths, stored_statuses()))
    assert model_paths(JobStatus) | model_paths(OperatorStatus) <= written
    progress = stored_statuses()[3]["progress"]
    assert {m["name"] for m in progress["metrics"]} == {"loss", "lr"} and progress["rate"] > 0


def test_a_key_the_schema_lacks_is_caught() -> None:
    schema = status_schema()
    stored = {**stored_statuses()[-1], "notAField": "2024-01-01T00:00:00Z"}
    stored["replicas"]["worker-1"]["exitCodes"] = [1]
    assert problems(stored, schema) == ["status.replicas.worker-1.exitCodes: not in the schema: the API server "
                                        "prunes it", "status.notAField: not in the schema: the API server "
                                        "prunes it"]
    assert problems({"restartCount": "1", "state": "Lost"}, schema) == [
        "status.restartCount: '1' is not of type integer", "status.state: 'Lost' is not one of ['Pending', "
        "'Created', 'Running', 'Restarting', 'Suspended', 'Succeeded', 'Failed']"]


def test_the_charts_crd_has_the_models_status_schema() -> None:
    """Fails when the status model changed and the chart was not regenerated (scripts/gen-chart.py)."""
    chart = yaml.safe_load(CHART_CRD.read_text())
    status = chart["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    missing = (model_paths(JobStatus) | model_paths(OperatorStatus)) - schema_paths(status)
    assert not missing, f"{sorted(missing)} not in {CHART_CRD.relative_to(REPO)}: run scripts/gen-chart.py"
    assert status == status_schema(), f"{CHART_CRD.relative_to(REPO)} is stale: run scripts/gen-chart.py"


def _at(schema: dict[str, Any], json_path: str) -> dict[str, Any]:
    node = schema
    for part in json_path.removeprefix(".").split("."):
        node = node["properties"][part] if part in node.get("properties", {}) else node["additionalProperties"]
    return node


def test_the_printer_columns_and_the_scale_subresource_read_typed_status_fields() -> None:
    version = crd()["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    for name in ("State", "Master", "Workers", "Restarts", "Progress%", "ETA"):
        column = columns[name]
        assert _at(schema, column["jsonPath"])["type"] == column["type"], name
    scale = version["subresources"]["scale"]
    assert _at(schema, scale["statusReplicasPath"])["type"] == "integer"
    assert _at(schema, scale["labelSelectorPath"])["type"] == "string"


def test_kubectl_explain_has_a_description_for_every_status_field() -> None:
    def undescribed(schema: dict[str, Any], path: str) -> list[str]:
        out = [] if schema.get("description") else [path]
        for name, sub in schema.get("properties", {}).items():
            out += undescribed(sub, f"{path}.{name}")
        if isinstance(schema.get("additionalProperties"), dict):
            out += [p for p in undescribed(schema["additionalProperties"], f"{path}.*") if p != f"{path}.*"]
        if "items" in schema:
            out += [p for p in undescribed(schema["items"], f"{path}[]") if p != f"{path}[]"]
        return out

    assert undescribed(status_schema(), "status") == []
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["description"] and schema["properties"]["spec"]["description"]


# --- on a real API server ------------------------------------------------------------------------


def test_the_api_server_keeps_every_status_the_operator_writes_whole(kube: Client, namespace: str,
                                                                     kubeconfig: str) -> None:
    from tests.kube.test_kubeflow_api import kubectl
    from tests.kube.test_operator import create

    create(kube, job_data("llm", workers=2), namespace)  # no operator: the test writes as it would
    for patch, expected in zip(patches(), stored_statuses(), strict=True):
        patch = {**patch, "observedGeneration": 1}  # the stored job's generation, as the reconciler writes it
        stored = kube.patch(TorchJobRes.Status, "llm", {"status": patch}, namespace=namespace,
                            patch_type=PatchType.MERGE)
        assert dict(stored.status or {}) == {**expected, "observedGeneration": 1}, patch
    create(kube, job_data("bad", workers=1), namespace)
    patch = {**unreadable_patch(), "observedGeneration": 1}
    stored = kube.patch(TorchJobRes.Status, "bad", {"status": patch}, namespace=namespace, patch_type=PatchType.MERGE)
    assert dict(stored.status or {}) == merged({}, patch)
    table = [line.split() for line in kubectl(kubeconfig, "get", "tj", "-n", namespace, "-o", "wide").splitlines()]
    assert table[0][:7] == ["NAME", "STATE", "MASTER", "WORKERS", "RESTARTS", "PROGRESS%", "ETA"]
    assert table[1][:5] == ["bad", "Failed", "1", "1", "0"]  # no progress: empty cells
    assert table[2][:6] == ["llm", "Failed", "1", "2", "2", "10"] and int(table[2][6]) > 0  # the writer's ETA
    explained = kubectl(kubeconfig, "explain", "torchjob.status.failure")
    assert "Why the job failed: its root cause." in explained and "exitCode" in explained
    assert "Its exit code." in kubectl(kubeconfig, "explain", "torchjob.status.failure.exitCode")
