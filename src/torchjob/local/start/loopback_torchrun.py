"""`torchrun` for a local job, its TCPStore listening on loopback only.

torch's TCPStore server listens on every interface whatever host it is given (the host is only where
its clients connect), with no authentication: on a shared machine anyone who reaches the port could
read and write a job's rendezvous. TCPStore takes a socket already bound and listening
(`master_listen_fd`), so a store that serves a loopback host (the only host a local job's replicas
are told) is given a socket bound to that address; with `multi_tenant` (as torchrun's rendezvous
asks), a later store on the same port in this process shares that server. The rest is torchrun's
own `main`. This module imports torch (it runs in a replica, where torch is), and changes nothing
where the host is not a loopback address. A port another process holds is refused as torch refuses
it (torchrun's elastic rendezvous then joins the store there instead of hosting one).

On loopback the elastic rendezvous also reads its shared state every POLL_S instead of every second
(`quicken`): torch paces it for many nodes over a network, and a local elastic job's re-rendezvous
after a failure was mostly those one-second waits (bench/recovery.py --local --elastic). Its agents
also beat every KEEP_ALIVE_S unless the job sets `keep_alive_interval` (`keep_alive`): torch's 5 s, three
missed, kept a lost agent's place in the rendezvous for 15 s before the others could meet without it; and a
restarted replica's agent gives up its lost predecessor's place at once (`forget_lost`).
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import ipaddress
import os
import socket
import sys
from typing import Any

# torch's modules that make a TCPStore server (those that import the name itself are patched where
# they hold it): torchrun's static rendezvous, the c10d rendezvous backend, the dynamic rendezvous's
# shared store, env:// and the elastic utilities.
MODULES = (
    "torch.distributed.rendezvous",
    "torch.distributed.elastic.utils.distributed",
    "torch.distributed.elastic.rendezvous.static_tcp_rendezvous",
    "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous",
)


def loopback(host: str) -> str | None:
    """The loopback address a host names (`127.0.0.1`, `::1`, `localhost`), or None."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        return host if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


