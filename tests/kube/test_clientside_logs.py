"""The `--kube` log view is bounded and no page waits for another (issue 30, item 7): a tail asks
the API server for its last lines and at most `limit_bytes` of them, and the dashboard holds no lock
across a call to the cluster. Against a real kube-apiserver and the operator, the pods on a KWOK
node (whose log server answers two fixed lines)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from tests.kube.conftest import Operator
from tests.kube.test_cli_kube import running_on_kwok
from torchjob.connect import Target
from torchjob.kube.clientside.kube_runtime import KubeRuntime
from torchjob.kube.clientside.kube_runtime import logs as kube_logs
from torchjob.ui.source import Source

pytestmark = pytest.mark.kube
FIRST = "fake container output from KWOK (scripts/dev-cluster.sh)"


def test_a_tail_asks_the_api_server_for_its_lines_and_a_bounded_number_of_bytes(
        kube: Client, namespace: str, operator: Operator) -> None:
    running_on_kwok(kube, "lb", namespace)
    assert list(kube_logs(kube, "lb", namespace, "master-0")) == [f"[master-0] {FIRST}", "[master-0] second line"]
    assert list(kube_logs(kube, "lb", namespace, "master-0", tail=1)) == ["[master-0] second line"]
    # 20 bytes of the last two lines: what the server sent, not what this side cut
    assert list(kube_logs(kube, "lb", namespace, "master-0", tail=2, limit_bytes=20)) == [f"[master-0] {FIRST[:20]}"]


class GatedClient(Client):
    """A real client whose listing of pods, in the thread named `slow-page`, waits for the test's word:
    a slow API server, made certain."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.entered, self.release = threading.Event(), threading.Event()

    def list(self, res: Any, *args: Any, **kw: Any) -> Any:
        if res is Pod and threading.current_thread().name == "slow-page":
            self.entered.set()
            self.release.wait(30)
        return super().list(res, *args, **kw)


def test_a_page_waiting_for_the_cluster_does_not_hold_up_another(kubeconfig: str, kube: Client, namespace: str,
                                                                  operator: Operator) -> None:
    running_on_kwok(kube, "slow", namespace)
    gated = GatedClient(config=kube.config, field_manager="torchjob-tests")

    def connect_to(target: Target) -> KubeRuntime:
        rt = KubeRuntime(kubeconfig, namespace=target.namespace)
        rt._client = gated
        return rt

    source = Source(Target(True, kubeconfig, None, namespace), connect_to=connect_to)
    slow = threading.Thread(target=source.log, args=(namespace, "slow", "master-0", None), name="slow-page")
    slow.start()
    try:
        assert gated.entered.wait(30)
        answered: list[dict[str, Any]] = []
        other = threading.Thread(target=lambda: answered.append(source.job(namespace, "slow")), name="other-page")
        other.start()
        other.join(15)
        assert answered and answered[0]["name"] == "slow", "another page waited for the slow one's API call"
    finally:
        gated.release.set()
        slow.join(30)
