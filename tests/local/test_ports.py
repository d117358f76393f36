"""The free port a local job's servers (and the tests' operators) are given lies outside the kernel's
ephemeral range, where an outgoing connection could take it before its server binds it."""

from __future__ import annotations

import socket
from contextlib import closing

from torchjob.local.start import ports


def test_a_free_port_is_below_the_ephemeral_range_and_nothing_listens_on_it() -> None:
    start = ports.ephemeral_start()
    picked = {ports.free_port() for _ in range(20)}
    assert all(ports.LOW <= p < min(ports.HIGH, start) for p in picked), (picked, start)
    assert len(picked) > 1  # picked at random: two local jobs do not race for one port
    for p in picked:
        assert ports.binds(p)


def test_a_port_something_listens_on_is_not_free() -> None:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not ports.binds(int(s.getsockname()[1]))
