"""A job's pod deletes, each asked once. A round runs again before the informer has seen the pods it deleted go
(a gang restart of 1,024 pods brings a watch event per pod, and the rounds they wake plan the same stops again):
asked again, the API server answers 404 for each pod already gone, or writes a deletion already written.
A delete is asked again only of another pod of that name (a new uid), or with a shorter grace."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from torchjob.kube.controller.round.refused import raise_first
from torchjob.kube.machinery.api_protocol import ApiProtocol

Asked = dict[str, tuple[str, int | None]]  # pod name -> (its uid, the grace asked)
Delete = tuple[str, dict[str, Any] | None, int | None]  # (pod name, the pod as seen (None: not seen), grace)


def not_yet_asked(deletes: list[Delete], asked: Asked) -> list[tuple[str, str, int | None]]:
    """Of the deletes a round plans, those to ask: (name, uid, grace). A pod not seen (none, or seen gone) is
    not asked of."""
    out = []
    for name, pod, grace in deletes:
        if pod is None:
            continue
        uid = str(pod["metadata"].get("uid") or "")
        before = asked.get(name)
        if before is not None and before[0] == uid and not shorter(grace, before[1]):
            continue
        out.append((name, uid, grace))
    return out


def shorter(grace: int | None, than: int | None) -> bool:
    """Whether `grace` cuts a deletion asked with `than` short (None: the pod's own grace)."""
    return grace is not None and (than is None or grace < than)


def forget_gone(asked: Asked, seen: Collection[str]) -> None:
    """`asked` kept of the job's pods as seen only: the others went (a job's memory holds nothing it needs not)."""
    for name in [n for n in asked if n not in seen]:
        del asked[name]


async def delete_once(api: ApiProtocol, ns: str, deletes: list[Delete], asked: Asked) -> None:
    """The pods deleted at once, those asked before left alone; the first error once all answered."""
    todo = not_yet_asked(deletes, asked)
    done = await asyncio.gather(*(api.delete("Pod", name, ns, grace_s=grace) for name, _, grace in todo),
                                return_exceptions=True)
    for (name, uid, grace), answer in zip(todo, done, strict=True):
        if not isinstance(answer, BaseException):  # deleted, or gone already (404 is no error): not again
            asked[name] = (uid, grace)
    raise_first(done)
