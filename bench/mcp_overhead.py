"""What an agent pays for `torchjob mcp` against the command line: `torchjob mcp`'s start to its first
`initialize` answer (the official MCP client over stdio, as an agent starts it), and one tool call
(`describe_job`, `list_jobs`) against the same command (`torchjob describe NAME -o json`, `torchjob list
-o json`), each the median of --calls; the ratio is the tool call's time over the command's (a command
is a new process each time; a tool call is a message to a server already up).

    python bench/mcp_overhead.py [--calls 20]

A throwaway TORCHJOB_HOME holds one finished job (a command job that prints a line), made first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client

TORCHJOB = [sys.executable, "-m", "torchjob"]


def median_s(samples: list[float]) -> float:
    return statistics.median(samples)


def cli_calls(env: dict[str, str], args: list[str], calls: int) -> float:
    took = []
    for _ in range(calls):
        t0 = time.perf_counter()
        subprocess.run([*TORCHJOB, *args], env=env, check=True, capture_output=True)
        took.append(time.perf_counter() - t0)
    return median_s(took)


async def mcp_calls(env: dict[str, str], calls: int, name: str) -> tuple[float, dict[str, float]]:
    params = StdioServerParameters(command=TORCHJOB[0], args=[*TORCHJOB[1:], "mcp"], env=env)
    t0 = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        started = time.perf_counter() - t0
        out = {}
        for tool, args in (("describe_job", {"name": name}), ("list_jobs", {})):
            took = []
            for _ in range(calls):
                t1 = time.perf_counter()
                result = await session.call_tool(tool, args)
                took.append(time.perf_counter() - t1)
                assert not result.is_error, result
            out[tool] = median_s(took)
    return started, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "TORCHJOB_HOME": str(Path(home) / "home")}
        subprocess.run([*TORCHJOB, "run", "--name", "bench-mcp", "-q", "--", sys.executable, "-c", "print(1)"],
                       env=env, check=True, capture_output=True)
        started, tools = asyncio.run(mcp_calls(env, opts.calls, "bench-mcp"))
        t0 = time.perf_counter()
        subprocess.run([*TORCHJOB, "--version"], env=env, check=True, capture_output=True)
        version_s = time.perf_counter() - t0
        cli = {"describe_job": cli_calls(env, ["describe", "bench-mcp", "-o", "json"], opts.calls),
               "list_jobs": cli_calls(env, ["list", "-o", "json"], opts.calls)}
    print(f"torchjob mcp: start to the first initialize answer {started:.2f} s "
          f"(torchjob --version: {version_s:.2f} s)")
    for tool, s in tools.items():
        command = "describe NAME -o json" if tool == "describe_job" else "list -o json"
        print(f"{tool}: {s * 1000:.1f} ms a call; torchjob {command}: {cli[tool] * 1000:.0f} ms; "
              f"ratio {s / cli[tool]:.3f}")


if __name__ == "__main__":
    main()
