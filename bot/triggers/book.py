"""The triggers baton.yaml lists now: read at start, read again on SIGHUP or when the
file changes, without a restart.

A reload that fails (the file no longer parses, a webhook's secret is unset) keeps
what ran and says why in the log; one that works swaps all three sections at once and
logs what was added, changed and removed. Other keys of the file take effect at the
next start, and the log says so when they changed.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.config import FileConfig, load_file_config, webhook_secrets
from bot.errors import ConfigError
from bot.triggers.definitions import TriggersConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload did: the names added, changed and removed per section, or the
    error that kept the triggers as they were."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    error: str | None = None
    others_changed: bool = False

    @property
    def summary(self) -> str:
        if self.error is not None:
            return f"baton.yaml was not reloaded: {self.error}"
        parts = [
            f"{label}: {', '.join(names)}"
            for label, names in (
                ("added", self.added),
                ("changed", self.changed),
                ("removed", self.removed),
            )
            if names
        ]
        return "triggers reloaded" + (f" ({'; '.join(parts)})" if parts else ", nothing changed")


def _entries(triggers: TriggersConfig) -> dict[str, str]:
    """Each entry by a name that says its section, with its definition (to compare)."""
    entries: dict[str, str] = {}
    for schedule in triggers.schedules:
        entries[f"schedule {schedule.name}"] = schedule.model_dump_json()
    for hook in triggers.webhooks:
        entries[f"webhook {hook.name}"] = hook.model_dump_json()
    for watch in triggers.watch:
        entries[f"watch {watch.channel}"] = watch.model_dump_json()
    return entries


class TriggerBook:
    """The current schedules, webhooks and watched channels, and the webhooks' secrets."""

    def __init__(
        self,
        triggers: TriggersConfig,
        secrets: dict[str, str],
        *,
        config_path: Path | None,
    ) -> None:
        self.triggers = triggers
        self._secrets = dict(secrets)
        self.config_path = config_path
        self._others = self._other_keys(config_path)
        self._seen = self._fingerprint()
        self._listeners: list[Callable[[TriggersConfig], None]] = []

    def secret(self, webhook: str) -> str | None:
        """The secret webhook `webhook` is signed with; None for a webhook not listed."""
        return self._secrets.get(webhook) if self.triggers.webhook(webhook) else None

    def on_reload(self, listener: Callable[[TriggersConfig], None]) -> None:
        """Call `listener` with the new triggers after each reload that changed them."""
        self._listeners.append(listener)

    def reload(self) -> Reloaded:
        """Read baton.yaml again; never raises."""
        self._seen = self._fingerprint()
        if self.config_path is None:
            return Reloaded(error="Baton was started without a config file")
        try:
            config = load_file_config(self.config_path)
            triggers = config.triggers
            secrets = webhook_secrets(triggers, self.config_path)
        except ConfigError as exc:
            report = Reloaded(error=str(exc))
            logger.error("%s", report.summary)
            return report
        before, after = _entries(self.triggers), _entries(triggers)
        others = self._other_dump(config)
        report = Reloaded(
            added=tuple(name for name in after if name not in before),
            changed=tuple(n for n in after if n in before and before[n] != after[n]),
            removed=tuple(name for name in before if name not in after),
            others_changed=others != self._others,
        )
        self.triggers, self._secrets = triggers, secrets
        logger.info("%s", report.summary)
        if report.others_changed:
            logger.warning(
                "baton.yaml changed beyond schedules, webhooks and watch: those changes take "
                "effect when Baton restarts"
            )
            self._others = others
        if report.added or report.changed or report.removed:
            for listener in self._listeners:
                try:
                    listener(triggers)
                except Exception:
                    logger.exception("a reload listener failed")
        return report

    def changed_on_disk(self) -> bool:
        """Whether the file differs from what was read last (its content, not only its
        time: a ConfigMap's update swaps a symlink)."""
        return self.config_path is not None and self._fingerprint() != self._seen

    def _fingerprint(self) -> str | None:
        if self.config_path is None:
            return None
        try:
            with open(self.config_path, "rb") as handle:
                return hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            return None

    @staticmethod
    def _other_dump(config: FileConfig) -> str:
        return config.model_dump_json(exclude={"schedules", "webhooks", "watch"})

    def _other_keys(self, path: Path | None) -> str | None:
        if path is None or not os.path.isfile(path):
            return None
        try:
            return self._other_dump(load_file_config(path))
        except ConfigError:
            return None
