"""What the dev cluster's scripts leave on this machine, for the tests of `up` and `down`."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "dev-cluster.sh"


def bridge_of(subnet: str) -> str:
    """The real node's bridge for a pod /24, as scripts/real-node.sh names it (also its cgroups)."""
    return "tj" + subnet.rsplit(".", 1)[0].replace(".", "-")


def unused_subnet() -> str:
    """A pod /24 whose bridge is not on this machine (the suite's real nodes are on 10.250.N.0/24, the
    bench's on 10.251.0.0/24), so that a test's `up` or `down` never touches another real node."""
    for c in random.sample(range(1, 255), 254):
        if not Path(f"/sys/class/net/{bridge_of(f'10.253.{c}.0/24')}").exists():
            return f"10.253.{c}.0/24"
    raise AssertionError("no unused 10.253.x.0/24 subnet")


def processes_of(state: Path) -> dict[int, str]:
    """Processes whose command line names a path in the state dir (every component's does), by pid."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{state}/" in args:
            found[int(proc.name)] = args[:200]
    return found


def leftovers(state: Path, subnet: str) -> list[str]:
    """What runs or exists on this machine for that state dir's cluster and its real node."""
    left = [f"process {pid}: {args}" for pid, args in processes_of(state).items()]
    bridge = bridge_of(subnet)
    if Path(f"/sys/class/net/{bridge}").exists():
        left.append(f"bridge {bridge}")
    if shutil.which("iptables"):
        rules = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True).stdout
        left += [f"iptables rule: {r}" for r in rules.splitlines() if subnet in r]
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if line.split()[4].startswith(f"{state}/"):
            left.append(f"mount {line.split()[4]}")
    left += [f"cgroup {c}" for c in Path("/sys/fs/cgroup").glob(f"*/{bridge}")]
    return left
