"""`torchjob mcp` as an agent uses it: the official MCP client (the `mcp` SDK's ClientSession) starts
`torchjob mcp` over stdio, or connects to `torchjob mcp --http` over streamable HTTP, lists the tools,
previews and submits a 1x2 job (real torchrun, real gloo over loopback), waits for it, reads its
progress and loss, reads a failing job's root cause; a submit without a plan is refused, mistakes are
tool errors naming the argument, and `--read-only` lists no tool that changes anything."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.local.conftest import PROGRAMS, REPO

pytest.importorskip("mcp")
from mcp.client.streamable_http import streamable_http_client

from mcp import ClientSession, StdioServerParameters, stdio_client

pytestmark = pytest.mark.e2e
TORCHJOB = [sys.executable, "-m", "torchjob"]
CHANGING = {"submit_job", "suspend_job", "resume_job", "delete_job", "job_stacks"}
READING = {"list_jobs", "describe_job", "job_logs", "validate_job", "preview_job", "convert_job", "wait_job"}

# Ranks that wait for what never comes, as a hung job's do (job_stacks says where).
HANGING = """\
import time


def wait_for_data():
    time.sleep(600)


wait_for_data()
"""

# A rank that fails, as a training script's bug does: torch records its error (the root cause).
FAILING = """\
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("the loss went to nan at step 3")
    time.sleep(30)  # stopped when rank 1 fails: the gang goes down


main()
"""


def failing_document(name: str) -> str:
    return f"""\
apiVersion: torchjob.dev/v1
kind: TorchJob
metadata:
  name: {name}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              image: unused-locally
              command: [python, fail.py]
    Worker:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              image: unused-locally
              command: [python, fail.py]
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The agent's project: a training script, a failing one, a hanging one; the server runs here with its own
    home."""
    (tmp_path / "train.py").write_text((PROGRAMS / "ddp_progress.py").read_text())
    (tmp_path / "fail.py").write_text(FAILING)
    (tmp_path / "hang.py").write_text(HANGING)
    return tmp_path


def env_of(workdir: Path) -> dict[str, str]:
    return {**os.environ, "TORCHJOB_HOME": str(workdir / "home")}


def over_stdio(workdir: Path, *flags: str) -> Callable[[Callable[[ClientSession], Awaitable[Any]]], Any]:
    """Run `scenario(session)` against `torchjob mcp FLAGS` started over stdio, as Claude Code starts it."""
    def run(scenario: Callable[[ClientSession], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            params = StdioServerParameters(command=TORCHJOB[0], args=[*TORCHJOB[1:], "mcp", *flags],
                                           env=env_of(workdir), cwd=str(workdir))
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await scenario(session)
        return asyncio.run(asyncio.wait_for(main(), 280))  # under pytest-timeout's 300 s: the client's own error
    return run


@pytest.fixture
def http_server(workdir: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """`torchjob mcp --http [flags]` (indirect parameter: its flags); yields the URL it printed first."""
    flags = getattr(request, "param", ())
    proc = subprocess.Popen([*TORCHJOB, "mcp", "--http", *flags], cwd=workdir, env=env_of(workdir),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and "/mcp?token=" in url, (url, proc.stderr and proc.stderr.read())
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def over_http(url: str, scenario: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await scenario(session)
    return asyncio.run(asyncio.wait_for(main(), 240))


async def call(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    """A tool's structured content; a tool error is returned as it is (its `error`), never raised."""
    result = await session.call_tool(tool, args)
    data = result.structured_content
    assert isinstance(data, dict), result
    assert result.content and result.content[0].type == "text" and result.content[0].text  # a short text beside it
    assert bool(result.is_error) == ("error" in data), result
    return data


