"""One big job in bench/operator_scale.py (`--job-pods N`: one TorchJob of a master and N-1 workers):
what is measured once its pods are Running, while its operator (or the floor's writer) still runs.

- the gang restart: one worker fails with a restartable exit code (its status patched Failed, exit
  137, as its kubelet would write it); from that write to every pod of the next attempt Running (a
  pod counts once its uid is not one of the failed attempt's). The floor's: the same pods deleted
  (with the operator's grace for a restart) and each created again once its name is free, by this
  client, to every one Running;
- how fast a reader sees the job: `torchjob describe --kube`, `torchjob list --kube` (each a whole
  command, from its start to its exit) and the dashboard's job page (`torchjob ui --kube`'s
  /api/jobs/NS/NAME, the page's one request), each answering within 2 s being the goal, and whether
  describe summarises the replicas (a line of counts) rather than printing one line per replica.

torchjob is reached through its command line only, as the rest of the bench reaches it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.types import PatchType

from scale_measure import PodG, Result, fmt

RESTART_GRACE_S = 3  # the operator's grace for a pod it stops to restart (kube/objects/pods.py)
READ_GOAL_S = 2.0  # each reader's answer, the goal
EXIT_CODE = 137  # restartable under every restartPolicy that restarts (OnFailure, ExitCode: >= 128)


def _fail_status(container: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": EXIT_CODE, "finishedAt": now, "reason": "Error"}
    return {"status": {"phase": "Failed", "containerStatuses": [
        {"name": container, "image": "example/trainer:1", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"terminated": terminated}}]}}


class NewPods:
    """Watches a namespace's pods: when every one of `want` pods whose uid is not in `old` is Running."""

    def __init__(self, client: AsyncClient, namespace: str, old: set[str], want: int) -> None:
        self.client, self.namespace, self.old, self.want = client, namespace, old, want
        self.running: set[str] = set()
        self.gone: set[str] = set()
        self.all_running, self.all_gone = asyncio.Event(), asyncio.Event()
        self.t_gone: float | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        it = self.client.list(PodG, namespace=self.namespace)
        _ = [o async for o in it]
        self.task = asyncio.create_task(self._watch(it.resourceVersion))

    async def _watch(self, rv: str) -> None:
        async for event, pod in self.client.watch(PodG, namespace=self.namespace, resource_version=rv):
            uid = pod["metadata"]["uid"]
            if uid in self.old:
                if event == "DELETED":
                    self.gone.add(uid)
                    if len(self.gone) >= len(self.old) and not self.all_gone.is_set():
                        self.t_gone = time.perf_counter()
                        self.all_gone.set()
                continue
            if event != "DELETED" and (pod.get("status") or {}).get("phase") == "Running":
                self.running.add(uid)
                if len(self.running) >= self.want:
                    self.all_running.set()

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def _pods(client: AsyncClient, namespace: str) -> list[dict[str, Any]]:
    return [p async for p in client.list(PodG, namespace=namespace)]


async def restart(client: AsyncClient, namespace: str, n_pods: int, res: Result, timeout: float,
                  act: Callable[[list[dict[str, Any]]], Any]) -> None:
    """`act(pods)` restarts the gang; notes (in `res`) the time from its start to every new pod
    Running (res.restart_s), and to every old pod gone."""
    before = await _pods(client, namespace)
    watch = NewPods(client, namespace, {p["metadata"]["uid"] for p in before}, n_pods)
    await watch.start()
    t0 = time.perf_counter()
    try:
        await act(before)
        await asyncio.wait_for(watch.all_running.wait(), timeout)
        res.restart_s = time.perf_counter() - t0
        gone = f"{watch.t_gone - t0:.2f}" if watch.t_gone is not None else "-"
        res.notes.append(f"gang restart: every pod of the next attempt Running {res.restart_s:.2f} s after the "
                         f"failure (every old pod gone after {gone} s)")
    except TimeoutError:
        res.notes.append(f"gang restart: after {timeout:.0f} s, {len(watch.running)}/{n_pods} new pods Running, "
                         f"{len(watch.gone)}/{len(before)} old ones gone")
    finally:
        watch.stop()


