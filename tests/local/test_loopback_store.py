"""A local job's TCPStore listens on loopback only (issue 30, item 9): torch's listens on every
interface whatever host it is given, with no authentication; torchjob's torchrun hands it a socket
bound to the loopback address its replicas are told. Real torchrun, real torch.distributed (gloo),
the listening sockets read from /proc/net/tcp and tcp6 while the job runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.local.conftest import Torchjob

pytestmark = pytest.mark.e2e
# Every process: after the group is up, print each socket listening on the port of the store torchrun's
# agent serves, by address. (Elastic workers' own store, which rank 0's process makes because torchjob
# sets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, is the user's process's: docs/explanation/security.md.)
LISTENERS = r'''
import os, sys, torch.distributed as dist

def listening(ports):
    out = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(name).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, port = local.split(":")
            if state == "0A" and int(port, 16) in ports:
                if len(addr) == 8:
                    ip = ".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0))
                else:
                    ip = "::1" if addr == "0" * 24 + "01000000" else ("::" if set(addr) == {"0"} else addr)
                out.append(f"{int(port, 16)}={ip}")
    return out

dist.init_process_group("gloo")
endpoint = os.environ.get("PET_RDZV_ENDPOINT")
# static: torchrun's agent serves the store at MASTER_PORT; elastic: the rendezvous's at the endpoint
port = int(endpoint.rpartition(":")[2]) if endpoint else int(os.environ["MASTER_PORT"])
sys.stdout.write(f"rank {dist.get_rank()} listening {sorted(listening({port}))}\n")
sys.stdout.flush()
dist.barrier()
dist.destroy_process_group()
'''


@pytest.mark.parametrize("shape", ["2x1", "2:2x1"], ids=["static", "elastic"])
def test_a_local_jobs_tcpstore_listens_on_loopback_only(torchjob: Torchjob, tmp_path: Path, shape: str) -> None:
    script = tmp_path / "listeners.py"
    script.write_text(LISTENERS)
    proc = torchjob("run", "-j", shape, "--name", "lo", str(script))
    assert proc.returncode == 0, proc.stderr
    seen = re.findall(r"rank \d listening \[(.*)\]", proc.stdout)
    assert len(seen) == 2, proc.stdout
    addresses = {entry.strip("' ").split("=")[1] for line in seen for entry in line.split(",") if entry.strip()}
    assert addresses, f"no listener seen on the store's port: {proc.stdout}"
    assert addresses <= {"127.0.0.1"}, f"the store listens beyond loopback: {addresses}\n{proc.stdout}"


# torchjob's torchrun on loopback (quicken): the dynamic rendezvous's one-second waits are POLL_S, its random
# skew before a first re-rendezvous a tenth, other waits as asked. Run where torch is imported fresh (it changes
# torch's module for the process).
QUICKENED = r'''
import time
from datetime import timedelta
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rdzv
from torchjob.local.start import loopback_torchrun

def held():
    settings = rdzv.RendezvousSettings("r", 1, 2, rdzv.RendezvousTimeout(), timedelta(seconds=5), 3)
    return rdzv._BackendRendezvousStateHolder(None, settings)._cache_duration

def slept(seconds):
    t = time.monotonic()
    rdzv._delay(seconds=seconds)
    return time.monotonic() - t

before = (held(), slept(1))
asked = []
real = rdzv._delay
rdzv._delay = lambda seconds: (asked.append(seconds), real(seconds=seconds))[1]
loopback_torchrun.quicken()
print(before[0], before[1] >= 1, held(), slept(1) < 0.5, slept((0.2, 0.2)) >= 0.2)
slept((0, 0.3))
print(asked)
'''


def test_on_loopback_the_elastic_rendezvous_reads_its_state_every_tenth_of_a_second() -> None:
    run = subprocess.run([sys.executable, "-c", QUICKENED], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    first, asked = run.stdout.splitlines()
    assert first.split() == ["1", "True", "0.1", "True", "True"], run.stdout
    assert asked == "[0.1, (0.2, 0.2), (0, 0.03)]", run.stdout


def test_on_loopback_the_agents_beat_every_two_seconds_unless_the_job_says() -> None:
    """torch's 5 s heartbeat, three missed, kept a lost agent's place in the rendezvous for 15 s before the others
    could meet without it (bench/recovery.py --local --elastic, elastic-agent: 15.3 -> 6.4 s with spares)."""
    from torchjob.local.start.loopback_torchrun import KEEP_ALIVE_S, keep_alive

    assert KEEP_ALIVE_S == 2
    assert keep_alive("") == "keep_alive_interval=2"
    assert keep_alive("last_call_timeout=2") == "last_call_timeout=2,keep_alive_interval=2"
    assert keep_alive("keep_alive_interval=10,join_timeout=60") == "keep_alive_interval=10,join_timeout=60"


# A restarted replica's agent told its predecessor (LOST_AGENT_ENV, as the supervisor tells it): torch's own
# sanitizer gives that node up with the rest of the ones whose beats stopped, at once, but never while the process
# the supervisor named still runs.
LOST = r'''
import os, subprocess, sys
from datetime import datetime, timedelta, timezone
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rdzv
from torchjob.local.spares.spare import LOST_AGENT_ENV
from torchjob.local.start import loopback_torchrun
from torchjob.local.supervisor import pids

ended = subprocess.Popen(["sleep", "60"])
ended_ticks = pids.started(ended.pid)
ended.kill(); ended.wait()
running = subprocess.Popen(["sleep", "60"])

def left(lost_pid):
    settings = rdzv.RendezvousSettings("r", 1, 4, rdzv.RendezvousTimeout(), timedelta(seconds=2), 3)
    holder = rdzv._BackendRendezvousStateHolder(None, settings)
    state = rdzv._RendezvousState()
    now = datetime.now(timezone.utc)
    nodes = {n: rdzv._NodeDesc("127.0.0.1", p, 0) for n, p in (("lost", lost_pid), ("peer", os.getpid()))}
    state.complete, state.participants = True, {nodes["lost"]: 0, nodes["peer"]: 1}
    state.last_heartbeats = {n: now for n in nodes.values()}
    state.wait_list = {rdzv._NodeDesc("127.0.0.1", os.getpid(), 1)}
    holder._state = state
    holder._sanitize()
    return sorted(n for n, d in nodes.items() if d in state.participants or d in state.last_heartbeats)

before = left(ended.pid)
os.environ[LOST_AGENT_ENV] = f"{running.pid}:{pids.started(running.pid)}"
loopback_torchrun.forget_lost("127.0.0.1")
still = left(running.pid)
os.environ[LOST_AGENT_ENV] = f"{ended.pid}:{ended_ticks}"
loopback_torchrun.forget_lost("127.0.0.1")
print(before, still, left(ended.pid), LOST_AGENT_ENV in os.environ)
running.kill()
'''


def test_a_restarted_agent_gives_up_its_lost_predecessors_place_in_the_rendezvous_at_once() -> None:
    """torch gives a lost agent's place up after three missed beats (6 s on loopback): until then the others
    could not meet again without it (bench/recovery.py --local --elastic, elastic-agent)."""
    run = subprocess.run([sys.executable, "-c", LOST], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("] ") == ["['lost', 'peer'", "['lost', 'peer'", "['peer'", "False\n"], run.stdout
