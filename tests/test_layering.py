"""The Slack surface only listens and renders: it is handed what it needs.

Read from the source with `ast` (every import, at module top or inside a function):
no module of `bot.slack` reaches the composition root (`bot.app`, the `Baton` of the
whole bot) except `bot.slack.server`, the entry point that composes the two
(`slack_parts`), and none reaches the store's tables (`bot.store.models`).
"""

from __future__ import annotations

import ast
from pathlib import Path

SLACK = Path(__file__).resolve().parents[1] / "bot" / "slack"
COMPOSER = "server.py"


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def reaching(prefix: str, *, allowed: frozenset[str] = frozenset()) -> list[str]:
    return sorted(
        path.name
        for path in SLACK.glob("*.py")
        if path.name not in allowed
        and any(m == prefix or m.startswith(f"{prefix}.") for m in imported_modules(path))
    )


def test_only_the_entry_point_knows_the_composition_root() -> None:
    assert reaching("bot.app", allowed=frozenset({COMPOSER})) == []


def test_no_slack_module_reaches_the_stores_tables() -> None:
    assert reaching("bot.store.models") == []


def test_the_check_sees_what_it_looks_for() -> None:
    # The entry point does import the composition root: the check is not blind.
    assert "bot.app" in imported_modules(SLACK / COMPOSER)
