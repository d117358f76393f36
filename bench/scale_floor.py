"""The second floor of bench/operator_scale.py: the very writes `torchjob operator` makes for each
job, made by a bare writer with the operator's concurrency (its --workers) and no operator. The
writer is a process of its own, as the operator is (`python bench/scale_floor.py ...`, started by
operator_scale.py like an operator: /readyz, its RSS and CPU measured the same way); it imports
nothing of torchjob.

Per job, as the operator's reconciler does it (kube/reconciler.py: status first, then its events
without waiting for them, then the Service, then the pods together): a round when the job is seen
(the status `Created`, its events, the headless Service, the 4 pods); the status write(s) the
operator makes once the pods exist (the replica counts); a round once all 4 pods are Running (the
status `Running`, its events). The namespace's progress CA ConfigMap once, as the operator
publishes it. What is written is what the operator wrote in the same run where a torchjob phase
ran first: its status bodies (taken from the jobs' watch), the number of status writes and of
events per job (from the watch and the namespace's events, reproduced to the same total); else
bodies of the same shape (api/status.py's JobStatus as kube/served.py writes it) and 3 status
writes and 2 events per job. The pods and the Service are what `torchjob render --kube` says the
operator creates, with the job's uid in their owner references.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import socket
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from scale_measure import PodG, ServiceG

TorchJobRes = create_namespaced_resource("torchjob.dev", "v1", "TorchJob", "torchjobs")
EventG = create_namespaced_resource("", "v1", "Event", "events")
ConfigMapG = create_namespaced_resource("", "v1", "ConfigMap", "configmaps")
OPERATOR = "torchjob-operator"  # the operator's field manager and event source (kube/client.py)
TIME = re.compile(r'"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"')
ANY_NAME = "zbenchjobz"  # stands for the job's name in the bodies and objects kept
ANY_NAMESPACE = "zbenchnsz"  # and for its namespace
IN_FLIGHT = 64  # the operator's bound on its writes in flight (kube/machinery/client.py WRITES_IN_FLIGHT)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def renamed(body: Any, old: str, new: str) -> Any:
    """`body` (JSON-able) with the job name `old` replaced (as a whole word) by `new`, and every
    timestamp set to now."""
    text = re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, json.dumps(body))
    return json.loads(TIME.sub(f'"{now_iso()}"', text))


def share(i: int, per_job: float) -> int:
    """How many of a thing job i gets so that jobs 0..N-1 get N * per_job in all (Bresenham)."""
    return int((i + 1) * per_job) - int(i * per_job)


# --------------------------------------------------------------------------------- what the operator wrote


def default_statuses(name: str) -> list[dict[str, Any]]:
    """The status writes of a 1 master + 3 workers TorchJob that goes Running, in the shape
    kube/served.py torchjob_status_patch gives them (api/status.py JobStatus, less progress, plus
    state and workerSelector), observedGeneration as kube/reconciler.py _write adds it."""
    t = now_iso()
    replicas = {r: {"attempt": 0, "restarts": 0, "notBefore": None}
                for r in ("master-0", "worker-0", "worker-1", "worker-2")}
    created = {"type": "Created", "status": "True", "reason": "Created", "message": f"TorchJob {name} is created.",
               "lastTransitionTime": t, "lastUpdateTime": t}
    running = {"type": "Running", "status": "True", "reason": "Running", "message": f"TorchJob {name} is running.",
               "lastTransitionTime": t, "lastUpdateTime": t}

    def body(conditions: list[dict[str, Any]], active: int, state: str) -> dict[str, Any]:
        counts = {"Master": {"active": active and 1, "succeeded": 0, "failed": 0, "restarts": 0},
                  "Worker": {"active": active and 3, "succeeded": 0, "failed": 0, "restarts": 0}}
        return {"conditions": conditions, "replicaStatuses": counts, "replicas": replicas, "restartCount": 0,
                "startTime": t, "completionTime": None, "failure": None, "state": state,
                "workerSelector": f"torchjob.dev/job-name={name},torchjob.dev/replica-type=worker",
                "observedGeneration": 1}

    return [body([created], 0, "Created"), body([created], 4, "Created"), body([created, running], 4, "Running")]


class Written:
    """What the operator wrote for the jobs of one phase: each job's status writes (every MODIFIED
    event of a job is one: nothing else changes a job in the bench) from the jobs' watch, the
    bodies of a few jobs' writes, and (`count_events`) the events it recorded on them."""

    KEEP = 50  # jobs whose status bodies are kept

    def __init__(self) -> None:
        self.writes: Counter[str] = Counter()
        self.bodies: dict[str, list[dict[str, Any]]] = {}
        self.events: Counter[tuple[str, str]] = Counter()  # (type, reason) -> count
        self.messages: dict[tuple[str, str], tuple[str, str]] = {}  # (type, reason) -> (job, message)
        self.jobs = 0

    def __call__(self, event: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if event == "ADDED":
            self.jobs += 1
        if event != "MODIFIED":
            return
        self.writes[name] += 1
        if name in self.bodies or len(self.bodies) < self.KEEP:
            self.bodies.setdefault(name, []).append(dict(obj.get("status") or {}))

    async def count_events(self, client: AsyncClient, namespace: str, kind: str) -> None:
        async for ev in client.list(EventG, namespace=namespace):
            involved = ev.get("involvedObject") or {}
            if involved.get("kind") != kind or (ev.get("source") or {}).get("component") != OPERATOR:
                continue
            key = (ev.get("type") or "Normal", ev.get("reason") or "")
            self.events[key] += int(ev.get("count") or 1)
            self.messages.setdefault(key, (involved.get("name", ""), ev.get("message") or ""))

    def writes_per_job(self) -> float | None:
        return sum(self.writes.values()) / self.jobs if self.jobs else None

    def events_per_job(self) -> float | None:
        return sum(self.events.values()) / self.jobs if self.jobs and self.events else None

    def statuses(self) -> tuple[list[dict[str, Any]], str] | None:
        """The status writes of the kept job that wrote the most, ending Running, with its name."""
        done = [(name, b) for name, b in self.bodies.items() if b and b[-1].get("state") == "Running"]
        if not done:
            return None
        name, bodies = max(done, key=lambda nb: len(nb[1]))
        return bodies, name


@dataclass
class Plan:
    """What the floor writes per job: its status bodies (the first, at creation; the middle ones,
    once its pods exist; the last, Running), how many status writes in all per job (the middle ones
    spread to reach it), and its events ((type, reason, how many per job, message)): the job's
    name in them is ANY_NAME."""

    bodies: list[dict[str, Any]]
    writes_per_job: float
    events: list[tuple[str, str, float, str]]
    source: str

    @classmethod
    def of(cls, written: Written | None) -> Plan:
        """As the operator wrote them in `written`, else bodies of the same shape."""
        got = written.statuses() if written is not None else None
        if got is not None and written is not None:
            kept, name = got
            bodies = [renamed(b, name, ANY_NAME) for b in kept]
            writes_per_job = written.writes_per_job() or len(bodies)
            source = f"as the torchjob phase wrote them ({writes_per_job:.2f} status writes/job"
        else:
            bodies, writes_per_job = default_statuses(ANY_NAME), 3.0
            source = "bodies of torchjob's shape (3 status writes/job"
        if written is not None and written.events_per_job():
            events = [(type_, reason, n / written.jobs,
                       renamed(written.messages[type_, reason][1], written.messages[type_, reason][0], ANY_NAME))
                      for (type_, reason), n in sorted(written.events.items())]
            source += f", {written.events_per_job():.2f} events/job)"
        else:
            events = [("Normal", "Created", 1.0, f"job {ANY_NAME} created with 4 replicas"),
                      ("Normal", "Running", 1.0, "every replica is running")]
            source += ", 2 events/job)"
        if len(bodies) < 2:  # one write only (Running at once): it is both
            bodies = [bodies[0], *bodies]
        return cls(bodies, writes_per_job, events, source)


def least(plan: Plan) -> Plan:
    """The fewest status writes that say what the operator's said: the first (Created), the one with
    every pod made (the middle bodies' last) and the last (Running). For one job of many pods
    (--job-pods), whose operator may write its counts many times as the pods come: the floor is what
    any operator must write, not each of this one's writes again."""
    bodies = plan.bodies if len(plan.bodies) <= 3 else [plan.bodies[0], plan.bodies[-2], plan.bodies[-1]]
    return Plan(bodies, float(min(plan.writes_per_job, len(bodies))), plan.events,
                plan.source + f"; the floor writes {len(bodies)} of them")


def objects(rendered: str, name: str, namespace: str, uid: str | None) -> list[dict[str, Any]]:
    """The job's Service and pods as the operator makes them for the job of this uid (None: no such
    job, and no owner reference), from `torchjob render --kube`'s JSON for a job named ANY_NAME in
    ANY_NAMESPACE."""
    objs: list[dict[str, Any]] = json.loads(rendered.replace(ANY_NAME, name).replace(ANY_NAMESPACE, namespace))
    for o in objs:
        meta = o["metadata"]
        if uid is None:
            meta.pop("ownerReferences", None)
            continue
        for ref in meta.get("ownerReferences") or []:
            ref["uid"] = uid
        spec = o.get("spec") or {}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            for e in c.get("env") or []:
                if e.get("name") == "TORCHJOB_JOB_UID":
                    e["value"] = uid
    return objs


# --------------------------------------------------------------------------------- the writer


class Floor:
    """The writer, a process of its own as the operator is: it watches the namespace's TorchJobs
    (a new one queues its first round) and pods (a job whose pods all run queues its Running
    round); `workers` tasks carry out the rounds, one job each at a time."""

    def __init__(self, client: AsyncClient, namespace: str, plan: Plan, workers: int, rendered: str) -> None:
        self.client, self.namespace, self.plan, self.workers, self.rendered = client, namespace, plan, workers, rendered
        self.pods_per_job = sum(1 for o in objects(rendered, "j", namespace, "u") if o["kind"] == "Pod")
        self.queue: asyncio.Queue[tuple[str, str, int]] = asyncio.Queue()
        self.uid: dict[str, str] = {}
        self.index: dict[str, int] = {}
        self.running: dict[str, set[str]] = {}
        self.ran: set[str] = set()
        self.background: set[asyncio.Task[Any]] = set()
        self.ca_lock = asyncio.Lock()
        self.ca_done = False
        self.errors: Counter[str] = Counter()
        self.writes: Counter[str] = Counter()  # what kind of write -> how many made
        self.busy = 0  # rounds in flight
        # Writes in flight at once, as the operator bounds its own (kube/machinery/client.py): more
        # than its HTTP pool's connections wait for one past the client's timeout (PoolTimeout).
        self.in_flight = asyncio.Semaphore(IN_FLIGHT)

    async def run(self, ready: asyncio.Event) -> None:
        jobs = self.client.list(TorchJobRes, namespace=self.namespace)
        for job in [o async for o in jobs]:
            self._job(job)
        pods = self.client.list(PodG, namespace=self.namespace)
        _ = [o async for o in pods]
        tasks = [asyncio.create_task(self._watch_jobs(jobs.resourceVersion)),
                 asyncio.create_task(self._watch_pods(pods.resourceVersion)),
                 *(asyncio.create_task(self._worker()) for _ in range(self.workers))]
        ready.set()
        await asyncio.gather(*tasks)

    async def finish(self) -> dict[str, Any]:
        """What was written: the rounds in flight and the events still being recorded are waited
        for (a while), as the operator's are, so that it counts all."""
        end = time.monotonic() + 5
        while (self.busy or not self.queue.empty()) and time.monotonic() < end:
            await asyncio.sleep(0.05)
        if self.background:
            await asyncio.wait(set(self.background), timeout=10)
        return {"writes": dict(self.writes), "errors": dict(self.errors.most_common(5)), "source": self.plan.source}

    def _job(self, obj: Any) -> None:
        name = obj["metadata"]["name"]
        if name not in self.uid:
            self.uid[name] = obj["metadata"]["uid"]
            self.index[name] = len(self.index)
            self.queue.put_nowait(("create", name, 0))

    async def _watch_jobs(self, rv: str) -> None:
        async for event, job in self.client.watch(TorchJobRes, namespace=self.namespace, resource_version=rv):
            if event == "ADDED":
                self._job(job)

    async def _watch_pods(self, rv: str) -> None:
        async for event, pod in self.client.watch(PodG, namespace=self.namespace, resource_version=rv):
            if event == "DELETED" or (pod.get("status") or {}).get("phase") != "Running":
                continue
            job = (pod["metadata"].get("labels") or {}).get("torchjob.dev/job-name")
            if job is None or job in self.ran:
                continue
            up = self.running.setdefault(job, set())
            up.add(pod["metadata"]["name"])
            if len(up) >= self.pods_per_job:
                self.ran.add(job)
                self.running.pop(job, None)
                self.queue.put_nowait(("running", job, 0))

    async def _worker(self) -> None:
        while True:
            what, name, step = await self.queue.get()
            self.busy += 1
            try:
                if what == "create":
                    await self._create_round(name)
                elif what == "middle":
                    await self._status(name, self.plan.bodies[min(step, len(self.plan.bodies) - 2)])
                else:
                    await self._status(name, self.plan.bodies[-1])
                    self._events(name, stage="running")
            except Exception as e:  # counted and reported; the run goes on
                self.errors[f"{what} round: {type(e).__name__}: {str(e)[:200]}"] += 1
            finally:
                self.busy -= 1

    async def _create_round(self, name: str) -> None:
        await self._status(name, self.plan.bodies[0])
        self._events(name, stage="create")
        objs = objects(self.rendered, name, self.namespace, self.uid[name])
        async with self.ca_lock:
            if not self.ca_done:
                await self._ca()
        for o in objs:
            if o["kind"] == "Service":
                await self._create(ServiceG, o, "Service creates")
        await asyncio.gather(*(self._create(PodG, o, "pod creates") for o in objs if o["kind"] == "Pod"))
        # The operator's next rounds, once its pod informer has the pods: the replica counts change.
        middle = share(self.index[name], max(0.0, self.plan.writes_per_job - 2))
        for step in range(1, middle + 1):
            self.queue.put_nowait(("middle", name, step))

    async def _create(self, res: Any, obj: dict[str, Any], what: str) -> None:
        try:
            async with self.in_flight:
                await self.client.create(res.from_dict(obj))
        except ApiError as e:
            if e.status.code != 409:
                raise
        self.writes[what] += 1

    async def _ca(self) -> None:
        """The progress endpoint's CA in the namespace (kube/progress_tls.py ca_configmap): the
        operator looks for it, then makes it, before the first pods of a namespace."""
        try:
            await self.client.get(ConfigMapG, "torchjob-progress-ca", namespace=self.namespace)
        except ApiError as e:
            if e.status.code != 404:
                raise
            await self._create(ConfigMapG, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "torchjob-progress-ca", "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "torchjob"}},
                "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n" + "A" * 600 + "\n-----END CERTIFICATE-----\n"}},
                "ConfigMap creates")
        self.ca_done = True

    async def _status(self, name: str, body: dict[str, Any]) -> None:
        await self.client.patch(TorchJobRes.Status, name, {"status": renamed(body, ANY_NAME, name)},
                                namespace=self.namespace, patch_type=PatchType.MERGE)
        self.writes["status writes"] += 1

    def _events(self, name: str, stage: str) -> None:
        """Recorded without holding the round up, as the operator spawns them."""
        i = self.index.get(name, 0)
        for type_, reason, per_job, message in self.plan.events:
            if (reason == "Created") != (stage == "create"):
                continue
            for _ in range(share(i, per_job)):
                task = asyncio.create_task(self._event(name, type_, reason, renamed(message, ANY_NAME, name)))
                self.background.add(task)
                task.add_done_callback(self.background.discard)

    async def _event(self, name: str, type_: str, reason: str, message: str) -> None:
        """kube/client.py Api.event's Event."""
        at = datetime.now(UTC)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        ev = {"apiVersion": "v1", "kind": "Event",
              "metadata": {"generateName": f"{name}.", "namespace": self.namespace},
              "involvedObject": {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "name": name,
                                 "namespace": self.namespace, "uid": self.uid.get(name)},
              "reason": reason, "message": message[:1024], "type": type_, "source": {"component": OPERATOR},
              "count": 1, "eventTime": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "firstTimestamp": stamp,
              "lastTimestamp": stamp, "action": reason, "reportingComponent": OPERATOR,
              "reportingInstance": socket.gethostname()[:128]}
        try:
            await self.client.create(EventG.from_dict(ev))
            self.writes["events"] += 1
        except Exception as e:  # best effort, as the operator's
            self.errors[f"event: {type(e).__name__}: {str(e)[:200]}"] += 1


async def serve_ready(port: int, ready: asyncio.Event) -> asyncio.Server:
    """GET /readyz: 200 once the writer watches (as the operator's /readyz), 503 before."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        status = "200 OK" if ready.is_set() else "503 Service Unavailable"
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", port)


async def main_async(args: argparse.Namespace) -> None:
    plan = Plan(**json.loads(Path(args.plan).read_text()))
    client = AsyncClient(config=KubeConfig.from_file(args.kubeconfig), field_manager=OPERATOR)
    floor = Floor(client, args.namespace, plan, args.workers, Path(args.rendered).read_text())
    ready = asyncio.Event()
    server = await serve_ready(args.port, ready)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    task = asyncio.create_task(floor.run(ready))
    await asyncio.wait([task, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    if task.done() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
    made = await floor.finish()
    task.cancel()
    print(json.dumps(made), flush=True)
    server.close()
    await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--port", type=int, required=True, help="of /readyz")
    parser.add_argument("--plan", required=True, help="a Plan as JSON")
    parser.add_argument("--rendered", required=True, help="`torchjob render --kube -o json` of a job named "
                                                          f"{ANY_NAME} in {ANY_NAMESPACE}")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
