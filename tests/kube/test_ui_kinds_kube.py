"""`torchjob ui --kube` over a TorchJob and a Kubeflow Trainer TrainJob of the same name in one
namespace, against the real control plane with the operator as a process (the TrainJob's pods run on
the dev cluster's KWOK node, whose kubelet answers logs): each page, log, stream and action of the
dashboard's HTTP API reaches the job of the kind it names (`?kind=`), a bare name two kinds hold is
refused (409) naming both kinds and each one's URL, and a bare name one kind holds still works; in a
real browser each row links to its own job's page, an old bare link offers both, and the page's
actions act on the job it shows."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError

from tests.jobs import job_data
from tests.kube.test_operator import create
from tests.kube.test_served_kinds_clientside import (  # noqa: F401 (fixtures used here)
    LINE,
    running_pods,
    served_api,
    served_operator,
    trainjob_on_kwok,
    wait_for,
)
from tests.ui.conftest import Dashboard, Page
from torchjob.kube.machinery.client import TorchJobRes, TrainJobRes

pytestmark = pytest.mark.kube


class Api:
    """The dashboard's HTTP API as its page calls it (the token in the header)."""

    def __init__(self, d: Dashboard) -> None:
        self.d = d

    def call(self, path: str, method: str = "GET") -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(self.d.base + path, method=method, headers={"X-Torchjob-Token": self.d.token})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def stream(self, query: str, event: str) -> dict[str, Any]:
        """The first `event` the stream of `?query` sends (its data)."""
        req = urllib.request.Request(f"{self.d.base}/api/stream?{query}", headers={"X-Torchjob-Token": self.d.token})
        with urllib.request.urlopen(req, timeout=60) as r:
            name = None
            for raw in r:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: ") and name == event:
                    data: dict[str, Any] = json.loads(line.removeprefix("data: "))
                    if event != "problem" or data["error"]:
                        return data
        raise AssertionError(f"the stream ended before an {event} event")


def same_name_pair(kube: Client, namespace: str) -> tuple[str, str, list[Any]]:
    """A TrainJob `same` whose two pods run, and a TorchJob `same` made suspended (both cannot run:
    one Service name); their uids and the TrainJob's pods."""
    kube.create(codecs.from_dict(trainjob_on_kwok("same", namespace)), namespace=namespace)
    pods = running_pods(kube, "same", namespace, 2)
    own = job_data("same", workers=0)
    own["spec"].setdefault("runPolicy", {})["suspend"] = True
    create(kube, own, namespace)
    tj_uid = kube.get(TorchJobRes, "same", namespace=namespace).metadata.uid
    train_uid = kube.get(TrainJobRes, "same", namespace=namespace).metadata.uid
    return tj_uid, train_uid, pods


@pytest.mark.usefixtures("served_operator")
def test_each_page_log_stream_and_action_of_the_api_reaches_the_job_of_its_kind(
        kube: Client, kubeconfig: str, namespace: str, tmp_path: Any, dashboard: Any) -> None:
    tj_uid, train_uid, pods = same_name_pair(kube, namespace)
    d: Dashboard = dashboard(tmp_path, "--kube", "-n", namespace, env={"KUBECONFIG": kubeconfig})
    api = Api(d)
    base = f"/api/jobs/{namespace}/same"

    # a bare name two kinds hold: 409, the kinds, and the URL of each (no message text to read)
    code, body = api.call(base)
    assert code == 409, body
    assert body["kinds"] == ["TorchJob", "TrainJob"]
    assert [c["url"] for c in body["choices"]] == [f"{base}?kind=torchjob", f"{base}?kind=trainjob"]
    assert [c["page"] for c in body["choices"]] == [f"/#/job/{namespace}/torchjob/same",
                                                    f"/#/job/{namespace}/trainjob/same"]
    assert f"2 jobs are named 'same' in {namespace}: a TorchJob and a TrainJob" in body["error"]
    assert f"{base}?kind=trainjob" in body["error"] and "token" not in body["error"]

    # the page of each kind: its own uid, kind and attempts
    code, train = api.call(f"{base}?kind=trainjob")
    assert code == 200 and train["kind"] == "TrainJob" and train["uid"] == train_uid, train
    assert sorted(a["pod"] for a in train["attempts"]) == sorted(p.metadata.name for p in pods)
    code, own = api.call(f"{base}?kind=TorchJob")  # any case, as KIND/NAME takes it
    assert code == 200 and own["kind"] is None and own["uid"] == tj_uid, own
    # made suspended: no pod of its own, only each replica's next attempt, which starts when resumed
    assert own["attempts"] and all(a["pod"] is None and a["reason"] == "Suspended (starts when resumed)"
                                   for a in own["attempts"]), own["attempts"]
    code, body = api.call(f"{base}?kind=pytorchjob")
    assert code == 404 and body["error"].startswith("no job named 'pytorchjob/same'"), body
    code, body = api.call(f"{base}?kind=deployment")
    assert code == 409 and "is not KIND/NAME with a kind torchjob shows" in body["error"], body

    # logs: the TrainJob's pod's lines; the TorchJob (no pod) has none; a bare name is refused
    replica = train["attempts"][0]["replica"]
    code, log = api.call(f"{base}/log?kind=trainjob&replica={replica}")
    assert code == 200 and LINE in log["text"], log
    code, body = api.call(f"{base}/log?kind=torchjob&replica={replica}")
    assert code == 409 and body["error"].startswith("job 'same' has no output yet"), body
    code, body = api.call(f"{base}/log?replica={replica}")
    assert code == 409 and body["kinds"] == ["TorchJob", "TrainJob"], body
    assert body["choices"][1]["url"] == f"{base}/log?replica={replica}&kind=trainjob"

    # the live stream of a job page
    assert api.stream(f"job={namespace}/same&kind=trainjob", "job")["uid"] == train_uid
    assert api.stream(f"job={namespace}/same&kind=torchjob", "job")["uid"] == tj_uid
    problem = api.stream(f"job={namespace}/same", "problem")["error"]
    assert "2 jobs are named 'same'" in problem and f"#/job/{namespace}/trainjob/same" in problem, problem

    # actions: a bare name acts on neither; each kind's acts on its own
    code, body = api.call(f"{base}/suspend", "POST")
    assert code == 409 and body["kinds"] == ["TorchJob", "TrainJob"], body
    assert not kube.get(TrainJobRes, "same", namespace=namespace).to_dict()["spec"].get("suspend")
    code, body = api.call(f"{base}/suspend?kind=trainjob", "POST")
    assert code == 200 and body == {"ok": True, "verb": "suspend", "name": "same", "kind": "trainjob"}, body
    assert kube.get(TrainJobRes, "same", namespace=namespace).to_dict()["spec"]["suspend"] is True
    code, body = api.call(f"{base}/resume?kind=trainjob", "POST")
    assert code == 200, body
    assert kube.get(TrainJobRes, "same", namespace=namespace).to_dict()["spec"]["suspend"] is False
    assert kube.get(TorchJobRes, "same", namespace=namespace).to_dict()["spec"]["runPolicy"]["suspend"] is True
    code, body = api.call(f"{base}/delete?kind=torchjob", "POST")
    assert code == 200, body
    with pytest.raises(ApiError):
        wait_for("the TorchJob gone", lambda: kube.get(TorchJobRes, "same", namespace=namespace) and None, 30)
    assert kube.get(TrainJobRes, "same", namespace=namespace).metadata.uid == train_uid

    # one kind holds the name now: the old bare URL is that job's
    code, body = api.call(base)
    assert code == 200 and body["kind"] == "TrainJob" and body["uid"] == train_uid, body
    code, body = api.call(f"{base}?kind=torchjob")
    assert code == 404, body


