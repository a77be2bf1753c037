"""The `driver` fixture: each scenario runs once on Slack and once at the terminal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.scenarios.drivers import DRIVERS, Driver

# A credential Baton is configured with: it must never be shown to the person.
SECRET = "sk-configured-secret"


@pytest.fixture(params=sorted(DRIVERS))
async def driver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Driver]:
    async with DRIVERS[request.param](tmp_path, openai_api_key=SECRET) as opened:
        yield opened
