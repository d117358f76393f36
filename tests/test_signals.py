"""Nothing in torchjob, its tests, benches or scripts signals a pid it has not just checked as its
own. Pids wrap within minutes on this machine (pid_max 32768), and a dev cluster's kube-scheduler
once vanished mid-suite without a log line: a signal meant for a process that had ended lands on
whoever has its number now. Signals go through `torchjob.local.supervisor.pids.send` (a pidfd, then the check),
through Popen (which signals only a child it has not reaped), or are one of the places below, each
with the reason it cannot hit a stranger. A new raw kill fails here until it is one of those."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RAW = re.compile(r"os\.kill\(|os\.killpg\(|pidfd_send_signal\(|\bkill (-|\"-|\$)|xargs -r kill")

ALLOWED = {
    "src/torchjob/local/supervisor/pids.py": (1, "the pidfd opened before the check"),
    "hack/devcluster/keeper.py": (1, "the pidfd of its own child, opened before the child could be reaped"),
    "src/torchjob/local/supervisor/process.py": (1, "the replica's group, only while its leader is unreaped"),
    "src/torchjob/local/start/prepare.py": (1, "signal 0 to a supervisor recorded before start times were: "
                                                "nothing sent"),
    "src/torchjob/local/spares/spare.py": (1, "the spare's group, only while poll() finds its Popen leader unreaped"),
    "src/torchjob/local/spares/launcher/torchjob_spare.py": (1, "SIGINT to its own pid (python's exit on ^C)"),
    "src/torchjob/kube/inpod/torchjob_inplace.py": (1, "the group of its own child (the attempt, the spare), only "
                                                       "while it is unreaped (its end is seen before it is reaped)"),
    "src/torchjob/kube/inpod/torchjob_stacks.py": (2, "SIGUSR2 to a process of its pod that holds its own stacks "
                                                      "file open: through a pidfd opened before that check, or, "
                                                      "where there is no pidfd (Python < 3.9), right after it"),
    "tests/kube/kubelet.py": (2, "the group of its own Popen, which poll() found unreaped; a pidfd opened before "
                                 "the process's environment named it one of the test's pods"),
    "tests/programs/spare_probe.py": (1, "SIGKILL to its own pid (the rank's death the test plays)"),
    "tests/e2e/test_chaos_real.py": (2, "the group of its own Popen, which poll() found unreaped"),
    "bench/recovery.py": (1, "the group of its own Popen, which poll() found unreaped"),
    "scripts/dev-cluster.sh": (5, "signal_component and stop_proc check the command line (binary and state dir) at "
                                  "that moment; stop_strays kills what it found running from the state dir"),
    "scripts/real-node.sh": (2, "the shims found by this node's containerd socket, the processes in its cgroups"),
}


def raw_signals() -> dict[str, int]:
    found: dict[str, int] = {}
    for top in ("src", "tests", "bench", "scripts", "hack"):
        for path in (REPO / top).rglob("*"):
            if path.suffix not in (".py", ".sh") or path == Path(__file__):
                continue
            lines = [ln for ln in path.read_text(errors="replace").splitlines() if not ln.lstrip().startswith("#")]
            n = sum(1 for ln in lines if RAW.search(ln))
            if n:
                found[str(path.relative_to(REPO))] = n
    return found


def test_every_raw_signal_is_one_that_cannot_reach_a_stranger() -> None:
    found = raw_signals()
    unexpected = {f: n for f, n in found.items() if f not in ALLOWED or n > ALLOWED[f][0]}
    assert not unexpected, (f"raw signals to a pid in {unexpected}: send them through "
                            "torchjob.local.supervisor.pids.send (checked through a pidfd), or through the Popen "
                            "that started the process")
    assert set(found) == set(ALLOWED), f"no longer there (drop them from ALLOWED): {set(ALLOWED) - set(found)}"
