"""A replica that does what a scenario says: exit with a given code after a given time.

Usage: behave.py EXITS_JSON STATE_DIR. EXITS_JSON maps a replica name to a list of
[seconds, exit code], one per attempt; STATE_DIR counts attempts across restarts. A replica with
no entry for its attempt sleeps until it is stopped. Standard library only: starts fast.
"""

import json
import os
import sys
import time

with open(sys.argv[1]) as f:
    exits = json.load(f)
state = sys.argv[2]
name = f"{os.environ['TORCHJOB_REPLICA_TYPE']}-{os.environ['TORCHJOB_REPLICA_INDEX']}"
attempt = sum(1 for f in os.listdir(state) if f.startswith(name + "."))
open(os.path.join(state, f"{name}.{attempt}"), "w").close()
plan = exits.get(name, [])
print(f"{name} attempt {attempt} pid {os.getpid()}", flush=True)
if attempt < len(plan):
    delay, code = plan[attempt]
    time.sleep(delay)
    print(f"{name} exiting with {code}", flush=True)
    sys.exit(code)
while True:
    time.sleep(3600)
