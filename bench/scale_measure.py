"""The measuring half of bench/operator_scale.py: a watch that times when each object is first
seen and first done, an operator run as a process with its memory and CPU from /proc, and one
phase (create N objects at once, wait until every pod and job is Running). Imported by the
script, which runs from bench/ (its directory is first on sys.path)."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource

# Generic (dict) resources: this client parses nothing it does not need, so that it takes as
# little as possible of the 2 cores the control plane and the operator share with it.
PodG = create_namespaced_resource("", "v1", "Pod", "pods")
ServiceG = create_namespaced_resource("", "v1", "Service", "services")


def pod_running(obj: dict[str, Any]) -> bool:
    return bool((obj.get("status") or {}).get("phase") == "Running")


# --------------------------------------------------------------------------------- measuring


class Tracker:
    """Watches one kind in one namespace; the time (perf_counter) each object was first seen and
    first `done`."""

    def __init__(self, client: AsyncClient, res: Any, namespace: str, want: int,
                 done: Callable[[dict[str, Any]], bool],
                 observe: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        """`observe(event, obj)` is called with every event after the first list (the bench counts a
        job's status writes and keeps their bodies with it)."""
        self.client, self.res, self.namespace, self.want, self.is_done = client, res, namespace, want, done
        self.observe = observe
        self.seen: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.all_seen, self.all_done = asyncio.Event(), asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    async def start(self) -> None:
        it = self.client.list(self.res, namespace=self.namespace)
        _ = [o async for o in it]
        self.task = asyncio.create_task(self._watch(it.resourceVersion))

    async def _watch(self, rv: str) -> None:
        try:
            async for event, obj in self.client.watch(self.res, namespace=self.namespace, resource_version=rv):
                now = time.perf_counter()
                if self.observe is not None:
                    self.observe(event, obj)
                if event == "DELETED":
                    continue
                name = obj["metadata"]["name"]
                self.seen.setdefault(name, now)
                if name not in self.done and self.is_done(obj):
                    self.done[name] = now
                if len(self.seen) >= self.want:
                    self.all_seen.set()
                if len(self.done) >= self.want:
                    self.all_done.set()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # reported with the results
            self.error = e

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def last_seen(self, t0: float) -> float | None:
        return max(self.seen.values()) - t0 if len(self.seen) >= self.want else None

    def last_done(self, t0: float) -> float | None:
        return max(self.done.values()) - t0 if len(self.done) >= self.want else None


@dataclass
class Result:
    name: str
    pods: int
    created_s: float = math.nan  # the client's creates, all answered
    pods_s: float | None = None  # every pod exists
    pods_running_s: float | None = None  # every pod Running (scheduled, "run" by KWOK)
    jobs_running_s: float | None = None  # every job Running, by the operator's status
    ready_s: float | None = None  # operator: start to ready
    rss_idle_mb: float | None = None
    rss_peak_mb: float | None = None
    cpu_s: float | None = None
    cpu_pods_s: float | None = None  # operator CPU time until every pod exists
    jobs: int = 0  # jobs the phase made (0: pods alone)
    restart_s: float | None = None  # --job-pods: from the failure to every pod of the next attempt Running
    reads: dict[str, float] = field(default_factory=dict)  # --job-pods: each reader's answer (s)
    notes: list[str] = field(default_factory=list)

    @property
    def pods_per_s(self) -> float | None:
        return self.pods / self.pods_s if self.pods_s else None

    @property
    def jobs_per_s(self) -> float | None:
        """Jobs Running per second: every job Running after jobs_running_s."""
        return self.jobs / self.jobs_running_s if self.jobs and self.jobs_running_s else None

    def summary(self) -> str:
        return (f"{self.name}: every pod after {fmt(self.pods_s)} s ({fmt(self.pods_per_s, '.0f')}/s), Running after "
                f"{fmt(self.pods_running_s)} s, jobs Running after {fmt(self.jobs_running_s)} s, peak RSS "
                f"{fmt(self.rss_peak_mb, '.0f')} MB" + "".join(f"; {n}" for n in self.notes))


class Proc:
    """/proc numbers of one process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_sampled = 0.0

    def status_kb(self, key: str) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return float(line.split()[1])
        return 0.0

    def rss_mb(self) -> float:
        return self.status_kb("VmRSS") / 1024

    def hwm_mb(self) -> float:
        return max(self.status_kb("VmHWM") / 1024, self.peak_sampled)

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    async def sample(self) -> None:
        while True:
            try:
                self.peak_sampled = max(self.peak_sampled, self.rss_mb())
            except OSError:
                return
            await asyncio.sleep(0.2)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


async def create_all(client: AsyncClient, objs: list[Any], concurrency: int,
                     on_created: Callable[[Any], None] | None = None) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(o: Any) -> None:
        async with sem:
            created = await client.create(o)
        if on_created is not None:
            on_created(created)

    await asyncio.gather(*(one(o) for o in objs))


async def ensure(client: AsyncClient, obj: Any) -> None:
    try:
        await client.create(obj)
    except ApiError as e:
        if e.status.code != 409:
            raise


async def wait_served(client: AsyncClient, res: Any, timeout: float = 60) -> None:
    """Until a list of `res` answers. The first request to a new CRD's resource gets 429
    "storage is (re)initializing" (or 404 before the CRD is served); `torchjob operator` does not
    retry its first list (Informer.run), and then waits forever, never ready, so this script makes
    that first request itself."""
    end = time.monotonic() + timeout
    while True:
        try:
            _ = [o async for o in client.list(res, namespace="*")]
            return
        except Exception:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.2)


async def any_left(client: AsyncClient, res: Any, namespace: str) -> bool:
    async for _ in client.list(res, namespace=namespace, chunk_size=1):
        return True
    return False


async def clean(client: AsyncClient, namespace: str, job_res: Any | None, pods: int = 0) -> None:
    """Delete what a phase made (the operator is stopped first): jobs, pods (grace 0), services.
    A deletecollection of tens of thousands of pods can outlast the API server's request timeout:
    it is asked again until none is left. `pods`: how many the phase made (the wait grows with them:
    4,096 pods of one job took over 120 s under a load of 25, and the next phase found the nodes full)."""
    services = [s["metadata"]["name"] async for s in client.list(ServiceG, namespace=namespace)]
    wait_s = 120 + max(len(services), pods) / 10  # thousands of pods take the API server a while
    end = time.monotonic() + wait_s
    asked = 0.0
    while True:
        if time.monotonic() - asked > 30:
            asked = time.monotonic()
            try:
                if job_res is not None:
                    await client.deletecollection(job_res, namespace=namespace)
                await client.deletecollection(PodG, namespace=namespace, grace_period=0)
            except Exception as e:  # a timeout: what it did is done; the rest is asked again
                print(f"[bench] deleting in {namespace}: {e!r}; again", file=sys.stderr, flush=True)
        if not await any_left(client, PodG, namespace):
            break
        if time.monotonic() > end:
            raise RuntimeError(f"pods of {namespace} still there after {wait_s:.0f} s")
        await asyncio.sleep(1)
    sem = asyncio.Semaphore(32)

    async def delete(name: str) -> None:
        async with sem:
            await client.delete(ServiceG, name, namespace=namespace)

    await asyncio.gather(*(delete(name) for name in services))


# --------------------------------------------------------------------------------- phases


async def measure(client: AsyncClient, name: str, namespace: str, n_pods: int, objs: list[Any],
                  concurrency: int, timeout: float, jobs: Tracker | None = None, proc: Proc | None = None,
                  on_created: Callable[[Any], None] | None = None) -> Result:
    """Create `objs` at once (`on_created` is given each object as the API server answers it); wait
    until every pod (and job) is Running or the timeout."""
    res = Result(name, n_pods)
    pods = Tracker(client, PodG, namespace, n_pods, pod_running)
    await pods.start()
    if jobs is not None:
        await jobs.start()

    async def cpu_when_all_pods() -> None:
        await pods.all_seen.wait()
        if proc is not None:
            res.cpu_pods_s = proc.cpu_s()

    marker = asyncio.create_task(cpu_when_all_pods())
    t0 = time.perf_counter()
    await create_all(client, objs, concurrency, on_created)
    res.created_s = time.perf_counter() - t0
    waits = [pods.all_seen.wait(), pods.all_done.wait(), *([jobs.all_done.wait()] if jobs else [])]
    try:
        await asyncio.wait_for(asyncio.gather(*waits), timeout)
    except asyncio.TimeoutError:
        res.notes.append(f"after {timeout:.0f} s: {len(pods.seen)}/{n_pods} pods exist, {len(pods.done)} Running"
                         + (f", {len(jobs.done)}/{jobs.want} jobs Running" if jobs else ""))
    marker.cancel()
    for t in (pods, jobs):
        if t is not None:
            t.stop()
            if t.error is not None:
                res.notes.append(f"the watch of {t.res.__name__} failed: {t.error!r}")
    res.pods_s, res.pods_running_s = pods.last_seen(t0), pods.last_done(t0)
    res.jobs_running_s = jobs.last_done(t0) if jobs else None
    res.jobs = jobs.want if jobs else 0
    return res


async def run_operator(client: AsyncClient, name: str, cmd: list[str], env: dict[str, str], ready_url: str,
                       log_path: Path, namespace: str, jobs: list[Any], job_res: Any,
                       job_done: Callable[[dict[str, Any]], bool], args: argparse.Namespace,
                       while_starting: Callable[[], Any] | None = None,
                       observe: Callable[[str, dict[str, Any]], None] | None = None,
                       after: Callable[[subprocess.Popen[bytes], Result], Awaitable[None]] | None = None) -> Result:
    """Start the operator `cmd`, wait until it is ready, then measure it given `jobs`; `after` runs
    once its numbers are read, while it still runs (the memory profile asks it for its report)."""
    n_pods = len(jobs) * getattr(args, "pods", 4)  # each job's pods (--job-pods: one job of N)
    with log_path.open("wb") as log:
        t_start = time.perf_counter()
        op = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
        proc = Proc(op.pid)
        sampler = asyncio.create_task(proc.sample())
        try:
            helper = asyncio.create_task(while_starting()) if while_starting else None
            end = time.monotonic() + 120
            while not await asyncio.to_thread(http_ok, ready_url):
                if helper is not None and helper.done() and helper.exception() is not None:
                    raise RuntimeError(f"{name} not ready: {helper.exception()}")
                if op.poll() is not None or time.monotonic() > end:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    why = f"exited {op.returncode}" if op.poll() is not None else "not ready after 120 s"
                    raise RuntimeError(f"{name} {why}; {log_path}:\n{tail}")
                await asyncio.sleep(0.2)
            ready_s = time.perf_counter() - t_start
            if helper is not None:
                await helper
            await asyncio.sleep(1)
            idle = proc.rss_mb()
            tracker = Tracker(client, job_res, namespace, len(jobs), job_done, observe)
            cpu0 = proc.cpu_s()
            res = await measure(client, name, namespace, n_pods, jobs, args.concurrency, args.timeout, tracker, proc)
            if res.cpu_pods_s is not None:
                res.cpu_pods_s -= cpu0
            res.ready_s, res.rss_idle_mb = ready_s, idle
            res.rss_peak_mb, res.cpu_s = proc.hwm_mb(), proc.cpu_s()
            if op.poll() is not None:
                res.notes.append(f"{name} exited {op.returncode} during the run; see {log_path}")
            elif after is not None:
                await after(op, res)
            return res
        finally:
            sampler.cancel()
            if op.poll() is None:
                op.terminate()
                try:
                    op.wait(15)
                except subprocess.TimeoutExpired:
                    op.kill()
                    op.wait()


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"
