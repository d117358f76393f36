"""The Kubernetes API as plain dicts (lightkube underneath): what the controller and the CLI use.

Objects stay raw dicts in the informer caches: model deserialisation is the documented
bottleneck of Python controllers (research/operator-stack.md §2.3).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx2  # lightkube's HTTP client: what it raises below the Kubernetes API
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import ApiInfo, ResourceDef
from lightkube.generic_resource import GenericNamespacedResource, create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import Status, StatusDetails
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Secret
from lightkube.types import PatchType

from torchjob.kube.machinery.guarded_patch import guarded_ops

log = logging.getLogger("torchjob.kube")
FIELD_MANAGER = "torchjob-operator"
INSTANCE = socket.gethostname()[:128]  # the operator's pod: which replica recorded an event

# The kinds the operator reads and writes, besides Kubernetes' own: torchjob's (its CRD is
# kube/objects/install/crd.py; a test keeps the two the same), Kubeflow's, Volcano's, scheduler-plugins', Kueue's.
TorchJobRes = create_namespaced_resource("torchjob.dev", "v1", "TorchJob", "torchjobs")
VolcanoPodGroup = create_namespaced_resource("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups")
PluginsPodGroup = create_namespaced_resource("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups")
KueueWorkload = create_namespaced_resource("kueue.x-k8s.io", "v1beta1", "Workload", "workloads")
PyTorchJobRes = create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
KueueResourceFlavor = create_global_resource("kueue.x-k8s.io", "v1beta1", "ResourceFlavor", "resourceflavors")
# Kubeflow Trainer v2's (kube/served/trainer_objects.py) and T9k's (kube/served/t9k_objects.py)
TrainJobRes = create_namespaced_resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
TrainingRuntimeRes = create_namespaced_resource("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime",
                                                "trainingruntimes")
ClusterTrainingRuntimeRes = create_global_resource("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime",
                                                   "clustertrainingruntimes")
T9kPyTorchTrainingJobRes = create_namespaced_resource("batch.tensorstack.dev", "v1beta1", "PyTorchTrainingJob",
                                                      "pytorchtrainingjobs")


def dict_resource(kind: str, plural: str) -> Any:
    """A core (`v1`) namespaced kind whose objects lightkube passes as plain dicts, as it does a
    custom resource's (lightkube's generic resource), without putting it in lightkube's registry,
    where the typed class of that kind stays for everyone else. The operator's hot paths (every
    pod's watch events, each pod, Service and Event created, and the answers) then skip lightkube's
    typed models beyond the JSON parse (~2 % of the operator's CPU at 1,000 jobs under py-spy:
    docs/explanation/performance.md)."""

    class Resource(GenericNamespacedResource):
        _api_info = ApiInfo(resource=ResourceDef("", "v1", kind), plural=plural,
                            verbs=["delete", "deletecollection", "get", "global_list", "global_watch", "list",
                                   "patch", "post", "put", "watch"])

    Resource.__name__ = Resource.__qualname__ = kind
    return Resource


Pod, Service, Event = dict_resource("Pod", "pods"), dict_resource("Service", "services"), dict_resource("Event",
                                                                                                     "events")
PersistentVolumeClaim = dict_resource("PersistentVolumeClaim", "persistentvolumeclaims")

# By kind, or by apiVersion/kind where two groups share a kind.
KINDS: dict[str, Any] = {
    "TorchJob": TorchJobRes, "Pod": Pod, "Service": Service, "Event": Event, "Lease": Lease, "Deployment": Deployment,
    "Secret": Secret, "ConfigMap": ConfigMap, "PersistentVolumeClaim": PersistentVolumeClaim,
    "scheduling.volcano.sh/v1beta1/PodGroup": VolcanoPodGroup,
    "scheduling.x-k8s.io/v1alpha1/PodGroup": PluginsPodGroup,
    "kueue.x-k8s.io/v1beta1/Workload": KueueWorkload,
    "kueue.x-k8s.io/v1beta1/ResourceFlavor": KueueResourceFlavor,
    "kubeflow.org/v1/PyTorchJob": PyTorchJobRes,
    "trainer.kubeflow.org/v1alpha1/TrainJob": TrainJobRes,
    "trainer.kubeflow.org/v1alpha1/TrainingRuntime": TrainingRuntimeRes,
    "trainer.kubeflow.org/v1alpha1/ClusterTrainingRuntime": ClusterTrainingRuntimeRes,
    "batch.tensorstack.dev/v1beta1/PyTorchTrainingJob": T9kPyTorchTrainingJobRes,
    "CustomResourceDefinition": CustomResourceDefinition,
}


def kind_of(obj: dict[str, Any]) -> str:
    return obj["kind"] if obj["kind"] in KINDS else f"{obj['apiVersion']}/{obj['kind']}"


def connect(kubeconfig: str | None = None, context: str | None = None) -> AsyncClient:
    """A client from a kubeconfig (KUBECONFIG, ~/.kube/config) or the in-cluster service account."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    return AsyncClient(config=config.get(context_name=context) if context else config, field_manager=FIELD_MANAGER)