async def run_a_1x2_job(session: ClientSession, **job: str) -> dict[str, Any]:
    """Preview, submit (with the plan id), wait: what an agent does to run a job."""
    plan = await call(session, "preview_job", **job)
    assert plan["plan_id"] and plan["name"] and plan["where"] == "this machine", plan
    submitted = await call(session, "submit_job", plan_id=plan["plan_id"], **job)
    assert submitted["name"] == plan["name"] and submitted["state"] in ("Created", "Running"), submitted
    again = await call(session, "submit_job", plan_id=plan["plan_id"], **job)  # one job per plan
    assert again["error"]["field"] == "plan_id"
    done = await call(session, "wait_job", name=plan["name"], timeout_s=180)
    assert done["reached"] and done["state"] == "Succeeded", done
    return done


def test_an_agent_runs_watches_debugs_and_cleans_up_local_jobs_over_stdio(workdir: Path) -> None:
    async def scenario(s: ClientSession) -> None:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert set(tools) == READING | CHANGING
        assert all(tools[n].annotations and tools[n].annotations.read_only_hint for n in READING)
        assert tools["delete_job"].annotations and tools["delete_job"].annotations.destructive_hint
        assert tools["submit_job"].annotations and tools["submit_job"].annotations.destructive_hint is False
        assert "plan_id" in tools["submit_job"].input_schema["properties"]

        pages = {str(r.uri) for r in (await s.list_resources()).resources}
        assert {"torchjob://reference/cli.md", "torchjob://reference/torchjob.md", "torchjob://examples/ddp/job.yaml"} \
            <= pages
        page = await s.read_resource("torchjob://reference/torchjob.md")
        assert "pytorchReplicaSpecs" in page.contents[0].text  # type: ignore[union-attr]

        command = "-j 1x2 train.py -- --steps 6 --step-time 0.05"
        refused = await call(s, "submit_job", command=command)
        assert refused["error"]["field"] == "plan_id" and "preview_job" in refused["error"]["fix"]
        other = await call(s, "preview_job", command="-j 1x2 train.py -- --steps 1")
        refused = await call(s, "submit_job", command=command, plan_id=other["plan_id"])  # another job's plan
        assert refused["error"]["field"] == "plan_id" and "another command" in refused["error"]["reason"]

        done = await run_a_1x2_job(s, command=command)
        name = done["name"]
        assert done["progress"]["step"] == 6 and done["progress"]["total"] == 6 and done["world_size"] == 2
        job = await call(s, "describe_job", name=name)
        assert job["state"] == "Succeeded" and job["root_cause"] is None
        loss = job["progress"]["metrics"]["loss"]
        assert isinstance(loss, float) and loss > 0
        assert job["history"]["steps"][-1] == 6 and job["history"]["series"]["loss"][-1] == pytest.approx(loss)
        assert [a["exit_code"] for a in job["attempts"]] == [0]
        listed = await call(s, "list_jobs")
        assert [(j["name"], j["state"]) for j in listed["jobs"]] == [(name, "Succeeded")]
        logs = await call(s, "job_logs", name=name, tail=50, ranks="1")
        assert "rank 1 done after 6 steps" in logs["text"] and "rank 0 done" not in logs["text"]
        ended = await call(s, "job_stacks", name=name)  # an ended job has no process to ask
        assert ended["error"]["field"] == "name" and "has ended (Succeeded)" in ended["error"]["reason"], ended
        assert tools["job_stacks"].annotations and tools["job_stacks"].annotations.destructive_hint is False

        # a hung job: where its ranks are (they start at their own pace)
        await call(s, "submit_job", command="-j 1x2 --name hung hang.py",
                   plan_id=(await call(s, "preview_job", command="-j 1x2 --name hung hang.py"))["plan_id"])
        where: dict[str, Any] = {}
        for _ in range(120):
            where = await call(s, "job_stacks", name="hung")
            if where.get("short") == "ranks 0-1 in wait_for_data (hang.py:5)":
                break
            await asyncio.sleep(0.5)
        assert where.get("short") == "ranks 0-1 in wait_for_data (hang.py:5)", where
        assert where["groups"][0]["summary"].startswith("ranks 0-1: wait_for_data (hang.py:5) <- <module> (hang.py:8)")
        assert (await call(s, "delete_job", name="hung"))["state"] == "Deleted"

        bad = "apiVersion: torchjob.dev/v1\nkind: TorchJob\nmetadata: {name: x}\nspec:\n  pytorchReplicaSpecs:\n" \
              "    Master: {replicas: 0}\n"
        invalid = await call(s, "validate_job", document=bad)
        assert invalid["error"]["field"] == "document" and invalid["error"]["problems"], invalid
        assert all(p["field"] and p["reason"] for p in invalid["error"]["problems"])
        unknown = await call(s, "describe_job", name="no-such-job")
        assert unknown["error"]["field"] == "name" and name in unknown["error"]["fix"]
        typo = await call(s, "preview_job", command="-j 1x2 train.py --steps 3")
        assert typo["error"]["field"] == "command" and "--" in typo["error"]["fix"], typo
        wrong = await call(s, "wait_job", name=name, timeout_s=10_000)
        assert wrong["error"]["field"] == "timeout_s"

        failed = await call(s, "wait_job", name=(await call(s, "submit_job", document=failing_document("fails"), **{
            "plan_id": (await call(s, "preview_job", document=failing_document("fails")))["plan_id"]}))["name"],
            timeout_s=180)
        assert failed["state"] == "Failed" and failed["reached"], failed
        cause = (await call(s, "describe_job", name="fails"))["root_cause"]
        assert "worker-0" in cause and "the loss went to nan at step 3" in cause and "ValueError" in cause, cause

        for n in (name, "fails"):
            assert (await call(s, "delete_job", name=n))["state"] == "Deleted"
        assert (await call(s, "list_jobs"))["jobs"] == []

    over_stdio(workdir)(scenario)


