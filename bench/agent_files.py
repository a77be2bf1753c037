"""How many real Claude Code agent files load usable through Baton's loader.

    python -m bench.agent_files DIR [DIR ...]

Every `*.md` with frontmatter below the directories (for example clones of public
collections) is loaded as a file of `.claude/agents/` is (`load_agent_file`, as a
site's registry does), with model aliases for Claude Code's sonnet, opus and haiku as
an operator would set them, and no MCP server configured.

A file is usable when it loads, gets at least one tool Baton really has (its effective
tools: after mapping and aliases, narrowed from Baton's own tools as a child's are), and
runs on a model the provider knows (one the aliases name, or the main agent's). Every
tool name a file gives that gives it nothing must be said in a note: a file where one
is not is counted as dropping it silently. Figures beside a floor measured in the same
run: the same files through strict YAML alone (the loader before Claude Code's formats).

`check_file` is the check; tests/subagents/test_agent_file_corpus.py runs it over a
small corpus of representative files.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from bot.errors import AgentDefinitionError
from bot.frontmatter import split_frontmatter
from bot.subagents.definition import AgentDefinition
from bot.subagents.loader import KnownTools
from bot.subagents.registry import load_agent_file
from bot.tools import ToolRegistry, Workspace, build_workspace_tools

MODEL_ALIASES = {"sonnet": "gpt-4.1", "opus": "o3", "haiku": "gpt-4.1-mini"}
# What the bench's provider serves: the aliases' models (the main agent's is one of them).
PROVIDER_MODELS = frozenset(MODEL_ALIASES.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What one agent file is once loaded.

    Attributes:
        path: The file.
        refused: Why the loader refused it; None when it loaded.
        definition: What it loaded as (None when refused).
        tools: Its effective tools: what it would hold, from Baton's own tools.
        model_known: It runs on a model the provider knows (or the main agent's).
        unsaid: Tool names it gives that give it nothing, and that no note names.
    """

    path: Path
    refused: str | None = None
    definition: AgentDefinition | None = None
    tools: tuple[str, ...] = ()
    model_known: bool = False
    unsaid: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return self.definition is not None and bool(self.tools) and self.model_known


def check_file(
    path: Path,
    *,
    tools: ToolRegistry,
    mcp_servers: frozenset[str] = frozenset(),
    model_aliases: Mapping[str, str] = MODEL_ALIASES,
    provider_models: frozenset[str] = PROVIDER_MODELS,
    known_tools: KnownTools | None = None,
) -> Verdict:
    """Load `path` as a site would (Baton's `tools`, the configured `mcp_servers`, the
    aliases) and say whether it is usable and whether it drops a tool name silently.

    `known_tools`: what the loader is told exists (by default `tools` and `mcp_servers`,
    as a site tells it); the check always judges against `tools` themselves.
    """
    known = known_tools or KnownTools.of(tools.names(), mcp_servers)
    try:
        definition = load_agent_file(path, model_aliases=model_aliases, known_tools=known)
    except AgentDefinitionError as exc:
        return Verdict(path=path, refused=exc.reason)
    effective = tuple(definition.resolve_tools(tools).names())
    notes = "\n".join(definition.notes)
    named = (*(definition.tools or ()), *definition.disallowed_tools)
    servers = KnownTools.of((), mcp_servers)
    unsaid = tuple(
        dict.fromkeys(
            name
            for name in named
            if name not in effective and not _said(name, notes, tools, servers)
        )
    )
    model = definition.model
    return Verdict(
        path=path,
        definition=definition,
        tools=effective,
        model_known=model is None or model in provider_models,
        unsaid=unsaid,
    )


def _said(name: str, notes: str, tools: ToolRegistry, servers: KnownTools) -> bool:
    """Whether a name that gives no tool is accounted for: named in a note, a tool that
    is here (denied), `task` (delegation, said where it is mapped) or a configured MCP
    server's (its tools come while it is up)."""
    return name in notes or name in tools or servers.knows(name)


def baton_tools() -> ToolRegistry:
    """Baton's own tools, as every site has them (in a scratch directory)."""
    return build_workspace_tools(Workspace(Path(tempfile.mkdtemp())), environment={})


def agent_files(roots: list[Path]) -> list[Path]:
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.md")):
            text = path.read_text(encoding="utf-8", errors="replace")
            if split_frontmatter(text) is not None and "description:" in text:
                found.append(path)
    return found


def strict_yaml_loads(path: Path) -> bool:
    parts = split_frontmatter(path.read_text(encoding="utf-8", errors="replace"))
    try:
        return parts is not None and isinstance(yaml.safe_load(parts[0]), dict)
    except yaml.YAMLError:
        return False


def main(argv: list[str]) -> None:
    files = agent_files([Path(a) for a in argv])
    if not files:
        raise SystemExit("no agent files found below " + " ".join(argv))
    tools = baton_tools()
    # The loader's warnings (a frontmatter read leniently) are what the figures count.
    logging.getLogger("bot").setLevel(logging.ERROR)
    started = time.perf_counter()
    verdicts = [check_file(path, tools=tools) for path in files]
    elapsed = time.perf_counter() - started
    refused = Counter(v.refused.split(" (")[0][:80] for v in verdicts if v.refused)
    loaded = [v for v in verdicts if v.definition is not None]
    usable = sum(v.usable for v in verdicts)
    noted = sum(bool(v.definition.notes) for v in loaded if v.definition is not None)
    toolless = [v for v in loaded if not v.tools]
    unknown_model = Counter(
        v.definition.model for v in loaded if v.definition is not None and not v.model_known
    )
    silent = [v for v in loaded if v.unsaid]
    strict = sum(strict_yaml_loads(path) for path in files)
    total = len(files)
    print(f"agent files: {total}")
    print(f"usable: {usable} ({usable / total:.1%}); with notes of what changed: {noted}")
    print(f"refused: {sum(refused.values())}")
    for reason, count in refused.most_common(8):
        print(f"  {count:4d}  {reason}")
    print(f"loaded with no effective tool: {len(toolless)}")
    for verdict in toolless[:8]:
        assert verdict.definition is not None
        print(f"  {verdict.path}: {', '.join(verdict.definition.tools or ())}")
    print(f"on a model the provider does not know: {sum(unknown_model.values())}")
    for model, count in unknown_model.most_common(8):
        print(f"  {count:4d}  {model}")
    print(f"dropping a tool name with no note: {len(silent)}")
    for verdict in silent[:8]:
        print(f"  {verdict.path}: {', '.join(verdict.unsaid)}")
    print(f"floor, strict YAML alone parses the frontmatter of: {strict} ({strict / total:.1%})")
    print(f"loading took {elapsed * 1000 / total:.2f} ms a file")


if __name__ == "__main__":
    main(sys.argv[1:])
