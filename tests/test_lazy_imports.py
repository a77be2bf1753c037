"""What an idle replica does not load: heavy libraries wait until a feature needs them.

A fresh interpreter imports what `python -m bot` imports, builds Baton and its Slack
surface from the operator's environment (on a database already migrated, as every
start but the first finds it), and reports which of the modules in `LAZY` it loaded.
Each costs a replica memory it holds for good once imported (about as much as its
comment says: RSS measured before and after importing it into a process that holds
Baton's other libraries), and is imported only by what the entry names.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from bot.store import Database
from tests.processes import bot_environment

LAZY = {
    # o200k's tables (~125 MB): Baton estimates tokens (bot/engine/tokens.py).
    "bpe_openai": "token counting",
    # The MCP SDK with its server side, Starlette and uvicorn (~25 MB).
    "mcp": "the first MCP server's connection (bot/mcp/servers.py, launch.py)",
    # Alembic, Mako, Pygments (~10 MB).
    "alembic": "a database to migrate (bot/store/migrations)",
    # PyJWT and cryptography (~10 MB).
    "jwt": "a GitHub App's credentials (bot/forge/credentials.py)",
    "cryptography": "a GitHub App's credentials (bot/forge/credentials.py)",
}

BUILD = """
import asyncio, json, sys

import bot.cli  # what `python -m bot` imports, then for a Slack run:
from bot.app import build_baton
from bot.config import load_settings
from bot.slack.server import slack_parts
from bot.slack.surface import SlackSurface


async def build() -> None:
    baton = await build_baton(load_settings())
    try:
        SlackSurface(slack_parts(baton))  # as bot.slack.server.serve builds it
    finally:
        await baton.close()


asyncio.run(build())
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


async def test_building_the_bot_leaves_the_heavy_libraries_unloaded(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    url = f"sqlite:///{tmp_path / 'baton.db'}"
    database = Database(url)
    try:
        await database.create_schema()
    finally:
        await database.close()
    env = bot_environment(
        SLACK_BOT_TOKEN="xoxb-test",
        SLACK_SIGNING_SECRET="secret",
        SLACK_API_URL="http://127.0.0.1:9/api/",
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        BATON_MODEL="fake-model",
        DATABASE_URL=url,
        BATON_STATE_DIR=str(tmp_path / "state"),
        BATON_WORKSPACE=str(workspace),
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", BUILD, cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(120):
        stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode(errors="replace")
    loaded = set(json.loads(stdout.decode().splitlines()[-1]))
    assert "bot" in loaded and "slack_bolt" in loaded  # it did build the bot
    assert {name: LAZY[name] for name in LAZY if name in loaded} == {}