def test_an_agent_runs_a_job_over_streamable_http_with_the_token(http_server: str, workdir: Path) -> None:
    base, _, token = http_server.partition("?token=")
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):  # no token, a wrong one: refused
        req = urllib.request.Request(base, data=b"{}", headers={"Content-Type": "application/json", **headers})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        assert e.value.code == 401
    # the token as a header (what an agent's configuration sends) is let through to the SDK: it answers
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl-like", "version": "0"}}}
    req = urllib.request.Request(base, data=json.dumps(initialize).encode(), headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as answer:
        assert answer.status == 200 and b'"torchjob"' in answer.read()
    document = (REPO / "examples" / "torchrun" / "job.yaml").read_text()

    async def scenario(s: ClientSession) -> None:
        assert {t.name for t in (await s.list_tools()).tools} == READING | CHANGING
        valid = await call(s, "validate_job", document=document)
        assert valid["valid"] and valid["name"]
        kubeflow = (await call(s, "convert_job", document=document, to="kubeflow"))["document"]
        assert "kind: PyTorchJob" in kubeflow
        done = await run_a_1x2_job(s, command="-j 1x2 --name over-http train.py -- --steps 4 --step-time 0.05")
        assert done["name"] == "over-http" and done["progress"]["metrics"]["loss"] > 0
        assert done["progress"]["step"] == 4

    over_http(http_server, scenario)
    assert json.loads(subprocess.run([*TORCHJOB, "list", "-o", "json"], env=env_of(workdir), capture_output=True,
                                     text=True, check=True).stdout)[0]["state"] == "Succeeded"


@pytest.mark.parametrize("http_server", [("--read-only",)], indirect=True)
def test_read_only_lists_no_tool_that_changes_anything(http_server: str, workdir: Path) -> None:
    async def scenario(s: ClientSession) -> None:
        tools = (await s.list_tools()).tools
        assert {t.name for t in tools} == READING
        assert all(t.annotations and t.annotations.read_only_hint for t in tools)
        result = await s.call_tool("submit_job", {"command": "-j 1x2 train.py"})
        assert result.is_error  # not served: the SDK says the tool is unknown

    over_http(http_server, scenario)
