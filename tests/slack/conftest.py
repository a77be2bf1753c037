"""Fixtures for Slack end-to-end tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.slack.harness import SlackHarness, start_harness


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    async for value in start_harness(tmp_path):
        yield value
