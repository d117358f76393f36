"""One big job in bench/operator_scale.py (`--job-pods N`: one TorchJob of a master and N-1 workers):
what is measured once its pods are Running, while its operator (or the floor's writer) still runs.

- the gang restart: one worker fails with a restartable exit code (its status patched Failed, exit
  137, as its kubelet would write it); from that write to every pod of the next attempt Running (a
  pod counts once its uid is not one of the failed attempt's). The floor's: the same pods deleted
  (with the operator's grace for a restart, the template's 0: the API server removes each at once) and
  each created again once the old one is gone, by this client, to every one Running; under a name of its
  own (`-again`), from the runs made with a grace, when KWOK (which deletes a pod by its name, and may ask
  twice) took a new pod for the old;
- how fast a reader sees the job: `torchjob describe --kube`, `torchjob list --kube` (each a whole
  command, from its start to its exit) and the dashboard's job page (`torchjob ui --kube`'s
  /api/jobs/NS/NAME, the page's one request), each answering within 2 s being the goal, and whether
  describe summarises the replicas (a line of counts) rather than printing one line per replica.

torchjob is reached through its command line only, as the rest of the bench reaches it."""

from __future__ import annotations

import asyncio
import http.client
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.types import OnErrorAction, OnErrorResult, PatchType

from scale_measure import PodG, Result, fmt

try:  # the HTTP client lightkube uses (its own fork of httpx in lightkube >= 1.0)
    import httpx2 as httpx
except ImportError:
    import httpx  # type: ignore[no-redef]

RESTART_GRACE_S = 0  # the operator's grace for a pod it stops to restart: the template's (operator_scale.torchjob)
READ_GOAL_S = 2.0  # each reader's answer, the goal
AGAIN = "-again"  # the floor's restarted pods' names: the old name and this (below)
EXIT_CODE = 137  # restartable under every restartPolicy that restarts (OnFailure, ExitCode: >= 128)


def _fail_status(container: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": EXIT_CODE, "finishedAt": now, "reason": "Error"}
    return {"status": {"phase": "Failed", "containerStatuses": [
        {"name": container, "image": "example/trainer:1", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"terminated": terminated}}]}}


QUIET_S = 5.0  # a watch silent this long while the goal is not reached: the pods listed again
TRIES = 5  # a create or delete failing (a timeout under load) asked again, this many times at most


def _retry(e: Exception, count: int) -> OnErrorResult:
    """A watch that errs (a read timeout, a dropped stream) goes on from its last version, or anew
    where that is gone (lightkube's RETRY); a second later when it errs in a row."""
    return OnErrorResult(OnErrorAction.RETRY, sleep=0 if count <= 1 else 1.0)


async def follow(client: AsyncClient, namespace: str, rv: str, tell: Callable[[str, dict[str, Any]], None],
                 listed: Callable[[list[dict[str, Any]]], None], done: asyncio.Event) -> None:
    """The namespace's pods from `rv` until `done`: each event to tell(event, pod); whenever the watch
    has said nothing for QUIET_S, every pod listed again to listed(pods). A watch resumed without its
    version (410: the API server's window passed it, as thousands of deletions do) misses the
    deletions in between, which only a listing shows: the floor's restart stalled on that (642 of
    4,096 pods made again in 900 s)."""
    last = [time.monotonic()]

    async def watch() -> None:
        async for event, pod in client.watch(PodG, namespace=namespace, resource_version=rv, on_error=_retry):
            last[0] = time.monotonic()
            tell(event, pod)

    task = asyncio.create_task(watch())
    try:
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), QUIET_S)
            except TimeoutError:
                if task.done():  # a bug here, not a stall: said
                    task.result()
                if time.monotonic() - last[0] >= QUIET_S and not done.is_set():
                    listed(await _pods(client, namespace))
                    last[0] = time.monotonic()
    finally:
        task.cancel()


