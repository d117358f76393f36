"""A replica that does what a scenario says: exit with a given code after a given time.

Usage: behave.py EXITS_JSON STATE_DIR [REPORTS_JSON]. EXITS_JSON maps a replica name to a list of
[seconds, exit code], one per attempt; STATE_DIR counts attempts across restarts. A replica with
no entry for its attempt sleeps until it is stopped. REPORTS_JSON maps a replica name to one number
per attempt: that attempt reports progress (torchjob.report, every 0.2 s) until that many seconds
after its start, then goes quiet. Standard library only: starts fast.
"""

import json
import os
import sys
import threading
import time

with open(sys.argv[1]) as f:
    exits = json.load(f)
state = sys.argv[2]
name = f"{os.environ['TORCHJOB_REPLICA_TYPE']}-{os.environ['TORCHJOB_REPLICA_INDEX']}"
attempt = sum(1 for f in os.listdir(state) if f.startswith(name + "."))
open(os.path.join(state, f"{name}.{attempt}"), "w").close()
plan = exits.get(name, [])
print(f"{name} attempt {attempt} pid {os.getpid()}", flush=True)
reports = {}
if len(sys.argv) > 3:
    with open(sys.argv[3]) as f:
        reports = json.load(f)
if attempt < len(reports.get(name, [])):
    from torchjob.report import Reporter

    quiet_after = reports[name][attempt]
    reporter = Reporter(interval=0.2)

    def keep_reporting() -> None:
        start = time.monotonic()
        step = 0
        while time.monotonic() - start < quiet_after:
            step += 1
            reporter.report(step=step)
            time.sleep(0.2)

    threading.Thread(target=keep_reporting, daemon=True).start()
if attempt < len(plan):
    delay, code = plan[attempt]
    time.sleep(delay)
    print(f"{name} exiting with {code}", flush=True)
    sys.exit(code)
while True:
    time.sleep(3600)
