"""What every forge test shares."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_machine_git_config(isolated_git: Path) -> Path:
    """Every forge test runs git: none sees the machine's own git config."""
    return isolated_git
