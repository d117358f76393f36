"""The writer of each job's progress to its status: every interval, the jobs whose book changed,
at most one write per job per interval however often its replicas report (where the kind keeps it:
`status.progress` of a TorchJob, `status.torchjob.progress` of a PyTorchJob)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from torchjob.kube.machinery import metrics
from torchjob.kube.machinery.client import Api
from torchjob.kube.progress.books import Books
from torchjob.kube.progress.view import CachesView
from torchjob.progress.stragglers import said

log = logging.getLogger("torchjob.kube")


class ProgressWriter:
    """`on_written(plural, stored)` gets the job as stored after each write (the controller caches
    it, so that its next reconcile starts from that version)."""

    def __init__(self, api: Api, caches: CachesView, books: Books, interval_s: float,
                 on_written: Callable[[str, dict[str, Any]], None]) -> None:
        self.api, self.caches, self.books, self.interval_s = api, caches, books, interval_s
        self.on_written = on_written

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.write_changed()

    async def write_changed(self) -> None:
        for key, book in list(self.books.books.items()):
            plural, ns, name = key
            caches = self.caches[plural]
            if (ns, name) not in caches.jobs:
                self.books.forget(plural, (ns, name))
                continue
            if self.books.written.get(key) == book.version:
                continue
            version, progress = book.version, book.progress()
            if progress is None:
                continue
            patch = caches.kind.progress_patch(progress.model_dump(mode="json", exclude_none=True))
            try:
                stored = await self.api.patch_status(name, ns, patch, kind=caches.kind.kind,
                                                     seen=caches.jobs[(ns, name)])
            except Exception as e:  # the job went, or the API server is away: the next round tries again
                log.warning("progress of %s %s/%s not written: %s", caches.kind.kind, ns, name, e)
                continue
            self.on_written(plural, stored)
            for change in book.news():  # a straggler named, or caught up: once, as an event on the job
                await self.api.event(stored, *said(change))
            self.books.written[key] = version
            metrics.PROGRESS_WRITES.inc()
