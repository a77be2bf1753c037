"""The registry of sub-agents: files from the roots in order, then built-ins."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.errors import AgentDefinitionError
from bot.subagents.claude_code import CLAUDE_MODEL_ALIASES, claude_family
from bot.subagents.definition import AgentDefinition
from bot.subagents.loader import KnownTools, parse_agent_file

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidAgentFile:
    """A file that was skipped, and why."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowedAgent:
    """A valid definition that lost to an earlier one of the same name."""

    name: str
    source: str
    shadowed_by: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedAgents:
    definitions: tuple[AgentDefinition, ...]
    invalid: tuple[InvalidAgentFile, ...]
    shadowed: tuple[ShadowedAgent, ...]


def resolve_model(definition: AgentDefinition, model_aliases: Mapping[str, str]) -> AgentDefinition:
    """`definition` with its model as the provider knows it.

    A name in `model_aliases` (as written, else in any case: `Sonnet` is `sonnet`)
    becomes the provider's model; one of Claude Code's aliases (sonnet, opus, haiku,
    opusplan, …) with no entry runs on the parent's model: Baton never sends a name it
    knows to be an alias. A full Claude model id (`claude-sonnet-4-20250514`) with no
    entry of its own runs on its family's entry (`sonnet`) when there is one, else is
    sent as written. Each change, and a Claude id sent as written, has a note.
    """
    model = definition.model
    if model is None:
        return definition
    target = model_aliases.get(model)
    if target is None:
        any_case = {name.lower(): value for name, value in reversed(model_aliases.items())}
        target = any_case.get(model.strip().lower())
    if target is not None:
        note = f"model {model} → {target} (model_aliases)"
        return definition.model_copy(update={"model": target, "notes": (*definition.notes, note)})
    if (family := claude_family(model)) is not None:
        any_case = {name.lower(): value for name, value in reversed(model_aliases.items())}
        if (target := any_case.get(family)) is not None:
            note = f"model {model} → {target} (model_aliases: {family}, its family)"
            return definition.model_copy(
                update={"model": target, "notes": (*definition.notes, note)}
            )
        note = (
            f"model {model}: sent as written (if the provider does not know it, map it, "
            f"or {family}, with model_aliases in baton.yaml)"
        )
        return definition.model_copy(update={"notes": (*definition.notes, note)})
    if model.strip().lower() in CLAUDE_MODEL_ALIASES:
        note = (
            f"model {model}: Claude Code's alias, not a model the provider knows; runs on "
            "the parent's model (map it with model_aliases in baton.yaml)"
        )
        return definition.model_copy(update={"model": None, "notes": (*definition.notes, note)})
    return definition


def load_agent_file(
    path: Path,
    *,
    tool_aliases: Mapping[str, str] | None = None,
    model_aliases: Mapping[str, str] | None = None,
    known_tools: KnownTools | None = None,
) -> AgentDefinition:
    """One agent file as a registry loads it: parsed, tools mapped (and those that name
    nothing here noted, with `known_tools`), its model as the provider knows it.

    Raises:
        AgentDefinitionError: The file is invalid; the reason says why.
    """
    definition = parse_agent_file(path, tool_aliases=tool_aliases, known_tools=known_tools)
    return resolve_model(definition, model_aliases or {})


def load_agents(
    roots: Sequence[Path],
    builtins: Iterable[AgentDefinition],
    *,
    tool_aliases: Mapping[str, str] | None = None,
    model_aliases: Mapping[str, str] | None = None,
    known_tools: KnownTools | None = None,
) -> LoadedAgents:
    """Load every `*.md` of each root in order, then the built-ins; the first valid name wins.

    An invalid file is skipped with a warning and reserves nothing, so a later
    file (or a built-in) can still define its name. What a file's loading mapped,
    dropped or kept unused (its notes) is logged, so nothing is lost silently.
    """
    model_aliases = model_aliases or {}
    chosen: dict[str, AgentDefinition] = {}
    invalid: list[InvalidAgentFile] = []
    shadowed: list[ShadowedAgent] = []

    def offer(definition: AgentDefinition) -> None:
        winner = chosen.get(definition.name)
        if winner is None:
            chosen[definition.name] = definition
            return
        shadowed.append(
            ShadowedAgent(name=definition.name, source=definition.source, shadowed_by=winner.source)
        )
        logger.info(
            "agent %r from %s is shadowed by %s", definition.name, definition.source, winner.source
        )

    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.glob("*.md")):
            if not path.is_file():
                continue
            try:
                definition = load_agent_file(
                    path,
                    tool_aliases=tool_aliases,
                    model_aliases=model_aliases,
                    known_tools=known_tools,
                )
            except AgentDefinitionError as exc:
                invalid.append(InvalidAgentFile(path=exc.source, reason=exc.reason))
                logger.warning("skipping agent file %s: %s", exc.source, exc.reason)
                continue
            for note in definition.notes:
                logger.info("agent %r from %s: %s", definition.name, definition.source, note)
            offer(definition)
    for definition in builtins:
        offer(definition)
    return LoadedAgents(
        definitions=tuple(chosen.values()), invalid=tuple(invalid), shadowed=tuple(shadowed)
    )


class AgentRegistry:
    """The agents that can be delegated to, kept current with the files on disk.

    `refresh()` rescans only when a root's files changed (name, size, mtime), so a
    teammate's new `.baton/agents/*.md` shows up without a restart.
    """

    def __init__(
        self,
        roots: Sequence[Path],
        builtins: Sequence[AgentDefinition],
        *,
        tool_aliases: Mapping[str, str] | None = None,
        model_aliases: Mapping[str, str] | None = None,
        known_tools: KnownTools | None = None,
    ) -> None:
        """`known_tools`: the tools agents can have here; a file naming others gets a
        note saying so (None: names are not checked)."""
        self.roots = tuple(roots)
        self.builtins = tuple(builtins)
        self.tool_aliases = dict(tool_aliases or {})
        self.model_aliases = dict(model_aliases or {})
        self.known_tools = known_tools
        self._signature: tuple[tuple[str, int, int], ...] | None = None
        self._loaded = LoadedAgents(definitions=(), invalid=(), shadowed=())
        self.refresh()

    def refresh(self) -> None:
        signature = self._scan()
        if signature != self._signature:
            self._loaded = load_agents(
                self.roots,
                self.builtins,
                tool_aliases=self.tool_aliases,
                model_aliases=self.model_aliases,
                known_tools=self.known_tools,
            )
            self._signature = signature

    def _scan(self) -> tuple[tuple[str, int, int], ...]:
        entries = []
        for root in self.roots:
            if not root.is_dir():
                continue
            for path in sorted(root.glob("*.md")):
                try:
                    stat = path.stat()
                except OSError:
                    continue
                entries.append((str(path), stat.st_size, stat.st_mtime_ns))
        return tuple(entries)

    def get(self, name: str) -> AgentDefinition | None:
        self.refresh()
        return next((d for d in self._loaded.definitions if d.name == name), None)

    def definitions(self) -> tuple[AgentDefinition, ...]:
        self.refresh()
        return self._loaded.definitions

    def names(self) -> list[str]:
        return [d.name for d in self.definitions()]

    @property
    def invalid(self) -> tuple[InvalidAgentFile, ...]:
        return self._loaded.invalid

    @property
    def shadowed(self) -> tuple[ShadowedAgent, ...]:
        return self._loaded.shadowed
