"""A replica that reports its progress through torchjob's helper (`torchjob.report`, as a user's
script does) a few times a second for --seconds, after writing the endpoint's URL to --url-file (for
a test that floods that endpoint meanwhile)."""

from __future__ import annotations

import argparse
import os
import time

from torchjob.report import report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--url-file", required=True)
    args = ap.parse_args()
    tmp = args.url_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(os.environ["KUBEFLOW_TRAINER_SERVER_URL"])
    os.replace(tmp, args.url_file)
    steps = int(args.seconds / 0.25)
    for step in range(1, steps + 1):
        report(step=step, total=steps, loss=1.0 / step)
        time.sleep(0.25)
    print(f"reported {steps} steps", flush=True)


if __name__ == "__main__":
    main()
