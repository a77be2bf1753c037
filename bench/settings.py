"""Settings for a benchmark's Baton: local fakes, a fresh SQLite file, a temp workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.config import PermissionsConfig, SandboxConfig, Settings


def bench_settings(root: Path, llm_url: str, **overrides: Any) -> Settings:
    """Settings as an operator would give them, in `root` (workspace `root/ws`)."""
    values: dict[str, Any] = {
        "slack_bot_token": None,
        "slack_signing_secret": None,
        "slack_app_token": None,
        "slack_api_url": "http://127.0.0.1:9/api/",
        "port": 3000,
        "openai_api_key": "sk-bench",
        "openai_base_url": llm_url,
        "model": "fake-model",
        "database_url": f"sqlite:///{root / 'bench.db'}",
        "database_origin": "explicit",
        "state_dir": root / "state",
        "workspace": root / "ws",
        "config_path": None,
        "max_turns": 50,
        "max_background_tasks": 16,
        "approval_timeout_s": 600,
        "approvers": (),
        "agent_dirs": (),
        "permissions": PermissionsConfig(),
        "sandbox": SandboxConfig(),
    }
    values.update(overrides)
    return Settings(**values)