@pytest.mark.usefixtures("served_operator")
def test_the_page_links_streams_and_acts_by_kind(kube: Client, kubeconfig: str, namespace: str, tmp_path: Any,
                                                page: Page, dashboard: Any) -> None:
    tj_uid, train_uid, _ = same_name_pair(kube, namespace)
    d: Dashboard = dashboard(tmp_path, "--kube", "-n", namespace, env={"KUBECONFIG": kubeconfig})
    p = page.page
    p.goto(d.url)
    train_row = p.locator('tr[data-job="same"][data-kind="TrainJob"]')
    train_row.wait_for(timeout=30_000)
    own_row = p.locator('tr[data-job="same"][data-kind=""]')
    own_row.wait_for()
    assert train_row.locator("a").get_attribute("href") == f"#/job/{namespace}/trainjob/same"
    assert own_row.locator("a").get_attribute("href") == f"#/job/{namespace}/torchjob/same"

    # the TrainJob's page: its kind, its two pods' attempts, its log
    train_row.locator("a").click()
    p.locator("#job-kind", has_text="TrainJob").wait_for()
    assert p.evaluate("tj.job.uid") == train_uid
    p.locator('[data-testid="attempts"] tbody tr').nth(1).wait_for()
    p.locator("#log .line", has_text=LINE).first.wait_for(timeout=30_000)
    # suspend through the page: the TrainJob's spec.suspend, not the TorchJob's
    p.click("#act-suspend")
    assert p.locator('[data-testid="confirm"]').inner_text().startswith("Suspend TrainJob same?")
    p.click("#confirm-yes")
    p.locator('[data-testid="done"]').wait_for()
    assert kube.get(TrainJobRes, "same", namespace=namespace).to_dict()["spec"]["suspend"] is True

    # an old bare link: both kinds offered, none opened; the TorchJob's link opens the TorchJob
    p.goto(d.job_url("same", namespace))
    p.locator("#choose a").nth(1).wait_for()
    assert p.locator("#choose a").all_inner_texts() == ["TorchJob same", "TrainJob same"]
    p.locator('#choose a[data-kind="torchjob"]').click()
    p.locator("#job-name", has_text="same").wait_for()
    assert wait_for("the TorchJob's page", lambda: p.evaluate("tj.job && tj.job.uid")) == tj_uid
    assert p.locator("#job-kind").inner_text() == ""
    assert p.evaluate("location.hash") == f"#/job/{namespace}/torchjob/same"
    # delete through the page: the TorchJob goes, the TrainJob stays
    p.click("#act-delete")
    p.click("#confirm-yes")
    wait_for("the jobs page", lambda: p.evaluate("location.hash") == "#/")
    with pytest.raises(ApiError):
        wait_for("the TorchJob gone", lambda: kube.get(TorchJobRes, "same", namespace=namespace) and None, 30)
    assert kube.get(TrainJobRes, "same", namespace=namespace).metadata.uid == train_uid

    # one kind holds the name now: an old bare link opens it, and its address names the kind
    p.locator('tr[data-job="same"][data-kind=""]').wait_for(state="detached")
    p.goto(d.job_url("same", namespace))
    assert wait_for("the TrainJob's page", lambda: p.evaluate("tj.job && tj.job.uid")) == train_uid
    wait_for("the address with the kind", lambda: p.evaluate("location.hash") == f"#/job/{namespace}/trainjob/same")
    assert page.dialogs == [] and page.errors == []