class NewPods:
    """A namespace's pods: when every one of `want` pods whose uid is not in `old` is Running."""

    def __init__(self, old: set[str], want: int) -> None:
        self.old, self.want = old, want
        self.running: set[str] = set()
        self.gone: set[str] = set()
        self.all_running = asyncio.Event()
        self.t_gone: float | None = None

    def tell(self, event: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self.old:
            if event == "DELETED":
                self._gone({uid})
        elif event == "DELETED":
            self.running.discard(uid)
        elif (pod.get("status") or {}).get("phase") == "Running":
            self._running(uid)

    def listed(self, pods: list[dict[str, Any]]) -> None:
        there = {p["metadata"]["uid"] for p in pods}
        self._gone(self.old - there)
        self.running &= there
        for p in pods:
            if p["metadata"]["uid"] not in self.old and (p.get("status") or {}).get("phase") == "Running":
                self._running(p["metadata"]["uid"])

    def _gone(self, uids: set[str]) -> None:
        self.gone |= uids
        if self.t_gone is None and len(self.gone) >= len(self.old):
            self.t_gone = time.perf_counter()

    def _running(self, uid: str) -> None:
        self.running.add(uid)
        if len(self.running) >= self.want:
            self.all_running.set()


async def _pods(client: AsyncClient, namespace: str) -> list[dict[str, Any]]:
    return [p async for p in client.list(PodG, namespace=namespace)]


async def _listed(client: AsyncClient, namespace: str) -> tuple[list[dict[str, Any]], str]:
    it = client.list(PodG, namespace=namespace)
    pods = [p async for p in it]
    return pods, str(it.resourceVersion)


async def _tried(call: Callable[[], Any]) -> Any:
    """A write asked again when it fails other than as refused for good (a timeout under load); its
    answer (None: gone or there already)."""
    for n in range(TRIES):
        try:
            return await call()
        except ApiError as e:
            if e.status.code in (404, 409):  # gone already / there already (an answer lost to a timeout)
                return None
            if n == TRIES - 1:
                raise
        except httpx.TransportError:
            if n == TRIES - 1:
                raise
        await asyncio.sleep(1)


async def restart(client: AsyncClient, namespace: str, n_pods: int, res: Result, timeout: float,
                  act: Callable[[list[dict[str, Any]]], Any]) -> None:
    """`act(pods)` restarts the gang; notes (in `res`) the time from its start to every new pod
    Running (res.restart_s), and to every old pod gone."""
    before, rv = await _listed(client, namespace)
    watch = NewPods({p["metadata"]["uid"] for p in before}, n_pods)
    following = asyncio.create_task(follow(client, namespace, rv, watch.tell, watch.listed, watch.all_running))
    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(asyncio.gather(act(before), watch.all_running.wait()), timeout)
        res.restart_s = time.perf_counter() - t0
        gone = f"{watch.t_gone - t0:.2f}" if watch.t_gone is not None else "-"
        res.notes.append(f"gang restart: every pod of the next attempt Running {res.restart_s:.2f} s after the "
                         f"failure (every old pod gone after {gone} s)")
    except TimeoutError:
        res.notes.append(f"gang restart: after {timeout:.0f} s, {len(watch.running)}/{n_pods} new pods Running, "
                         f"{len(watch.gone)}/{len(before)} old ones gone")
    finally:
        watch.all_running.set()
        await following


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
    object under its name and AGAIN, as soon as its old one is gone (the watch says so, or a listing: no
    create that the API server must refuse, and the same room on the nodes as the operator's)."""
    async def act(pods: list[dict[str, Any]]) -> None:
        sem = asyncio.Semaphore(concurrency)
        again: dict[str, dict[str, Any]] = {}
        for pod in pods:
            meta = pod["metadata"]
            spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
            again[meta["uid"]] = {"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
                **{k: meta[k] for k in ("namespace", "labels", "annotations", "ownerReferences") if k in meta},
                "name": meta["name"] + AGAIN}}
        _, rv = await _listed(client, namespace)
        made: list[asyncio.Task[Any]] = []
        all_made = asyncio.Event()
        # KWOK deletes a pod by its name, and may ask twice: a new pod made at once under the old one's
        # name was taken by the second ask (the 128- and 4,096-pod runs lost most of theirs so, and churned
        # for the whole phase). The new pods have names of their own; they are still watched, each made
        # again if deleted, until every one runs.
        fresh: dict[str, dict[str, Any]] = {}  # a new pod's uid -> its object
        running: set[str] = set()

        async def create(obj: dict[str, Any]) -> None:
            async with sem:
                got = await _tried(lambda: client.create(PodG.from_dict(obj)))
            if got is not None:
                fresh[got["metadata"]["uid"]] = obj

        def again_made(obj: dict[str, Any]) -> None:
            made.append(asyncio.create_task(create(obj)))

        def settled() -> None:
            if not again and len(running) >= len(pods):
                all_made.set()

        def gone(uids: set[str]) -> None:
            for uid in uids:
                obj = again.pop(uid, None)
                if obj is not None:
                    again_made(obj)

        def tell(event: str, pod: dict[str, Any]) -> None:
            uid = pod["metadata"]["uid"]
            if event == "DELETED" and uid in fresh:  # a stale delete took a new pod: made again
                running.discard(uid)
                again_made(fresh.pop(uid))
            elif event == "DELETED":
                gone({uid})
            elif uid in fresh and (pod.get("status") or {}).get("phase") == "Running":
                running.add(uid)
            settled()

        def listed(there: list[dict[str, Any]]) -> None:
            present = {p["metadata"]["uid"] for p in there}
            gone(set(again) - present)
            for uid in [u for u in fresh if u not in present]:
                running.discard(uid)
                again_made(fresh.pop(uid))
            running.update(p["metadata"]["uid"] for p in there if p["metadata"]["uid"] in fresh
                           and (p.get("status") or {}).get("phase") == "Running")
            settled()

        following = asyncio.create_task(follow(client, namespace, rv, tell, listed, all_made))

        async def delete(name: str, uid: str) -> None:
            asked = [False]
            async with sem:
                await _tried(lambda: delete_old(name, uid, asked))

        async def delete_old(name: str, uid: str, asked: list[bool]) -> None:
            """The old pod of that name deleted, never its successor: a delete whose answer was lost to
            a timeout may have deleted the old one, and asked again by name it deleted the new one (the
            first 4,096-pod run lost 2,567 pods so). Asked again only while the old one is there and not
            deleting (its uid read first: a new pod of its name exists only once the old one is gone)."""
            if asked[0]:
                now = await client.get(PodG, name, namespace=namespace)  # 404: gone, done
                if now["metadata"]["uid"] != uid or now["metadata"].get("deletionTimestamp"):
                    return
            asked[0] = True
            await client.delete(PodG, name, namespace=namespace, grace_period=RESTART_GRACE_S)

        await asyncio.gather(*(delete(p["metadata"]["name"], p["metadata"]["uid"]) for p in pods))
        await following
        await asyncio.gather(*made)
    return act


# --------------------------------------------------------------------------------- readers


CPU: dict[str, float] = {}  # each reader command's own CPU time (user + system), by its words


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0, cpu0 = time.perf_counter(), _cpu()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    CPU[" ".join(cmd[3:5])] = _cpu() - cpu0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {out.returncode}: {out.stderr[-1500:]}")
    return took, out.stdout


def installed(env: dict[str, str]) -> dict[str, str]:
    """The readers run as an installed torchjob does: its modules compiled once (pip writes their
    .pyc), not each time (PYTHONDONTWRITEBYTECODE, as this machine's shells set it, made each reader
    compile ~100 modules: 0.9 s of CPU); the bytecode in a directory of the bench's, not the tree."""
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "torchjob-bench-pycache")
    warm = "import torchjob.cli.main, torchjob.kube.clientside.kube_runtime, torchjob.ui.app"
    subprocess.run([sys.executable, "-c", warm], env=out, capture_output=True, timeout=300)
    return out


