"""The calls the operator makes of the API server, as a protocol: the real `client.Api`
implements it, and so does the recording fake of the sequencing tests (tests/controller/fakeapi.py),
which does not inherit from the real one, so a call the fake lacks is a type error, not a silent
fall-through to a client that is not there. mypy checks both (`_conforms` here and in the fake)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from torchjob.kube.machinery.client import Api


class ApiProtocol(Protocol):
    async def list(self, kind: str, namespace: str | None, labels: dict[str, Any] | None = None
                   ) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, kind: str, namespace: str | None, resource_version: str,
              labels: dict[str, Any] | None = None) -> AsyncIterable[tuple[str, Any]]: ...

    async def get(self, kind: str, name: str, namespace: str | None) -> dict[str, Any]: ...

    async def find(self, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None: ...

    async def apply_status(self, kind: str, body: dict[str, Any]) -> None: ...

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    async def delete(self, kind: str, name: str, namespace: str, grace_s: int | None = None) -> None: ...

    async def patch_status(self, name: str, namespace: str, status: dict[str, Any],
                           kind: str = "TorchJob", seen: dict[str, Any] | None = None) -> dict[str, Any]: ...

    async def patch_spec(self, name: str, namespace: str, spec: dict[str, Any],
                         kind: str = "TorchJob", seen: dict[str, Any] | None = None) -> dict[str, Any]: ...

    async def patch_annotations(self, kind: str, name: str, namespace: str, annotations: dict[str, str | None],
                                uid: str | None = None, resource_version: str | None = None) -> dict[str, Any]: ...

    async def log(self, pod: str, namespace: str, container: str, since_s: int, tail_lines: int) -> Sequence[str]: ...

    async def patch_data(self, kind: str, name: str, namespace: str, data: dict[str, Any]) -> None: ...

    async def review_token(self, token: str, audience: str | None) -> dict[str, Any]: ...

    async def review_access(self, user: dict[str, Any], path: str, verb: str) -> bool: ...

    async def event(self, job: dict[str, Any], type_: str, reason: str, message: str,
                    at: datetime | None = None) -> None: ...


def _conforms(api: Api) -> ApiProtocol:
    return api  # mypy: the real Api implements the protocol
