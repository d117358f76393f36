"""A replica that reports its steps to the runtime's progress endpoint one by one (not through the
throttled helper, so that a test knows every step that was reported): step 1..N, loss 1/step, and
with --hostile a metric name and a log line carrying markup. Then it prints a line and, with
--hold, keeps running (for suspend)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

HOSTILE = '<img src=x onerror="window.pwned=1;alert(1)"><script>window.pwned=1;alert(1)</script>'


def post(url: str, token: str, body: dict[str, object]) -> None:
    data = json.dumps(body).encode()
    for _ in range(50):
        req = urllib.request.Request(url, data=data, method="POST", headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {token}"})
        try:
            urllib.request.urlopen(req, timeout=10).close()
            return
        except urllib.error.HTTPError as e:
            if e.code != 429:
                raise
            time.sleep(float(e.headers.get("Retry-After") or 0.2))
    raise SystemExit("the endpoint kept refusing (429)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--hostile", action="store_true")
    args = ap.parse_args()
    url = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
    with open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as f:
        token = f.read().strip()
    for step in range(1, args.steps + 1):
        metrics: dict[str, object] = {"loss": 1.0 / step, "lr": 0.01}
        if args.hostile:
            metrics[HOSTILE[:64]] = step
        post(url, token, {"step": step, "total": args.steps * 2 if args.hold else args.steps, "metrics": metrics})
        time.sleep(0.02)
    print(f"reported {args.steps} steps", flush=True)
    if args.hostile:
        print(HOSTILE, flush=True)
    sys.stdout.flush()
    time.sleep(args.hold)


if __name__ == "__main__":
    main()
