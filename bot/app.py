"""The composition root: builds every part of Baton once, from the settings."""

from __future__ import annotations

import os
from dataclasses import dataclass

import openai

from bot.config import Settings
from bot.engine import ApprovalFunc, Engine, LLMClient
from bot.errors import ConfigError
from bot.permissions.hook import PermissionHook
from bot.permissions.rules import PermissionRules
from bot.sessions import Conversations, main_system_prompt
from bot.store import Database, EventLedger, SessionStore
from bot.tools import ToolRegistry, Workspace, build_workspace_tools

LLM_TIMEOUT_S = 300.0


@dataclass(slots=True, kw_only=True)
class Baton:
    """Everything a surface (Slack, terminal) needs, built once."""

    settings: Settings
    model: str
    database: Database
    openai_client: openai.AsyncOpenAI
    llm: LLMClient
    workspace: Workspace
    tools: ToolRegistry
    permissions: PermissionHook
    conversations: Conversations
    events: EventLedger

    async def close(self) -> None:
        await self.openai_client.close()
        await self.database.close()


async def build_baton(settings: Settings) -> Baton:
    """Build and start Baton's parts; the database schema is created if missing."""
    model = settings.model
    if not model:
        raise ConfigError(
            "no model is configured: set BATON_MODEL or `model:` in baton.yaml "
            "(any model name your OpenAI-compatible server knows)"
        )
    workspace = Workspace(
        settings.workspace,
        protected_files=[settings.config_path] if settings.config_path else [],
    )
    openai_client = openai.AsyncOpenAI(
        # A local OpenAI-compatible server often needs no key; the client insists on one.
        api_key=settings.openai_api_key or "not-needed",
        base_url=settings.openai_base_url,
        timeout=LLM_TIMEOUT_S,
    )
    database = Database(settings.database_url)
    await database.create_schema()
    tools = build_workspace_tools(workspace, environment=os.environ)
    permissions = PermissionHook(
        PermissionRules.parse(
            allow=settings.permissions.allow,
            ask=settings.permissions.ask,
            deny=settings.permissions.deny,
        ),
        workspace,
    )
    llm = LLMClient(openai_client)
    system_prompt = main_system_prompt(workspace.root)

    def build_main_engine(approval: ApprovalFunc | None) -> Engine:
        return Engine(
            llm=llm,
            model=model,
            tools=tools,
            system_prompt=system_prompt,
            hooks=[permissions],
            approval=approval,
            max_turns=settings.max_turns,
        )

    return Baton(
        settings=settings,
        model=model,
        database=database,
        openai_client=openai_client,
        llm=llm,
        workspace=workspace,
        tools=tools,
        permissions=permissions,
        conversations=Conversations(store=SessionStore(database), build_engine=build_main_engine),
        events=EventLedger(database),
    )