def listening(address: str, port: int) -> tuple[int, int]:
    """A socket bound to `address:port` (0: any free port) and listening, as a descriptor that
    TCPStore takes over, and its port; raises OSError where it cannot be bound."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch sets it on its own
        sock.bind((address, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    return sock.detach(), bound


def install() -> None:
    """Every TCPStore this process makes as a server on a loopback host listens on that address only."""
    import torch.distributed as dist

    base = getattr(dist, "TCPStore")  # noqa: B009 (a name torch's stubs do not export)
    served: set[int] = set()  # the ports this process serves: a multi-tenant store there shares the server

    class LoopbackTCPStore(base):  # type: ignore[misc, valid-type]
        def __init__(self, host_name: str, port: int, world_size: int | None = None, is_master: bool = False,
                     *args: Any, **kw: Any) -> None:
            address = loopback(str(host_name))
            # master_listen_fd is the 4th argument after is_master (timeout, wait_for_workers, multi_tenant)
            if is_master and address and len(args) < 4 and kw.get("master_listen_fd") is None \
                    and int(port) not in served:
                try:
                    fd, bound = listening(address, int(port))
                except OSError as e:
                    if e.errno != errno.EADDRINUSE:
                        raise
                    # Another replica of this machine serves it (torchrun's elastic rendezvous tries to
                    # host, then joins): said as torch says it, so that it joins; never a second server
                    # on every interface beside the loopback one.
                    raise dist.DistNetworkError(
                        f"The server socket has failed to listen on {address}:{port} "
                        f"(errno: {errno.EADDRINUSE} - Address already in use).") from e
                served.add(bound)
                kw["master_listen_fd"] = fd
            super().__init__(host_name, port, world_size, is_master, *args, **kw)

    setattr(dist, "TCPStore", LoopbackTCPStore)  # noqa: B010 (a name torch's stubs do not export)
    for name in MODULES:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
            if getattr(module, "TCPStore", None) is base:
                setattr(module, "TCPStore", LoopbackTCPStore)  # noqa: B010


POLL_S = 0.1  # how often a waiting agent reads the rendezvous's state on loopback (torch: once a second)
SKEW_S = (0, 0.3)  # torch's random wait before a first re-rendezvous (its round 0), to spread many nodes' joins


def quicken() -> None:
    """torchrun's dynamic rendezvous reads its shared state at most once a second: a node waiting for the
    others to join sleeps 1 s between reads (`_delay(seconds=1)`), and an agent's check for nodes waiting
    to join (every monitor interval, 0.1 s) serves a state up to 1 s old (the state holder's
    cache_duration). Over a network of many nodes that spares the store; on one machine it is most of an
    elastic job's re-rendezvous: the agent of the failed worker waits for the others, they notice it up
    to a second late, and each round of joins waits a second more. Both become POLL_S here. Its random
    wait of up to 0.3 s before each node's first re-rendezvous (SKEW_S), there to spread the joins of many
    nodes over a network, is a tenth of it: paid twice in a row (the failed agent's join, then the last of
    the others'), it was about 0.4 s of a local elastic job's re-rendezvous on average."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rdzv

    delay = getattr(rdzv, "_delay")  # noqa: B009 (torch's private name: its stubs do not export it)

    def _delay(seconds: float | tuple[float, float]) -> None:
        if seconds == 1:
            seconds = POLL_S
        elif seconds == SKEW_S:
            seconds = (0, SKEW_S[1] / 10)
        delay(seconds)

    holder = rdzv._BackendRendezvousStateHolder
    init = holder.__init__

    def __init__(self: Any, backend: Any, settings: Any, cache_duration: int = 1) -> None:
        init(self, backend, settings, cache_duration)
        self._cache_duration = min(cache_duration, POLL_S)

    setattr(rdzv, "_delay", _delay)  # noqa: B010 (torch's private names, as its own module holds them)
    setattr(holder, "__init__", __init__)  # noqa: B010


def forget_lost(addr: str) -> None:
    """A restarted replica's agent gives up its predecessor's place in the rendezvous (LOST_AGENT_ENV: the
    supervisor's word that the process `PID:START_TICKS` ended), as torch gives up a node whose beats have
    stopped, but at once: torch waits for three missed beats (6 s here), and until then the others could
    not meet again without the lost agent. The node is this host's and that process's (torch names a node
    by its address and pid); it is given up only while that process has not started again."""
    from torchjob.local.spares.spare import LOST_AGENT_ENV
    from torchjob.local.supervisor import pids

    pid, _, ticks = os.environ.pop(LOST_AGENT_ENV, "").partition(":")
    if not (pid.isdigit() and ticks.isdigit()):
        return
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rdzv

    holder = rdzv._BackendRendezvousStateHolder
    sanitize = getattr(holder, "_sanitize")  # noqa: B009 (torch's private name)

    def _sanitize(self: Any) -> None:
        sanitize(self)
        state = self._state
        lost = {n for n in [*state.last_heartbeats, *state.participants, *state.wait_list, *state.redundancy_list]
                if n.addr == addr and n.pid == int(pid)}
        if not lost or pids.alive(int(pid), int(ticks)):
            return
        left = False
        for node in lost:  # what torch's own _sanitize does with a node whose beats stopped
            state.last_heartbeats.pop(node, None)
            left = state.participants.pop(node, None) is not None or left
            state.wait_list.discard(node)
            state.redundancy_list.discard(node)
        if left:
            rdzv._remove_participant_epilogue(state, self._settings)
        self._dead_nodes = [*self._dead_nodes, *lost]

    setattr(holder, "_sanitize", _sanitize)  # noqa: B010


KEEP_ALIVE_S = 2  # a local agent's heartbeat (torch: 5 s); dead after three missed, as torch counts


def keep_alive(conf: str) -> str:
    """torchrun's rendezvous configuration (`k=v,...`: PET_RDZV_CONF, elasticPolicy.rdzvConf) with a local
    heartbeat, unless it sets its own."""
    if any(item.partition("=")[0].strip() == "keep_alive_interval" for item in conf.split(",")):
        return conf
    return ",".join(filter(None, (conf, f"keep_alive_interval={KEEP_ALIVE_S}")))


def main() -> None:
    # A local job's replicas all run here: torchrun's elastic rendezvous names this node by the
    # loopback address it rendezvous on (not this machine's hostname), so its shared store is loopback's too.
    endpoint = os.environ.get("PET_RDZV_ENDPOINT", "")
    host = endpoint.rpartition(":")[0].strip("[]") if endpoint else os.environ.get("PET_MASTER_ADDR", "")
    if loopback(host) and "PET_LOCAL_ADDR" not in os.environ:
        os.environ["PET_LOCAL_ADDR"] = host
    if loopback(host):
        quicken()
        forget_lost(host)
        os.environ["PET_RDZV_CONF"] = keep_alive(os.environ.get("PET_RDZV_CONF", ""))
    install()
    if os.environ.get("TORCHJOB_WARM_WORKERS") == "1":  # runPolicy.warmSpares (local/spares/workers.py)
        from torchjob.local.spares import workers as spare_workers

        spare_workers.install()
    from torch.distributed.run import main as torchrun

    sys.argv[0] = "torchrun"
    torchrun()


if __name__ == "__main__":
    main()
