"""The recording fake implements the protocol the real Api implements, call for call: mypy checks
it (`_conforms` in fakeapi.py and api_protocol.py; pyproject's mypy files name the fake); this says
so in the test run too, by the calls' parameters."""

from __future__ import annotations

import inspect

from tests.controller.fakeapi import FakeApi
from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import Api


def calls_of(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")}


def test_the_fake_and_the_real_api_take_every_call_of_the_protocol_alike() -> None:
    wanted = calls_of(ApiProtocol)
    assert {"create", "delete", "find", "watch", "event"} <= wanted.keys()
    for cls in (Api, FakeApi):
        have = calls_of(cls)
        for name, signature in wanted.items():
            assert name in have, f"{cls.__name__} lacks {name}"
            assert list(have[name].parameters) == list(signature.parameters), f"{cls.__name__}.{name}"


def test_the_fake_is_not_the_real_api_with_nothing_behind_it() -> None:
    assert Api not in FakeApi.__mro__  # a call it lacks fails, and does not fall through to a missing client
