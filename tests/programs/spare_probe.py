"""A replica that writes down what it sees, for tests/local/test_spares_local.py: a cold process and
a warm spare's must see the same (environment, sys.argv, sys.path[0], __file__, the module's names).

    PROBE_OUT=DIR PROBE_MODE=fail|wait|die|agent-fails [PROBE_WAIT_SPARE=1] python spare_probe.py ARGS...

Writes DIR/<replica>-<attempt>.json (its view, its pid and its process's start time), prints a line
to stdout and one to stderr, then (first attempt, with PROBE_WAIT_SPARE) waits until the supervisor
says its replica's spare is warm, and then: `fail` raises (an uncaught exception under torch's
`@record`: the error file), `wait` waits, in its first attempt only, for DIR/go. Under torchrun
(`die`): a worker is named `<replica>-rank<RANK>` and its attempt is torchrun's restart count; in
the first attempt every worker waits until its agent has a spare per worker (their pids written
down), then rank 1 SIGKILLs itself and the agent starts its workers again. `agent-fails` (torchrun without
restarts): in the replica's first attempt (no DIR/agent-failed yet) rank 1 fails once rank 0 has written its
view, and so does its agent; a worker's attempt is then the replica's (0 before DIR/agent-failed, 1 after)."""

import json
import os
import pathlib
import signal
import sys
import time

from torch.distributed.elastic.multiprocessing.errors import record


def process_start() -> float:
    """When the kernel made this process, in seconds since boot (the clock of /proc/uptime)."""
    with open(f"/proc/{os.getpid()}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK")


def uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def wait_for_spare(replica: str) -> None:
    from pathlib import Path

    from torchjob.local.store.store import Store

    store = Store(Path(os.environ["TORCHJOB_HOME"]))
    while not any(e.reason == "SpareReady" and e.message.startswith(f"{replica}'s")
                  for e in store.events(os.environ["TORCHJOB_JOB_NAME"])):
        time.sleep(0.1)
    store.close()


def agent_spares(n: int) -> list[int]:
    """Wait until this worker's agent (its parent) has a spare per worker; their pids."""
    agent = os.getppid()
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if parent == agent and b"torchjob_spare.py" in cmdline:
                found.append(int(pid))
        if len(found) >= n:
            return sorted(found)
        time.sleep(0.1)


@record
def main() -> None:
    out = os.environ["PROBE_OUT"]
    replica = f"{os.environ['TORCHJOB_REPLICA_TYPE']}-{os.environ['TORCHJOB_REPLICA_INDEX']}"
    mode = os.environ["PROBE_MODE"]
    failed = os.path.join(out, "agent-failed")
    if "TORCHELASTIC_RESTART_COUNT" in os.environ:  # a worker of torchrun's
        replica += f"-rank{os.environ['RANK']}"
        attempt = int(os.path.exists(failed)) if mode == "agent-fails" else \
            int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    else:
        attempt = int(os.path.basename(os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"])).split("-")[1])
    view = {"env": dict(os.environ), "argv": sys.argv, "orig_argv": sys.orig_argv, "path0": sys.path[0],
            "file": __file__, "names": sorted(globals()), "main": sys.modules["__main__"].__dict__ is globals(),
            "cwd": os.getcwd(), "pid": os.getpid(), "pgid": os.getpgid(0), "started": process_start(),
            "cmdline": pathlib.Path("/proc/self/cmdline").read_bytes().decode().split("\0")}
    with open(os.path.join(out, f"{replica}-{attempt}.json"), "w") as f:
        json.dump(view, f)
    print(f"{replica} says hello on stdout", flush=True)
    print(f"{replica} says hello on stderr", file=sys.stderr, flush=True)
    if attempt == 0 and os.environ.get("PROBE_WAIT_SPARE"):
        wait_for_spare(replica)
    if mode == "die" and attempt == 0:
        workers = int(os.environ["LOCAL_WORLD_SIZE"])
        with open(os.path.join(out, f"{replica}-spares.json"), "w") as f:
            json.dump(agent_spares(workers), f)
    if mode == "die" and attempt == 0 and os.environ["RANK"] == "1":
        while len([n for n in os.listdir(out) if n.endswith("-spares.json")]) < workers:
            time.sleep(0.05)  # every worker has written down its agent's spares
        with open(os.path.join(out, "killed"), "w") as f:
            f.write(str(uptime()))
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "die" and attempt == 0:
        time.sleep(120)  # until the agent stops it
    if mode == "agent-fails" and attempt == 0 and os.environ["RANK"] == "1":
        while not os.path.exists(os.path.join(out, replica.replace("rank1", "rank0") + "-0.json")):
            time.sleep(0.05)
        with open(failed, "w") as f:
            f.write(str(uptime()))
        raise RuntimeError(f"{replica} fails on purpose, and its agent with it")
    if mode == "agent-fails" and attempt == 0:
        time.sleep(120)  # until the agent stops it
    if mode == "fail":
        with open(os.path.join(out, f"{replica}-{attempt}.fails"), "w") as f:
            f.write(str(uptime()))
        raise RuntimeError(f"{replica} fails on purpose")
    if mode == "wait" and attempt == 0:
        while not os.path.exists(os.path.join(out, "go")):
            time.sleep(0.05)


if __name__ == "__main__":
    main()
