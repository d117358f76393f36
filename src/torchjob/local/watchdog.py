"""Kills a job's replicas if its supervisor dies without saying goodbye (even by SIGKILL).

Started by the supervisor in a session of its own, with a pipe on stdin. The supervisor writes
`pg <pgid>` for every replica it starts and `bye` when it ends normally. End of file without
`bye` means the supervisor is gone: SIGTERM every group, SIGKILL after the grace period, sweep
the job's stray descendants, and mark the job failed in the store. Standard library only, so it
starts in a few milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time

from torchjob.local.sweep import sweep


def _killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except OSError:
        return False


def main(argv: list[str]) -> int:
    db_path, job, uid, grace_s = argv[0], argv[1], argv[2], float(argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the supervisor
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups: set[int] = set()
    for raw in sys.stdin:
        word, _, arg = raw.strip().partition(" ")
        if word == "pg":
            groups.add(int(arg))
        elif word == "bye":
            return 0
    # The supervisor died.
    alive = [g for g in groups if _killpg(g, signal.SIGTERM)]
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [g for g in alive if _killpg(g, 0)]  # signal 0: does the group still exist?
    for g in alive:
        _killpg(g, signal.SIGKILL)
    sweep(f"TORCHJOB_JOB_UID={uid}")
    _mark_failed(db_path, job, uid)
    return 0


def _mark_failed(db_path: str, job: str, uid: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    msg = "the supervisor was killed; every replica was stopped"
    try:
        db = sqlite3.connect(db_path, timeout=30, isolation_level=None)
        row = db.execute("SELECT status FROM jobs WHERE name=? AND uid=?", (job, uid)).fetchone()
        if row is None:
            return
        status = json.loads(row[0])
        conds = status.setdefault("conditions", [])
        if any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conds):
            return
        for c in conds:
            if c["type"] in ("Running", "Restarting") and c["status"] == "True":
                c["status"] = "False"
        conds.append({"type": "Failed", "status": "True", "reason": "SupervisorLost", "message": msg,
                      "lastTransitionTime": now, "lastUpdateTime": now})
        status["completionTime"] = now
        status["failure"] = {"reason": "SupervisorLost", "message": msg}
        db.execute("UPDATE jobs SET status=?, supervisor_pid=NULL WHERE name=? AND uid=?",
                   (json.dumps(status), job, uid))
        db.execute("UPDATE attempts SET ended=?, reason=? WHERE job=? AND ended IS NULL",
                   (time.time(), "SupervisorLost", job))
        db.execute("INSERT INTO events (job, time, type, reason, message) VALUES (?,?,?,?,?)",
                   (job, time.time(), "Warning", "SupervisorLost", msg))
        db.close()
    except sqlite3.Error:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
