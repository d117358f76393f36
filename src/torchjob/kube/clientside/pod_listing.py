"""A big job's pods read cheaply, for a summary (describe's and the dashboard's counts by state): the
Running ones as their metadata only, every other one whole, page by page.

A pod that torchjob makes carries its program's front in its command (some 16 kB: the stacks front),
so a job of 4,096 pods lists as ~80 MB of JSON, which the API server must write and a reader parse.
Counted by state, a running pod needs only its name, labels (which replica), annotations (which
attempt; whether it ended in place) and owner; how it waits or how it ended only matters for the few
that are not running, and those are read whole. Both listings are of one resourceVersion (the second
asks for exactly the first's), so no pod that changes its phase between them is counted twice or
missed."""

from __future__ import annotations

from typing import Any

import msgspec
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.core.selector import build_selector
from lightkube.resources.core_v1 import Pod

from torchjob.kube.clientside.job_pods import pods, served
from torchjob.kube.machinery.client import status_code
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels import LABEL_JOB, replica_name
from torchjob.kube.objects.labels import attempt_of as pod_attempt
from torchjob.runtime import AttemptView

PAGE = 1000  # pods per answer (limit/continue): the API server's and this reader's memory bounded
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


class _Meta(msgspec.Struct):  # what a running pod's row needs; the rest (managedFields) skipped unparsed
    name: str
    namespace: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    ownerReferences: list[dict[str, Any]] = []
    deletionTimestamp: str | None = None


class _Item(msgspec.Struct):
    metadata: _Meta


class _Page(msgspec.Struct):
    items: list[_Item] | None = None
    metadata: dict[str, Any] = {}


class _FullPage(msgspec.Struct):
    items: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = {}


def _pages(kube: Client, namespace: str, params: dict[str, Any], kind: type[Any],
           accept: str | None = None) -> tuple[list[Any], str]:
    """Every item of one listing, PAGE at a time, and its resourceVersion (every page is of the first's)."""
    generic = kube._client
    items: list[Any] = []
    version, cont = "", None
    while True:
        asked = {**params, "limit": PAGE, "continue": cont}
        if cont:  # a continued listing is of its first page's version; naming one again is refused
            asked.pop("resourceVersion", None)
            asked.pop("resourceVersionMatch", None)
        request = generic.prepare_request("list", Pod, namespace=namespace, params=asked,
                                          headers={"Accept": accept} if accept else None)
        response = generic.send(generic.build_adapter_request(request))
        generic.raise_for_status(response)  # type: ignore[no-untyped-call]  # ApiError, as lightkube raises
        page = msgspec.json.decode(response.content, type=kind)
        items += page.items or []
        version = version or str(page.metadata.get("resourceVersion") or "")
        cont = page.metadata.get("continue")
        if not cont:
            return items, version


def _row(meta: _Meta) -> AttemptView:
    data = {"metadata": {"annotations": meta.annotations}}
    return AttemptView(replica=str(replica_name(meta.labels)), attempt=pod_attempt(data),
                       reason="Stopping" if meta.deletionTimestamp else "Running", pod=meta.name)


def summary_pods(kube: Client, namespace: str, labels: dict[str, Any], uid: str) -> tuple[list[Any], list[AttemptView]]:
    """The pods of the job `uid` controls among those `labels` select (lightkube's selector): (those
    not Running, whole, as lightkube Pods; a row for each Running one: its replica, attempt and pod, no
    times). A Running pod whose annotations say its attempt ended in place is read whole too (how it
    ended is in them)."""
    def mine(refs: list[dict[str, Any]]) -> bool:
        return any(r.get("controller") and r.get("uid") == uid for r in refs if isinstance(r, dict))

    selector = build_selector(labels)
    running, version = _pages(kube, namespace, {"labelSelector": selector, "fieldSelector": "status.phase=Running"},
                              _Page, METADATA_ONLY)
    params = {"labelSelector": selector, "fieldSelector": "status.phase!=Running", "resourceVersion": version,
              "resourceVersionMatch": "Exact"}
    try:
        others, _ = _pages(kube, namespace, params, _FullPage)
    except ApiError as e:  # that version compacted away (410) or not servable: the latest, a pod maybe moved
        if status_code(e) not in (410, 400, 422, 504):
            raise
        others, _ = _pages(kube, namespace, {"labelSelector": selector, "fieldSelector": "status.phase!=Running"},
                           _FullPage)
    whole = [d for d in others if mine((d.get("metadata") or {}).get("ownerReferences") or [])]
    seen = {(d.get("metadata") or {}).get("name") for d in whole}
    rows: list[AttemptView] = []
    for item in running:
        meta = item.metadata
        if meta.name in seen or not mine(meta.ownerReferences):
            continue
        if inplace.ANNOTATION_EXIT in meta.annotations:
            try:
                whole.append(kube.get(Pod, meta.name, namespace=namespace).to_dict())
            except ApiError as e:
                if status_code(e) != 404:
                    raise
            continue
        rows.append(_row(meta))
    return [Pod.from_dict(d) for d in whole], rows


def job_pods_for(kube: Client, data: dict[str, Any], light: bool) -> tuple[list[Any], list[AttemptView]]:
    """The job's pods as describe reads them: every one whole (job_pods.pods), or with `light` (a
    summary of a big job) as summary_pods reads them."""
    meta = data["metadata"]
    if not light or not meta.get("uid"):
        return pods(kube, data), []
    return summary_pods(kube, meta.get("namespace") or "default",
                        {**served(data).pod_labels, LABEL_JOB: meta["name"]}, meta["uid"])
