"""The `baton` command: `baton` runs the Slack bot, `baton chat` a terminal session."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pythonjsonlogger.json import JsonFormatter

from bot.config import Settings, load_settings
from bot.errors import BatonError
from bot.redaction import redact

NO_TOKEN_MESSAGE = """\
baton: SLACK_BOT_TOKEN is not set, so Baton cannot connect to Slack.

To run in Slack, set:
  SLACK_BOT_TOKEN       the bot token (xoxb-…) from your Slack app's OAuth page
  and either
  SLACK_SIGNING_SECRET  for HTTP mode (Slack calls POST /slack/events on PORT, default 3000)
  or
  SLACK_APP_TOKEN       an app-level token (xapp-…) for Socket Mode
plus BATON_MODEL (or `model:` in baton.yaml) and OPENAI_API_KEY / OPENAI_BASE_URL.
README.md explains creating the Slack app from manifest.yml.

To try the agents without Slack, run:  baton chat
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="baton", description="Delegate work to AI agents from Slack or a terminal."
    )
    parser.add_argument(
        "--log-level",
        help="logging level (default: LOG_LEVEL from the environment, else INFO; WARNING for "
        "chat, whose terminal shows the conversation)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines (the default), or one JSON object a line for log collectors",
    )
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("run", help="run the Slack bot (the default)")
    commands.add_parser("agents", help="list the sub-agents, invalid files and shadowing")
    commands.add_parser(
        "mcp", help="connect to the MCP servers of baton.yaml and list them with their tools"
    )
    chat = commands.add_parser("chat", help="talk to the main agent in this terminal")
    chat.add_argument(
        "--session", default="default", help="name of the terminal session to continue"
    )
    args = parser.parse_args(argv)
    # The terminal shows the conversation: what libraries log (each HTTP request at
    # INFO) would print between the prompt and the answer, so only warnings show there.
    quiet = "WARNING" if args.command == "chat" else "INFO"
    try:
        configure_logging(args.log_level or os.environ.get("LOG_LEVEL") or quiet, args.log_format)
    except ValueError as exc:
        print(f"baton: {exc}", file=sys.stderr)
        return 2
    try:
        settings = load_settings()
        if args.command == "agents":
            print(render_agents(settings), end="")
            return 0
        if args.command == "mcp":
            report, healthy = asyncio.run(check_mcp_servers(settings))
            print(report, end="")
            return 0 if healthy else 1
        if args.command == "chat":
            from bot.chat import run_chat

            return asyncio.run(run_chat(settings, session_name=args.session))
        return run_slack(settings)
    except BatonError as exc:
        # Settings may not exist yet, so only the patterns (URL passwords, tokens) apply.
        print(f"baton: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def configure_logging(level: str, log_format: str) -> None:
    """Log to stderr at `level`, as text lines or (``json``) one JSON object a line.

    Raises:
        ValueError: `level` is not a logging level.
    """
    name = level.strip().upper()
    if not isinstance(logging.getLevelName(name), int):
        raise ValueError(
            f"unknown log level {level!r} (--log-level or LOG_LEVEL): use DEBUG, INFO, "
            "WARNING, ERROR or CRITICAL"
        )
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=name, handlers=[handler])


async def check_mcp_servers(settings: Settings) -> tuple[str, bool]:
    """The `baton mcp` report, after each server's first attempt to connect (stdio ones
    in the sandbox of the default workspace, as the bot runs them); and whether every
    server is up."""
    from sqlalchemy.engine import make_url

    from bot.app import sqlite_files
    from bot.mcp import build_servers
    from bot.mcp.report import listing
    from bot.sandbox import Sandbox, SandboxPolicy

    config = [settings.config_path] if settings.config_path else []
    database = sqlite_files(make_url(settings.database_url))
    servers = build_servers(settings, masked=[*config, *database])
    sandbox = Sandbox.unavailable("no stdio server is configured")
    if any(c.transport == "stdio" for c in settings.mcp_servers.values()):
        sandbox = await Sandbox.probe(
            SandboxPolicy.for_workspace(settings.workspace, network=settings.sandbox.network)
        )
    servers.start(sandbox)
    try:
        await servers.settle()
        tools = servers.tools()  # first: it notes the tools left out by the limits
        statuses = servers.status()
        report = listing(statuses, dict(settings.mcp_servers), tools)
    finally:
        await servers.close()
    return report, all(status.state == "up" for status in statuses)