def to_dict(obj: Any) -> dict[str, Any]:
    """A plain dict without `metadata.managedFields`: the server's field-ownership bookkeeping, often
    a third of a pod's size, which nothing here reads (kubectl hides it too)."""
    data: dict[str, Any] = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    data.get("metadata", {}).pop("managedFields", None)
    return data


def parse_time(value: str | None) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, `Z`) as an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def status_code(e: Exception) -> int | None:
    """The HTTP status of a failed call (an unknown resource type answers 404 without a Status)."""
    if isinstance(e, ApiError) and e.status is not None and e.status.code:
        return e.status.code
    code = getattr(getattr(e, "response", None), "status_code", None)  # lightkube's HTTP client's error
    return code if isinstance(code, int) else None


def passing(e: BaseException) -> bool:
    """An error that says nothing of the request: the API server restarting, overloaded or out of
    reach for a moment. Anything else (403: a missing RBAC rule, say) is the installer's to fix."""
    if isinstance(e, httpx2.TransportError | asyncio.TimeoutError):
        return True
    return isinstance(e, Exception) and (status_code(e) or 0) in (429, 500, 502, 503, 504)


# A restarted kube-apiserver answers 403 for a moment, until its RBAC authorizer's caches have
# synced (seen in the chaos run, bench/chaos.py): a refusal is believed once it lasts this long.
SETTLE_S = 15.0


def refused(e: BaseException) -> bool:
    return isinstance(e, Exception) and status_code(e) in (401, 403)


class Outage:
    """Whether an error is worth trying again: a passing one, or a refusal younger than `settle_s`."""

    def __init__(self, settle_s: float = SETTLE_S) -> None:
        self.settle_s = settle_s
        self.refused_since: float | None = None

    def bearable(self, e: BaseException) -> bool:
        if refused(e):
            now = time.monotonic()
            self.refused_since = self.refused_since or now
            return now - self.refused_since < self.settle_s
        self.refused_since = None
        return passing(e)


T = TypeVar("T")