def readers(kubeconfig: str, namespace: str, job: str, env: dict[str, str], res: Result) -> None:
    """describe, list and the dashboard's job page, each timed (a note in `res`, and res.reads)."""
    base = [sys.executable, "-m", "torchjob"]
    where = ["--kube", "--kubeconfig", kubeconfig, "-n", namespace]
    reads: dict[str, float] = {}
    env = installed(env)
    try:
        reads["describe --kube"], text = _timed([*base, "describe", *where, job], env)
        lines = text.splitlines()
        reads["list --kube"], _ = _timed([*base, "list", *where], env)
        reads["dashboard job page"], page = dashboard(base, where, namespace, job, env)
    except Exception as e:  # said with the results, not hidden
        res.notes.append(f"readers: {e}")
        return
    res.reads = reads
    cpu = ", ".join(f"{k} {v:.2f} s" for k, v in CPU.items())
    res.notes.append(f"readers of the job: {goal(reads)}; their own CPU: {cpu}; the load average then "
                     f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; describe printed {len(lines)} lines; "
                     f"the job page {page} bytes")


def goal(reads: dict[str, float]) -> str:
    """Each reader against the goal: `describe --kube 1.20 s (met), ...`."""
    return ", ".join(f"{k} {v:.2f} s ({'met' if v <= READ_GOAL_S else 'NOT met'})" for k, v in reads.items()) + \
        f" (the goal: each within {READ_GOAL_S:.0f} s)"


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
        for n in range(5):  # a connection closed unanswered (once in ~10 here, under a load of 20+): again
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(f"{root}/api/jobs/{namespace}/{job}?token={token}", timeout=60) as r:
                    body = r.read()
                return time.perf_counter() - t0, len(body)
            except (ConnectionError, http.client.RemoteDisconnected, urllib.error.URLError):  # refused: not up yet
                if n == 4:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")
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