def fail_one(client: AsyncClient, namespace: str, job: str, n_pods: int) -> Callable[[list[dict[str, Any]]], Any]:
    """The operator's restart: one worker (the middle one) fails."""
    async def act(pods: list[dict[str, Any]]) -> None:
        name = f"{job}-worker-{(n_pods - 1) // 2}"
        pod = next(p for p in pods if p["metadata"]["name"] == name)
        container = pod["spec"]["containers"][0]["name"]
        await client.patch(PodG.Status, name, _fail_status(container), namespace=namespace,
                           patch_type=PatchType.MERGE)
    return act


def delete_and_create(client: AsyncClient, namespace: str, concurrency: int) -> Callable[[list[dict[str, Any]]], Any]:
    """The floor's restart: every pod deleted (the operator's grace), each created again, the same
    object, as soon as the watch says its name is free (no create that the API server must refuse)."""
    async def act(pods: list[dict[str, Any]]) -> None:
        sem = asyncio.Semaphore(concurrency)
        again: dict[str, dict[str, Any]] = {}
        for pod in pods:
            meta = pod["metadata"]
            spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
            again[meta["uid"]] = {"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
                k: meta[k] for k in ("name", "namespace", "labels", "annotations", "ownerReferences") if k in meta}}
        it = client.list(PodG, namespace=namespace)
        _ = [o async for o in it]
        made: list[asyncio.Task[Any]] = []

        async def create(obj: dict[str, Any]) -> None:
            async with sem:
                await client.create(PodG.from_dict(obj))

        async def watch() -> None:
            async for event, pod in client.watch(PodG, namespace=namespace, resource_version=it.resourceVersion):
                obj = again.pop(pod["metadata"]["uid"], None) if event == "DELETED" else None
                if obj is not None:
                    made.append(asyncio.create_task(create(obj)))
                if not again:
                    return

        watching = asyncio.create_task(watch())

        async def delete(name: str) -> None:
            async with sem:
                await client.delete(PodG, name, namespace=namespace, grace_period=RESTART_GRACE_S)

        await asyncio.gather(*(delete(p["metadata"]["name"]) for p in pods))
        await watching
        await asyncio.gather(*made)
    return act


# --------------------------------------------------------------------------------- readers


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {out.returncode}: {out.stderr[-1500:]}")
    return took, out.stdout


def readers(kubeconfig: str, namespace: str, job: str, env: dict[str, str], res: Result) -> None:
    """describe, list and the dashboard's job page, each timed (a note in `res`, and res.reads)."""
    base = [sys.executable, "-m", "torchjob"]
    where = ["--kube", "--kubeconfig", kubeconfig, "-n", namespace]
    reads: dict[str, float] = {}
    try:
        reads["describe --kube"], text = _timed([*base, "describe", *where, job], env)
        lines = text.splitlines()
        reads["list --kube"], _ = _timed([*base, "list", *where], env)
        reads["dashboard job page"], page = dashboard(base, where, namespace, job, env)
    except Exception as e:  # said with the results, not hidden
        res.notes.append(f"readers: {e}")
        return
    res.reads = reads
    said = ", ".join(f"{k} {v:.2f} s" for k, v in reads.items())
    met = "met" if all(v <= READ_GOAL_S for v in reads.values()) else "NOT met"
    res.notes.append(f"readers of the job: {said} (each within {READ_GOAL_S:.0f} s: {met}); describe printed "
                     f"{len(lines)} lines; the job page {page} bytes")


def dashboard(base: list[str], where: list[str], namespace: str, job: str, env: dict[str, str]) -> tuple[float, int]:
    """`torchjob ui --kube`: its job page's request, once the server is up (its URL printed)."""
    ui = subprocess.Popen([*base, "ui", *where, "--no-browser"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    try:
        assert ui.stdout is not None
        url = ui.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"torchjob ui printed {url!r}, not its URL")
        root, token = url.split("/?token=")
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"{root}/api/jobs/{namespace}/{job}?token={token}", timeout=60) as r:
            body = r.read()
        return time.perf_counter() - t0, len(body)
    finally:
        ui.terminate()
        try:
            ui.wait(10)
        except subprocess.TimeoutExpired:
            ui.kill()
            ui.wait()


def rows(results: list[Result]) -> list[tuple[str, Callable[[Result], str]]]:
    """The table's rows of a big job's phases."""
    return [("gang restart: every pod Running again (s)", lambda r: fmt(r.restart_s)),
            *((f"{what} answered after (s)", (lambda r, w=what: fmt(r.reads.get(w))))
              for what in ("describe --kube", "list --kube", "dashboard job page"))]