async def outlasting(call: Callable[[], Awaitable[T]], what: str, within_s: float = 60.0,
                     settle_s: float = SETTLE_S) -> T:
    """`call()`, tried again while it fails with a passing error (or a refusal, for `settle_s`), for
    up to `within_s` seconds: a kube-apiserver restart during the operator's start is waited out
    rather than ending it."""
    end, delay, outage = time.monotonic() + within_s, 0.5, Outage(settle_s)
    while True:
        try:
            return await call()
        except Exception as e:
            if not outage.bearable(e) or time.monotonic() + delay > end:
                raise
            log.warning("%s: %s; trying again in %.1fs", what, api_message(e) or type(e).__name__, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


def api_message(e: Exception) -> str:
    """The API server's own words for a failed call (its Status message), else the error's."""
    if isinstance(e, ApiError) and e.status is not None and e.status.message:
        return str(e.status.message)
    return str(e)


# Writes in flight at once: a round of a job of thousands of pods makes them together, and the HTTP
# pool's 100 connections (the watches hold some) would leave the rest waiting past the client's
# timeout (PoolTimeout, the round failed and retried: bench/operator_scale.py --job-pods).
WRITES_IN_FLIGHT = 64


class Api:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.writes = asyncio.Semaphore(WRITES_IN_FLIGHT)

    async def list(self, kind: str, namespace: str | None, labels: dict[str, Any] | None = None
                   ) -> tuple[list[dict[str, Any]], str]:
        it = self.client.list(KINDS[kind], namespace=namespace or "*", labels=labels)
        items = [to_dict(o) async for o in it]
        return items, it.resourceVersion

    def watch(self, kind: str, namespace: str | None, resource_version: str,
              labels: dict[str, Any] | None = None) -> AsyncIterable[tuple[str, Any]]:
        return self.client.watch(KINDS[kind], namespace=namespace or "*", labels=labels,
                                 resource_version=resource_version, server_timeout=300)

    async def get(self, kind: str, name: str, namespace: str | None) -> dict[str, Any]:
        """namespace None: a cluster-scoped kind."""
        if namespace is None:
            return to_dict(await self.client.get(KINDS[kind], name))
        return to_dict(await self.client.get(KINDS[kind], name, namespace=namespace))

    async def find(self, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        """`get`, or None where there is no such object, or no such kind (its CRD is not installed:
        a plain 404, not an ApiError)."""
        try:
            return await self.get(kind, name, namespace)
        except Exception as e:
            if status_code(e) != 404:
                raise
            return None

    async def find_listed(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """`find` by a list of that one name (a field selector): the operator's roles grant list on the
        jobs, not get (nothing else reads a job by its name)."""
        items = [to_dict(o) async for o in self.client.list(KINDS[kind], namespace=namespace,
                                                            fields={"metadata.name": name})]
        return items[0] if items else None

    async def apply_status(self, kind: str, body: dict[str, Any]) -> None:
        """Server-side apply to the status subresource: the fields in `body` become ours, and only
        those (a condition in a list keyed by type leaves the others' conditions alone)."""
        meta = body["metadata"]
        await self.client.patch(KINDS[kind].Status, meta["name"], body, namespace=meta["namespace"],
                                patch_type=PatchType.APPLY, force=True)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        res = KINDS[kind_of(obj)]
        async with self.writes:
            created = await self.client.create(res.from_dict(obj))
        return to_dict(created)

    async def delete(self, kind: str, name: str, namespace: str, grace_s: int | None = None) -> None:
        try:
            async with self.writes:
                await self.client.delete(KINDS[kind], name, namespace=namespace, grace_period=grace_s)
        except ApiError as e:
            if status_code(e) != 404:
                raise

    async def patch_status(self, name: str, namespace: str, status: dict[str, Any],
                           kind: str = "TorchJob", seen: dict[str, Any] | None = None) -> dict[str, Any]:
        """Merge-patch the status subresource; returns the object as stored (new resourceVersion).
        `seen`: the object the patch was decided on; only it is written (see guarded_patch)."""
        return await self._patch_field(kind, name, namespace, "status", status, seen)

    async def _patch_field(self, kind: str, name: str, namespace: str, field: str, patch: dict[str, Any],
                           seen: dict[str, Any] | None) -> dict[str, Any]:
        res = KINDS[kind].Status if field == "status" else KINDS[kind]
        uid = (seen or {}).get("metadata", {}).get("uid")
        if seen is None or not uid:
            obj = await self.client.patch(res, name, {field: patch}, namespace=namespace, patch_type=PatchType.MERGE)
            return to_dict(obj)
        try:
            obj = await self.client.patch(res, name, guarded_ops(uid, field, patch, seen), namespace=namespace,
                                          patch_type=PatchType.JSON)
        except ApiError as e:
            if status_code(e) != 422:
                raise
            now = await self.find_listed(kind, name, namespace)
            if now is not None and now["metadata"].get("uid") == uid:
                raise
            # deleted, or made again since it was read: as gone as a 404 for this very job
            gone = StatusDetails(kind=KINDS[kind]._api_info.plural, name=name)
            raise ApiError(status=Status(code=404, reason="NotFound", message=f"{name}: replaced since it was read",
                                         details=gone)) from e
        return to_dict(obj)

    async def patch_annotations(self, kind: str, name: str, namespace: str, annotations: dict[str, str | None],
                                uid: str | None = None, resource_version: str | None = None) -> dict[str, Any]:
        """Merge-patch an object's annotations (None removes one); returns the object as stored. `uid`,
        `resource_version`: only that object, only as it was then, is written (409 otherwise)."""
        meta: dict[str, Any] = {"annotations": annotations}
        if uid:
            meta["uid"] = uid
        if resource_version:
            meta["resourceVersion"] = resource_version
        async with self.writes:  # a gang's stops and next attempts are written together
            obj = await self.client.patch(KINDS[kind], name, {"metadata": meta}, namespace=namespace,
                                          patch_type=PatchType.MERGE)
        return to_dict(obj)

    async def log(self, pod: str, namespace: str, container: str, since_s: int, tail_lines: int) -> Sequence[str]:
        """A pod's container's log lines of the last `since_s` seconds, its last `tail_lines` at most: a stalled
        job's stacks, which its pods' watchers answer there (kube/controller/pods/stall_stacks.py)."""
        return [line async for line in self.client.log(pod, namespace=namespace, container=container, since=since_s,
                                                       tail_lines=tail_lines)]

    async def patch_data(self, kind: str, name: str, namespace: str, data: dict[str, Any]) -> None:
        """Merge-patch an object's `data` (a ConfigMap's)."""
        await self.client.patch(KINDS[kind], name, {"data": data}, namespace=namespace, patch_type=PatchType.MERGE)

    async def review_token(self, token: str, audience: str | None) -> dict[str, Any]:
        """The API server's TokenReview of a bearer token for one audience (None: the API server's
        own): its `status`."""
        from lightkube.models.authentication_v1 import TokenReviewSpec
        from lightkube.resources.authentication_v1 import TokenReview

        spec = TokenReviewSpec(token=token, audiences=[audience] if audience else None)
        review = await self.client.create(TokenReview(spec=spec))
        return to_dict(review).get("status") or {}

    async def review_access(self, user: dict[str, Any], path: str, verb: str) -> bool:
        """The API server's SubjectAccessReview: may this user (a TokenReview's `status.user`) `verb`
        the non-resource URL `path`?"""
        from lightkube.models.authorization_v1 import NonResourceAttributes, SubjectAccessReviewSpec
        from lightkube.resources.authorization_v1 import SubjectAccessReview

        spec = SubjectAccessReviewSpec(user=user.get("username"), groups=user.get("groups"), uid=user.get("uid"),
                                       extra=user.get("extra"),
                                       nonResourceAttributes=NonResourceAttributes(path=path, verb=verb))
        review = await self.client.create(SubjectAccessReview(spec=spec))
        return bool((to_dict(review).get("status") or {}).get("allowed"))

    async def patch_spec(self, name: str, namespace: str, spec: dict[str, Any],
                         kind: str = "TorchJob", seen: dict[str, Any] | None = None) -> dict[str, Any]:
        """Merge-patch a job's spec; returns the object as stored. `seen` as for patch_status."""
        return await self._patch_field(kind, name, namespace, "spec", spec, seen)

    async def event(self, job: dict[str, Any], type_: str, reason: str, message: str,
                    at: datetime | None = None) -> None:
        """Record an Event on the job; `at` is when it was decided (to the microsecond, so that readers
        can order events that were recorded concurrently or in the same second)."""
        meta = job["metadata"]
        ns = meta.get("namespace", "default")
        at = (at or datetime.now(UTC)).astimezone(UTC)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        ev = Event.from_dict({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": ns},
            "involvedObject": {k: v for k, v in (("apiVersion", job.get("apiVersion")),
                                                 ("kind", job.get("kind") or "TorchJob"), ("name", meta["name"]),
                                                 ("namespace", ns), ("uid", meta.get("uid"))) if v is not None},
            "reason": reason, "message": message[:1024], "type": type_, "source": {"component": FIELD_MANAGER},
            "count": 1, "eventTime": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "firstTimestamp": stamp,
            "lastTimestamp": stamp, "action": reason, "reportingComponent": FIELD_MANAGER,
            "reportingInstance": INSTANCE})
        try:
            await self.client.create(ev)
        except ApiError as e:  # events are best effort
            log.warning("event %s/%s not recorded: %s", meta["name"], reason, e)