def render_agents(settings: Settings) -> str:
    """The `baton agents` report: every agent with its effective tools, then problems.

    When `workspaces:` maps channels to directories of their own, each directory has
    its own `.baton/agents`, so the report has one section per workspace.
    """
    from bot.sites import site_directories

    directories = site_directories(settings)
    if len(directories) == 1:
        return _render_workspace_agents(settings, directories[0])
    sections = []
    for directory in directories:
        channels = [c for c, d in settings.workspaces.items() if d.resolve() == directory]
        if directory == settings.workspace.resolve():
            used_by = "default: unmapped channels, DMs and the terminal"
            if channels:
                used_by += ", " + ", ".join(channels)
        else:
            used_by = "channels " + ", ".join(channels)
        sections.append(
            f"Workspace {directory} ({used_by})\n" + _render_workspace_agents(settings, directory)
        )
    return "\n".join(sections)


def _render_workspace_agents(settings: Settings, directory: Path) -> str:
    from bot.app import build_agent_registry
    from bot.subagents.claude_code import listed
    from bot.subagents.overview import overview
    from bot.tools import Workspace, build_workspace_tools

    tools = build_workspace_tools(Workspace(directory), environment={})
    registry = build_agent_registry(settings, directory, tool_names=tools.names())
    found = overview(
        registry,
        tools,
        mcp_servers=settings.mcp_servers,
        main_model=settings.model,
        max_turns=settings.max_turns,
    )
    rows = [("NAME", "SOURCE", "TOOLS", "MODEL", "MAX TURNS", "OPTIONS")]
    for agent in found.agents:
        shown = agent.tools
        if agent.unknown:
            shown += f" (unknown, ignored: {listed(agent.unknown)})"
        model = agent.model if not agent.model.startswith("inherits: ") else f"({agent.model})"
        rows.append((agent.name, agent.source, shown, model, str(agent.max_turns), agent.options))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join(cell.ljust(widths[i]) if i < 5 else cell for i, cell in enumerate(row)).rstrip()
        for row in rows
    ]
    if noted := [d for d in registry.definitions() if d.notes]:
        lines += ["", "What loading mapped, left out or kept unused:"]
        for definition in noted:
            lines.append(f"  {definition.name} ({definition.source}):")
            lines += [f"    - {note}" for note in definition.notes]
    if registry.invalid:
        lines += ["", "Invalid agent files (skipped):"]
        lines += [f"  {item.path}: {item.reason}" for item in registry.invalid]
    if registry.shadowed:
        lines += ["", "Shadowed definitions (an earlier root wins):"]
        lines += [
            f"  {item.name} from {item.source} is shadowed by {item.shadowed_by}"
            for item in registry.shadowed
        ]
    return "\n".join(lines) + "\n"


def run_slack(settings: Settings) -> int:
    if not settings.slack_bot_token:
        print(NO_TOKEN_MESSAGE, file=sys.stderr, end="")
        return 2
    if not settings.socket_mode and not settings.slack_signing_secret:
        print(
            "baton: SLACK_SIGNING_SECRET is not set. HTTP mode needs it to verify Slack's "
            "requests; set it, or set SLACK_APP_TOKEN to use Socket Mode.",
            file=sys.stderr,
        )
        return 2
    from bot.slack.server import serve

    asyncio.run(serve(settings))
    return 0
