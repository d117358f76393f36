"""Following some ranks of a job (`run --ranks-filter 0`, `logs --ranks-filter 0,3`), as torchrun's
`--local-ranks-filter` keeps its console to some ranks. A replica of several processes tags each line
with its rank (`[rank3]: ...`, torchjob.local.ranktag); a line without a tag (a replica of one process,
or what torchrun's agent itself prints) belongs to every rank of its replica."""

from __future__ import annotations

import re

from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.console import LineFilter
from torchjob.core.shape.topology import node_rank, nproc_per_node, replicas

PREFIX = re.compile(r"^\[(?P<replica>[\w.-]+)\] ")
TAG = re.compile(r"^\[rank(?P<rank>\d+)\]: ?")


def parse(value: str | None) -> frozenset[int] | None:
    """`0,3` -> {0, 3}; None when not given. A word that is not a rank is a UserError naming it."""
    if value is None:
        return None
    try:
        ranks = frozenset(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        ranks = frozenset()
    if not ranks or any(r < 0 for r in ranks):
        raise UserError(f"--ranks-filter {value!r} is not a list of ranks", fix="e.g. --ranks-filter 0 or 0,3")
    return ranks


def ranks_of(job: TorchJob) -> dict[str, range]:
    """Each replica's global ranks (replica `worker-0` of a 2x4 job: 4..7); a replica whose process
    count torchrun decides (`auto`, `gpu`) is left out: its untagged lines are always shown."""
    nproc = nproc_per_node(job)
    if not nproc.isdigit():
        return {}
    n = int(nproc)
    return {rid.name: range(node_rank(job, rid) * n, node_rank(job, rid) * n + n) for rid in replicas(job)}


def line_filter(job: TorchJob, ranks: frozenset[int]) -> LineFilter:
    """Whether a replica's line belongs to one of `ranks`."""
    owned = ranks_of(job)

    def keep(replica: str, line: str) -> bool:
        m = TAG.match(line)
        if m:
            return int(m["rank"]) in ranks
        mine = owned.get(replica)
        return mine is None or any(r in ranks for r in mine)

    return keep


def keep_logged(keep: LineFilter, replica: str | None, line: str) -> bool:
    """For `logs`: a line of one replica's log (`replica` given), or of the combined log (`[worker-0] ...`,
    torchjob's own `torchjob HH:MM:SS: ...` notes kept)."""
    if replica is not None:
        return keep(replica, line)
    m = PREFIX.match(line)
    return m is None or keep(m["replica"], line[m.end():])
