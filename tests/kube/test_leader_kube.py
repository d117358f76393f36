"""Two operators with leader election against a real API server (issue 34): every working replica is
ready (the candidate too); the leader labels its own pod (torchjob.dev/leader=true, which the
progress Service selects) and takes the label off a pod that kept it; a leader that loses its Lease
takes its label off and exits 1 with one log line and no traceback; a leader stopped by SIGTERM hands
its Lease and its label over.

The operators' pods are Pod objects the test makes (no kubelet runs them): what the label is on is all
that matters here; tests/incluster has the same with the operator's image in real pods."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.types import PatchType

from tests.kube.conftest import Operator
from torchjob.kube.controller.process.operator import LEASE_NAME
from torchjob.kube.objects.install import LEADER_LABEL


def wait_for(what: str, check: object, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def readyz(op: Operator) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.health_port}/readyz", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def labelled(kube: Client, ns: str) -> set[str]:
    return {p.metadata.name for p in kube.list(Pod, namespace=ns, labels={LEADER_LABEL: "true"})}


@pytest.fixture
def system(kube: Client) -> Iterator[str]:
    """The operators' namespace, with a pod object for each of them."""
    ns = f"op-{uuid.uuid4().hex[:8]}"
    kube.create(Namespace(metadata=ObjectMeta(name=ns)))
    for name in ("op-a", "op-b"):
        kube.create(Pod(metadata=ObjectMeta(name=name, namespace=ns),
                        spec=PodSpec(containers=[Container(name="operator", image="torchjob/operator")])))
    yield ns
    kube.delete(Namespace, ns)


def start(kubeconfig: str, tmp_path: Path, ns: str, pod: str) -> Operator:
    op = Operator(kubeconfig, tmp_path / f"{pod}.log",
                  ("--leader-elect", "--lease-namespace", ns, "--lease-duration", "24", "--pod-name", pod))
    op.start()
    return op


def test_every_replica_is_ready_and_the_leader_s_pod_carries_the_label(
        kube: Client, kubeconfig: str, system: str, tmp_path: Path) -> None:
    ns = system
    a = start(kubeconfig, tmp_path, ns, "op-a")
    b: Operator | None = None
    try:
        wait_for("op-a leads and labels its pod", lambda: labelled(kube, ns) == {"op-a"})
        wait_for("the leader is ready", lambda: readyz(a) == 200)
        # a pod that kept the label (a leader that died with it): the next leader takes it off
        kube.patch(Pod, "op-b", {"metadata": {"labels": {LEADER_LABEL: "true"}}}, namespace=ns,
                   patch_type=PatchType.MERGE)
        b = start(kubeconfig, tmp_path, ns, "op-b")
        # the candidate is ready too (it waits for the Lease; the API server answers); on start it takes
        # the label of its pod's last life off
        wait_for("the candidate is ready", lambda: readyz(b) == 200)
        assert labelled(kube, ns) == {"op-a"}
        # Another takes the Lease (as a partitioned leader finds on its next renewal): the leader stops,
        # takes its label off, and says so in one line; exit code 1, no traceback.
        lease = kube.get(Lease, LEASE_NAME, namespace=ns)
        assert lease.spec.holderIdentity
        lease.spec.holderIdentity, lease.spec.renewTime = "a-thief", datetime.now(UTC)
        lease.spec.leaseDurationSeconds = 600
        kube.replace(lease)
        assert a.proc is not None
        assert a.proc.wait(60) == 1  # at its next renewal (every 8 s)
        log = a.log.read_text()
        assert "lost the lease: another operator holds the lease" in log
        assert "Traceback" not in log, log[-3000:]
        assert "op-a" not in labelled(kube, ns)
        # the thief gives the Lease up: the candidate, which watches it, leads at once (not at its next
        # poll, every 4 s with a 24 s Lease) and labels its own pod
        lease = kube.get(Lease, LEASE_NAME, namespace=ns)
        lease.spec.holderIdentity, lease.spec.leaseDurationSeconds = None, 1
        kube.replace(lease)
        given_up = time.monotonic()
        wait_for("op-b leads and labels its pod", lambda: labelled(kube, ns) == {"op-b"})
        taken = time.monotonic() - given_up
        print(f"a Lease given up -> the candidate leads, its pod labelled: {taken:.2f}s")
        assert taken < 2.5
        # SIGTERM: the label and the Lease are handed over at once (not after the Lease expires)
        assert b.proc is not None
        b.proc.terminate()
        assert b.proc.wait(30) == 0
        assert labelled(kube, ns) == set()
        assert kube.get(Lease, LEASE_NAME, namespace=ns).spec.holderIdentity is None
    finally:
        for op in (a, b):
            if op is not None:
                op.stop(kill=True)
                print(op.log.read_text()[-3000:])
