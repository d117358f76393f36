"""docs/guide/agents.md stays true: each agent's configuration is valid JSON whose command, started as the
agent starts it, is a torchjob mcp server the official client initializes; the transcript on the page is
what the client and `torchjob mcp` exchange when run again (tests/mcp/transcript.py), numbers aside."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.docs.blocks import REPO, blocks_of

pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client
from tests.mcp.transcript import exchange, shape

pytestmark = pytest.mark.e2e
PAGE = REPO / "docs" / "guide" / "agents.md"


def claimed_by(test: str) -> list[Any]:
    return [b for b in blocks_of(PAGE) if b.claim == f"tests/mcp/test_docs_agents.py::{test}"]


def servers_of(config: dict[str, Any]) -> dict[str, Any]:
    """The server entries of a configuration: Claude Code's and Cursor's `mcpServers`, VS Code's `servers`."""
    return config.get("mcpServers") or config.get("servers") or {}


def test_each_agents_configuration_starts_a_torchjob_mcp_server(tmp_path: Path) -> None:
    blocks = claimed_by("test_each_agents_configuration_starts_a_torchjob_mcp_server")
    assert len(blocks) >= 3  # Claude Code, Cursor, VS Code
    commands = set()
    for b in blocks:
        servers = servers_of(json.loads(b.text))
        assert list(servers) == ["torchjob"], b.where
        entry = servers["torchjob"]
        if "url" in entry:  # the --http form: checked by the HTTP test of tests/mcp
            assert entry["url"].startswith("http://127.0.0.1:") and "/mcp" in entry["url"], b.where
            continue
        commands.add((entry["command"], tuple(entry["args"])))
    assert commands == {("torchjob", ("mcp",))}, commands

    async def initialize() -> list[str]:
        bin_dir = str(Path(sys.executable).parent)  # the `torchjob` of this environment, as PATH finds it
        params = StdioServerParameters(command="torchjob", args=["mcp"], cwd=str(tmp_path),
                                       env={**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
                                            "TORCHJOB_HOME": str(tmp_path / "home")})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "torchjob"
            return [t.name for t in (await session.list_tools()).tools]

    assert "submit_job" in asyncio.run(asyncio.wait_for(initialize(), 120))


def test_the_transcript_is_the_exchange_run_again(tmp_path: Path) -> None:
    (block,) = claimed_by("test_the_transcript_is_the_exchange_run_again")
    page, now = shape(block.text), shape(exchange(tmp_path))
    # every call as the page shows it, and the first line of each answer (the rest is long and timed); a job
    # just submitted may have started already or not
    def heads(lines: list[str]) -> list[str]:
        return [line.replace(": Created;", ": Running;") for line in lines if line.startswith(("→", "←"))]

    assert heads(now) == heads(page)
