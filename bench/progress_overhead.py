"""What reporting progress on every step costs a tight training loop.

A real torch training step (a small MLP, forward + backward + SGD on CPU, one process) is timed
with and without `torchjob.report.report(step=..., total=..., loss=...)` after every step. The
reports go to a real endpoint: the local supervisor's (torchjob.local.supervisor.progress.LocalEndpoint) in
another process, as under `torchjob run`. Short runs of three kinds alternate (no report; report
to a Reporter with no endpoint, which returns at once: the control, whose difference from the
first is this machine's noise; report to the endpoint), in ABC CBA order so that a busy machine
slows all alike, and the medians are compared; the cost of one `report()` call and the sender
thread's CPU time per report sent are also measured.

Usage: python bench/progress_overhead.py [--steps 200] [--rounds 40] [--hidden 256]
Target: the overhead is under 1% of the step time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = """
import json, sys, time
from pathlib import Path
from torchjob.local.supervisor.progress import LocalEndpoint
ep = LocalEndpoint("bench", lambda *a: None).start()
env = ep.env("master-0", 0, Path(sys.argv[1]))
print(json.dumps(env), flush=True)
sys.stdin.read()
print(json.dumps({"reports": ep.reports.version}), flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()

    import torch

    from torchjob.report import Reporter

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        server = subprocess.Popen([sys.executable, "-c", SERVER, d], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        assert server.stdout is not None and server.stdin is not None
        env = json.loads(server.stdout.readline())
        reporter = Reporter(url=env["KUBEFLOW_TRAINER_SERVER_URL"], token_file=env["KUBEFLOW_TRAINER_SERVER_TOKEN"])

        model = torch.nn.Sequential(torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(args.hidden, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, y = torch.randn(32, args.hidden), torch.randn(32, 1)

        control = Reporter(url="")

        def train(steps: int, r: Reporter | None) -> float:
            start = time.perf_counter()
            for step in range(1, steps + 1):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                value = loss.item()
                if r is not None:
                    r.report(step=step, total=steps, loss=value)
            return (time.perf_counter() - start) / steps

        train(200, None)  # warm up
        runs: dict[str, list[float]] = {"plain": [], "control": [], "reported": []}
        kinds: list[tuple[str, Reporter | None]] = [("plain", None), ("control", control), ("reported", reporter)]
        for i in range(args.rounds):
            for kind, r in kinds if i % 2 == 0 else kinds[::-1]:
                runs[kind].append(train(args.steps, r))
        plain, reported, controls = runs["plain"], runs["reported"], runs["control"]
        calls = 100_000
        start = time.perf_counter()
        for i in range(calls):
            reporter.report(step=i, total=calls, loss=0.5)
        per_call = (time.perf_counter() - start) / calls
        reporter.flush()
        time.sleep(1.5)  # the sender thread is idle again
        sends = 50  # what the sender thread does once a second, timed here in this thread's CPU time
        start = time.thread_time()
        for i in range(sends):
            reporter._send({"step": i, "total": sends, "metrics": {"loss": 0.5}}, 5.0)
        per_send = (time.thread_time() - start) / sends
        server.stdin.close()
        taken = json.loads(server.stdout.readline())["reports"]
        server.wait(10)

    a, b, c = statistics.median(plain), statistics.median(reported), statistics.median(controls)
    print(f"torch {torch.__version__}, MLP {args.hidden} hidden, batch 32, 1 CPU thread, {args.rounds} rounds of "
          f"{args.steps} steps of each kind")
    print(f"step time without report : {a * 1e6:9.1f} us (median of {args.rounds})")
    print(f"step time, no endpoint   : {c * 1e6:9.1f} us ({100 * (c - a) / a:+.2f} %: the noise of this machine)")
    print(f"step time with report    : {b * 1e6:9.1f} us (median of {args.rounds})")
    print(f"overhead                 : {100 * (b - a) / a:+9.2f} %   (target < 1 %)")
    fa, fb = min(plain), min(reported)
    print(f"fastest rounds           : {fa * 1e6:9.1f} us without, {fb * 1e6:.1f} us with "
          f"({100 * (fb - fa) / fa:+.2f} %)")
    print(f"one report() call alone : {per_call * 1e6:9.2f} us = {100 * per_call / a:.3f} % of a step")
    print(f"one send (sender thread) : {per_send * 1e6:9.1f} us of CPU, once a second at most = "
          f"{100 * per_send:.3f} % of the time")
    print(f"cost per step, by parts  : {100 * (per_call + per_send * a) / a:9.3f} % (the call, and the sends' share)")
    print(f"reports the endpoint took: {taken} (one a second at most: the helper sends only the latest)")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    main()
