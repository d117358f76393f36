"""A free TCP port for a server that binds it a moment later (a local job's master and rendezvous,
its TensorBoard; the tests' operators).

A port the kernel hands out for a bind to 0 lies in its ephemeral range, where any outgoing
connection made in between may take it (a test's operator once failed to listen on a port that
a client connection of the same machine held). A port below that range is never handed out to
a connection: only another listener can take it, and one that listens already is skipped here."""

from __future__ import annotations

import random
import socket
from contextlib import closing
from pathlib import Path

# Below Kubernetes' NodePort range (30000-32767) as well, where a kube-proxy may listen.
LOW, HIGH = 20000, 30000
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
TRIES = 64


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def binds(port: int) -> bool:
    """Whether nothing listens on `port` on any address (a wildcard bind fails where one does)."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nothing listens on, outside the ephemeral range where the kernel's range allows it; else
    one the kernel picks."""
    high = min(HIGH, ephemeral_start())
    if high > LOW:
        for _ in range(TRIES):
            port = random.randrange(LOW, high)
            if binds(port):
                return port
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
