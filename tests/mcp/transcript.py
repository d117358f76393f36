"""The exchange docs/guide/agents.md shows: the official MCP client drives `torchjob mcp` over stdio as an
agent would (the calls an agent makes to run, watch, debug and clean up a job), and each call and the
text answered is written down. `python -m tests.mcp.transcript` prints it (it is what the page pastes);
tests/mcp/test_docs_agents.py runs it again and compares it with the page, numbers aside.

    python -m tests.mcp.transcript
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[2]
# A small real model: DDP over gloo fits y = 3x + 1, each rank on its own half of the data, and reports
# its step and loss (torchjob.report), as a training script would.
TRAIN = """\
import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from torchjob.report import report

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--step-time", type=float, default=0.1)
args = parser.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = DistributedDataParallel(torch.nn.Linear(1, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.rand(64, 1)
y = 3 * x + 1
for step in range(1, args.steps + 1):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    report(step=step, total=args.steps, loss=round(loss.item(), 4))
    time.sleep(args.step_time)
print(f"rank {dist.get_rank()} done: loss {loss.item():.4f}")
dist.destroy_process_group()
"""
FAILING = """\
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("the loss went to nan at step 3")
    time.sleep(30)


main()
"""
COMMAND = "-j 1x2 --name fit-ddp train.py -- --steps 60 --step-time 0.1"
BROKEN = "-j 1x2 --name nan-hunt fail.py"
SHOWN = 8  # lines of a long answer shown on the page


async def _exchange(workdir: Path) -> list[str]:
    out: list[str] = []
    params = StdioServerParameters(command=sys.executable, args=["-m", "torchjob", "mcp"], cwd=str(workdir),
                                   env={**os.environ, "TORCHJOB_HOME": str(workdir / "home")})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = [t.name for t in (await session.list_tools()).tools]
        out += ["→ tools/list", f"← {', '.join(tools)}", ""]

        async def call(tool: str, **args: Any) -> dict[str, Any]:
            result = await session.call_tool(tool, args)
            text = result.content[0].text if result.content and result.content[0].type == "text" else ""
            lines = text.splitlines()
            shown = lines[:SHOWN] + ([f"  ... ({len(lines) - SHOWN} more lines)"] if len(lines) > SHOWN else [])
            out.append(f"→ {tool} {json.dumps(args)}")
            out.extend(("← " if i == 0 else "  ") + line for i, line in enumerate(shown))
            if result.is_error:
                out.append(f"  (isError; structured: {json.dumps(result.structured_content)})")
            out.append("")
            data = result.structured_content
            assert isinstance(data, dict)
            return data

        await call("submit_job", command=COMMAND)
        plan = await call("preview_job", command=COMMAND)
        await call("submit_job", command=COMMAND, plan_id=plan["plan_id"])
        await call("wait_job", name="fit-ddp", step=4, timeout_s=120)
        await call("wait_job", name="fit-ddp", timeout_s=120)
        await call("describe_job", name="fit-ddp")
        plan = await call("preview_job", command=BROKEN)
        await call("submit_job", command=BROKEN, plan_id=plan["plan_id"])
        await call("wait_job", name="nan-hunt", timeout_s=120)
        await call("job_logs", name="nan-hunt", ranks="1", tail=3)
        await call("delete_job", name="nan-hunt")
        await call("list_jobs")
    return out


def exchange(workdir: Path) -> str:
    (workdir / "train.py").write_text(TRAIN)
    (workdir / "fail.py").write_text(FAILING)
    return "\n".join(asyncio.run(asyncio.wait_for(_exchange(workdir), 300))).rstrip() + "\n"


def shape(text: str) -> list[str]:
    """A transcript with what differs from run to run blanked: numbers, plan ids, paths, times."""
    text = re.sub(r'"plan_id": "[0-9a-f]+"|plan [0-9a-f]{16}', "PLAN", text)
    text = re.sub(r"/[\w./-]+/", "/PATH/", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return [line.rstrip() for line in text.splitlines()]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        print(exchange(Path(tmp)), end="")
