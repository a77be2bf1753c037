"""Builds the forge's parts from the settings: the GitHub client, each workspace's
repository, and the desk the surfaces act through."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from bot.config import Settings
from bot.forge.desk import ForgeDesk, WorkOf
from bot.forge.forge import Forge
from bot.forge.github import from_env
from bot.forge.threads import ThreadRepository
from bot.store import Database
from bot.store.branches import BranchStore

logger = logging.getLogger(__name__)


@dataclass(slots=True, kw_only=True)
class ForgeParts:
    """The forge client (None without credentials), the workspaces with a remote by
    directory, and the desk."""

    forge: Forge | None
    store: BranchStore
    repositories: dict[Path, ThreadRepository]
    desk: ForgeDesk

    def by_name(self, full_name: str) -> ThreadRepository | None:
        """The workspace working on the forge's repository `owner/name`."""
        return self.desk.repositories.get(full_name)

    async def clone_missing(self) -> None:
        """Clone each remote whose directory is empty; a failure is logged and tried
        again at the first turn of a thread there."""
        results = await asyncio.gather(
            *(repository.ensure_clone() for repository in self.repositories.values()),
            return_exceptions=True,
        )
        for repository, result in zip(self.repositories.values(), results, strict=True):
            if isinstance(result, BaseException):
                logger.warning(
                    "could not clone %s into %s: %s",
                    repository.repo.url,
                    repository.root,
                    result,
                )

    async def close(self) -> None:
        if self.forge is not None:
            await self.forge.close()


def forge_environment(settings: Settings) -> dict[str, str]:
    """The forge's variables as the client reads them."""
    values = {
        "GITHUB_TOKEN": settings.github_token,
        "GITHUB_APP_ID": settings.github_app_id,
        "GITHUB_APP_PRIVATE_KEY": (
            str(settings.github_app_private_key) if settings.github_app_private_key else None
        ),
        "GITHUB_API_URL": settings.github_api_url,
    }
    return {key: value for key, value in values.items() if value}


def build_forge(
    settings: Settings, database: Database, *, work_of: WorkOf | None = None
) -> ForgeParts | None:
    """The forge's parts when a workspace names a remote; None otherwise.

    Raises:
        ConfigError: Bad forge credentials settings (a missing key file, …).
    """
    if not settings.repositories:
        return None
    forge = from_env(forge_environment(settings))
    if forge is None:
        logger.warning(
            "workspaces name git remotes but no forge credentials are set (GITHUB_TOKEN, or "
            "GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY): threads get branches, pull requests "
            "cannot be opened"
        )
    store = BranchStore(database)
    repositories = {
        path: ThreadRepository(
            repository=repository, store=store, forge=forge, state_dir=settings.state_dir
        )
        for path, repository in settings.repositories.items()
    }
    desk = ForgeDesk(
        store=store,
        repositories={r.repo.full_name: r for r in repositories.values()},
        work_of=work_of,
    )
    return ForgeParts(forge=forge, store=store, repositories=repositories, desk=desk)
