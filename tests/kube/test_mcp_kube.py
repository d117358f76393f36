"""`torchjob mcp --kube` against the real control plane with the operator running, driven by the official
MCP client over stdio as an agent drives it: preview (the objects the operator would be asked for), submit
only with the plan, wait while the test plays the kubelet and the pods (they run and report their step and
loss to the operator's endpoint with their own tokens; the master exits 0): until a step, with the loss,
then to the end; describe, delete; a namespace outside the server's scope and a submit without a plan are
tool errors naming the argument. The server reads the cluster with the user's kubeconfig, as `torchjob --kube` does."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client

from tests.jobs import job_data
from tests.kube.conftest import Operator, set_pod, wait_job
from tests.kube.reporting import SERVICE_ACCOUNT, PodReporter, ca_file, make_service_account, pod_token, url
from tests.kube.test_operator import wait_pods
from torchjob.kube.machinery.client import TorchJobRes

pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client

pytestmark = pytest.mark.kube


async def call(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, args)
    data = result.structured_content
    assert isinstance(data, dict) and bool(result.is_error) == ("error" in data), result
    return data


def running(status: dict[str, Any]) -> bool:
    return any(c["type"] == "Running" and c["status"] == "True" for c in status.get("conditions", []))


def test_an_agent_runs_watches_and_deletes_a_job_on_the_cluster(kube: Client, kubeconfig: str, namespace: str,
                                                                operator: Operator, tmp_path: Path) -> None:
    make_service_account(kube, namespace)  # the pods report progress with its tokens
    data = job_data("agent", workers=1, command=["python", "train.py"])
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["serviceAccountName"] = SERVICE_ACCOUNT
        rspec["template"]["spec"]["containers"][0]["image"] = "example/trainer:1"
    document = yaml.safe_dump(data)
    watched = threading.Event()  # the agent saw the job's progress

    def kubelet() -> None:
        """The pods run once the operator made them and report their step and loss to the operator's
        endpoint, as torchjob.report in a pod does; the master exits 0 once the agent saw the progress."""
        pods = wait_pods(kube, "agent", namespace, 2, timeout=90)
        for p in pods:
            set_pod(kube, p, "Running")
        wait_job(kube, "agent", namespace, running, timeout=60)
        endpoint, ca = url(operator.progress_url, namespace, "agent"), ca_file(kube, namespace, tmp_path)
        reporters = [PodReporter(endpoint, pod_token(kube, p, "agent"), ca, tmp_path) for p in pods]
        watched.wait(120)
        for r in reporters:
            r.quiet()
        set_pod(kube, next(p for p in pods if p.metadata.name == "agent-master-0"), "Succeeded", 0)

    async def scenario(s: ClientSession) -> None:
        plan = await call(s, "preview_job", document=document)
        assert plan["where"] == "the cluster" and plan["name"] == "agent"
        assert "kind: TorchJob" in plan["documents"] and "example/trainer:1" in plan["documents"], plan
        refused = await call(s, "submit_job", document=document)
        assert refused["error"]["field"] == "plan_id"
        elsewhere = await call(s, "list_jobs", namespace="kube-system")
        assert elsewhere["error"]["field"] == "namespace" and f"-n {'kube-system'}" in elsewhere["error"]["fix"]
        mine = await call(s, "submit_job", document=document, plan_id=plan["plan_id"])
        assert mine["name"] == "agent" and mine["where"] == "the cluster"
        assert kube.get(TorchJobRes, "agent", namespace=namespace) is not None
        play = threading.Thread(target=kubelet, daemon=True)
        play.start()
        at = await call(s, "wait_job", name="agent", step=5, timeout_s=120)
        watched.set()
        assert at["reached"] and at["progress"]["step"] >= 5 and at["progress"]["total"] == 1000, at
        assert 0 < at["progress"]["metrics"]["loss"] <= 0.2, at  # the reporters send 1/step
        done = await call(s, "wait_job", name="agent", timeout_s=120)
        assert done["reached"] and done["state"] == "Succeeded", done
        job = await call(s, "describe_job", name="agent")
        assert job["namespace"] == namespace and job["state"] == "Succeeded"
        assert any(a["replica"] == "master-0" and a["exit_code"] == 0 for a in job["attempts"]), job["attempts"]
        assert [j["name"] for j in (await call(s, "list_jobs"))["jobs"]] == ["agent"]
        unknown = await call(s, "describe_job", name="nobody")
        assert unknown["error"]["field"] == "name"
        assert (await call(s, "delete_job", name="agent"))["state"] == "Deleted"

    async def main() -> None:
        args = ["-m", "torchjob", "mcp", "--kube", "-n", namespace]
        params = StdioServerParameters(command=sys.executable, args=args, cwd=str(tmp_path),
                                       env={**os.environ, "KUBECONFIG": kubeconfig,
                                            "TORCHJOB_HOME": str(tmp_path / "home")})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await scenario(session)

    asyncio.run(asyncio.wait_for(main(), 240))
