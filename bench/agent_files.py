"""How many real Claude Code agent files load usable through Baton's loader.

    python -m bench.agent_files DIR [DIR ...]

Every `*.md` with frontmatter below the directories (for example clones of public
collections) is loaded as a file of `.claude/agents/` would be, with model aliases for
Claude Code's sonnet, opus and haiku as an operator would set them. A file is usable
when it loads, keeps at least one tool (or inherits them) and names a model the
provider knows (or inherits the main one). Figures beside a floor measured in the same
run: the same files through strict YAML alone (the loader before Claude Code's formats).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import yaml

from bot.errors import AgentDefinitionError
from bot.frontmatter import split_frontmatter
from bot.subagents.claude_code import CLAUDE_MODEL_ALIASES
from bot.subagents.loader import parse_agent_file
from bot.subagents.registry import resolve_model

MODEL_ALIASES = {"sonnet": "gpt-4.1", "opus": "o3", "haiku": "gpt-4.1-mini"}


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
    usable, refused, noted = 0, Counter[str](), 0
    started = time.perf_counter()
    for path in files:
        try:
            definition = resolve_model(parse_agent_file(path), MODEL_ALIASES)
        except AgentDefinitionError as exc:
            refused[exc.reason.split(" (")[0][:80]] += 1
            continue
        noted += bool(definition.notes)
        has_tools = definition.tools is None or len(definition.tools) > 0
        model_known = definition.model is None or definition.model not in CLAUDE_MODEL_ALIASES
        usable += has_tools and model_known
    elapsed = time.perf_counter() - started
    strict = sum(strict_yaml_loads(path) for path in files)
    total = len(files)
    print(f"agent files: {total}")
    print(f"usable: {usable} ({usable / total:.1%}); with notes of what changed: {noted}")
    print(f"refused: {sum(refused.values())}")
    for reason, count in refused.most_common(8):
        print(f"  {count:4d}  {reason}")
    print(f"floor, strict YAML alone parses the frontmatter of: {strict} ({strict / total:.1%})")
    print(f"loading took {elapsed * 1000 / total:.2f} ms a file")


if __name__ == "__main__":
    main(sys.argv[1:])
