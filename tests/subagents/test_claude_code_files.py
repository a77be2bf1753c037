"""Claude Code agent files (`.claude/agents/*.md`) load as written, with what they mean there."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from bot.errors import AgentDefinitionError
from bot.subagents.claude_code import CLAUDE_MODEL_ALIASES
from bot.subagents.definition import MAX_TURNS_CAP, AgentDefinition
from bot.subagents.loader import (
    MAX_NOTE_CHARS,
    MAX_NOTES,
    KnownTools,
    parse_agent_file,
    parse_agent_text,
)
from bot.subagents.registry import resolve_model
from bot.tools.base import Tool, ToolArguments, ToolRegistry


class _NoArguments(ToolArguments):
    pass


def _tool(tool_name: str, is_control: bool = False) -> Tool:
    class Fake(Tool):
        name = tool_name
        description = "A stand-in."
        arguments = _NoArguments
        control = is_control

        async def run(self, args: Any) -> str:
            return ""

    return Fake()


PARENT = ToolRegistry(
    _tool(name)
    for name in (
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "glob",
        "grep",
        "bash",
        "task",
        "mcp__github__create_issue",
        "mcp__fetch__fetch",
    )
).with_tools([_tool("submit_result", is_control=True)])
ALL_BUT_TASK_AND_CONTROL = [n for n in PARENT.names() if n not in ("task", "submit_result")]


def load(frontmatter: str, body: str = "You work.", **kwargs: Any) -> AgentDefinition:
    return parse_agent_text(f"---\n{frontmatter}\n---\n{body}\n", "a.md", "a", **kwargs)


def refusal(frontmatter: str) -> str:
    with pytest.raises(AgentDefinitionError) as caught:
        load(frontmatter)
    assert caught.value.source == "a.md"
    return caught.value.reason


WIZARD_ONE_LINE = (
    "---\n"
    "name: code-reviewer\n"
    "description: Use this agent when the user has written code and wants a review. "
    'Examples: <example>Context: the user asks: "review my change" user: "Please review '
    'the diff" assistant: "I\'ll use the code-reviewer agent" <commentary>A review was '
    "asked for.</commentary></example>\\n\\nUse it proactively after big changes.\n"
    "tools: Read, Grep, Glob, Bash\n"
    "model: sonnet\n"
    "color: blue\n"
    "---\n"
    "You are a senior reviewer.\n"
)


def test_a_wizard_description_on_one_line_loads_as_claude_code_reads_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / ".claude" / "agents" / "code-reviewer.md"
    path.parent.mkdir(parents=True)
    path.write_text(WIZARD_ONE_LINE)
    with caplog.at_level(logging.WARNING, logger="bot.subagents.loader"):
        d = parse_agent_file(path)
    # Read, with a warning that names the file and what was read leniently.
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert str(path) in warning.getMessage() and "not strict YAML" in warning.getMessage()
    assert d.name == "code-reviewer" and d.source == str(path)
    assert d.description.startswith("Use this agent when the user has written code")
    assert 'Context: the user asks: "review my change"' in d.description
    assert d.description.endswith("</example>\n\nUse it proactively after big changes.")
    assert d.tools == ("read_file", "grep", "glob", "bash")
    assert d.model == "sonnet" and "sonnet" in CLAUDE_MODEL_ALIASES
    assert d.extra == {"color": "blue"}
    assert d.system_prompt == "You are a senior reviewer."
    assert d.notes == (
        "description read as Claude Code reads it (the frontmatter is not strict YAML: "
        "mapping values are not allowed here at line 3)",
        "description: its \\n sequences read as line breaks, as Claude Code does",
        "tools: Read → read_file, Grep → grep, Glob → glob, Bash → bash",
        "unused keys kept: color",
    )


def test_a_description_over_several_lines_with_example_blocks() -> None:
    d = load(
        "name: docs-writer\n"
        "description: Use this agent to write documentation. Examples:\n"
        "<example>\n"
        "Context: The user added a module.\n"
        'user: "Document the new module"\n'
        'assistant: "I will use the docs-writer agent"\n'
        "</example>\n"
        "tools:\n"
        "  - Write\n"
        "  - Edit\n"
        "  - MultiEdit\n"
        "maxTurns: 12\n"
        "model: inherit"
    )
    assert d.description == (
        "Use this agent to write documentation. Examples:\n<example>\n"
        'Context: The user added a module.\nuser: "Document the new module"\n'
        'assistant: "I will use the docs-writer agent"\n</example>'
    )
    assert d.tools == ("write_file", "edit_file")  # duplicates collapsed
    assert (d.max_turns, d.model, d.extra) == (12, None, {})
    assert d.notes == (
        "description read as Claude Code reads it (the frontmatter is not strict YAML: "
        "mapping values are not allowed here at line 3)",
        "model inherit: runs on the parent's model",
        "tools: Write → write_file, Edit → edit_file, MultiEdit → edit_file",
    )


@pytest.mark.parametrize(
    "tools_line",
    [
        "tools: Read, Grep",
        "tools: Read Grep",
        "tools: [Read, Grep]",
        "tools:\n  - Read\n  - Grep",
        "tools: read, grep",
    ],
)
def test_tool_lists_in_every_written_form(tools_line: str) -> None:
    d = load(f"description: Reads.\n{tools_line}")
    assert d.tools == ("read_file", "grep")
    assert d.notes[0].startswith("tools: ") and "→ read_file" in d.notes[0]


def test_scoped_bash_and_mcp_tools() -> None:
    d = load(
        "description: Looks at diffs.\n"
        "tools: Read, Bash(git diff:*), Bash(git log:*), mcp__github__create_issue"
    )
    assert d.tools == ("read_file", "bash", "mcp__github__create_issue")
    assert d.notes == (
        "tools: Read → read_file",
        "tool Bash(git diff:*): read as bash; the scope (git diff:*) is not enforced by the "
        "file: Baton's permission rules decide",
        "tool Bash(git log:*): read as bash; the scope (git log:*) is not enforced by the "
        "file: Baton's permission rules decide",
    )
    assert d.resolve_tools(PARENT).names() == ["read_file", "bash", "mcp__github__create_issue"]


def test_a_file_listing_only_tools_baton_lacks_gets_no_tools() -> None:
    d = load("description: Searches the web.\ntools: WebSearch, WebFetch")
    assert d.tools == ()
    assert d.notes == (
        "tools WebSearch, WebFetch: Baton has no such tools (an operator can map them with "
        "tool_aliases); left out",
        "tools: Baton has none of the tools listed, so it gets no tools",
    )
    assert len(d.resolve_tools(PARENT)) == 0


@pytest.mark.parametrize("tools_line", ["tools: []", "tools:", 'tools: ""'])
def test_an_empty_tools_key_inherits_as_baton_always_read_it_and_says_so(
    tools_line: str,
) -> None:
    """Baton's rule (empty = the parent's tools) stays; the note says Claude Code differs."""
    d = load(f"description: Only thinks.\n{tools_line}")
    inherits = load("description: Does anything.").resolve_tools(PARENT)
    assert d.tools is None and d.resolve_tools(PARENT).names() == inherits.names() != []
    assert d.notes == (
        "tools is empty: all the parent's tools (Claude Code would give none; "
        "write disallowed_tools: '*' for none)",
    )


def test_disallowing_every_tool_gives_none() -> None:
    d = load("description: Only thinks.\ndisallowedTools: '*'")
    assert d.tools == () and len(d.resolve_tools(PARENT)) == 0


def test_no_tools_key_or_a_star_inherits_the_parents_tools() -> None:
    absent = load("description: Does anything.")
    star = load('description: Does anything.\ntools: "*"')
    assert absent.tools is None and absent.notes == ()
    assert star.tools is None and star.notes == ("tools *: all the parent's tools",)
    for d in (absent, star):
        assert d.resolve_tools(PARENT).names() == ALL_BUT_TASK_AND_CONTROL


def test_disallowed_tools_are_mapped_too() -> None:
    d = load("description: Reviews.\ndisallowedTools: Write, Edit, WebFetch, Bash(rm:*)")
    assert d.tools is None
    assert d.disallowed_tools == ("write_file", "edit_file", "bash")
    assert d.notes == (
        "disallowedTools: Write → write_file, Edit → edit_file",
        "disallowed tool Bash(rm:*): all of bash is denied; the file cannot deny only (rm:*)",
        "disallowed tool WebFetch: Baton has no such tool; nothing to deny",
    )
    assert d.resolve_tools(PARENT).names() == [
        "read_file", "list_dir", "glob", "grep", "mcp__github__create_issue", "mcp__fetch__fetch",
    ]  # fmt: skip
    denied_all = load('description: Nothing.\ndisallowedTools: "*"')
    assert denied_all.tools == () and len(denied_all.resolve_tools(PARENT)) == 0
    assert denied_all.notes == ("disallowedTools *: every tool is denied, so it gets no tools",)


def test_claude_code_keys_baton_does_not_use_are_kept_with_notes() -> None:
    d = load(
        "name: migrator\n"
        "description: Runs migrations.\n"
        "permissionMode: acceptEdits\n"
        "hooks:\n"
        "  PreToolUse:\n"
        "    - matcher: Bash\n"
        "      hooks:\n"
        "        - type: command\n"
        "          command: ./check.sh\n"
        "category: data\n"
        "version: 1.2\n"
        "temperature: 0.2\n"
        "effort: high\n"
        "max_tokens: 4000"
    )
    assert d.extra == {
        "permissionMode": "acceptEdits",
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "./check.sh"}]}
            ]
        },
        "category": "data",
        "version": 1.2,
        "temperature": 0.2,
        "effort": "high",
        "max_tokens": 4000,
    }
    assert d.notes == (
        "unused keys kept: permissionMode, hooks, category, version, temperature, effort, "
        "max_tokens",
        "permissionMode acceptEdits: not used; Baton's permission rules decide what needs approval",
        "hooks: not used; Baton does not run an agent file's hooks",
    )


def test_camel_case_and_snake_case_together_is_an_error() -> None:
    assert "max_turns and maxTurns are both given" in refusal(
        "description: x\nmax_turns: 3\nmaxTurns: 4"
    )
    assert "disallowed_tools and disallowedTools are both given" in refusal(
        "description: x\ndisallowed_tools: bash\ndisallowedTools: Bash"
    )


def test_omit_claude_md_and_memory_scopes() -> None:
    d = load("description: x\nomitClaudeMd: true\nmemory: user")
    assert (d.project_instructions, d.memory) == (False, "none")
    assert d.notes == (
        "omitClaudeMd true: project_instructions false",
        "memory user: Baton has only project memory (.baton/memory/<name>.md); this agent "
        "keeps none",
    )
    assert load("description: x\nproject_instructions: false").project_instructions is False
    assert load("description: x").project_instructions is True
    assert "keep one" in refusal("description: x\nomitClaudeMd: true\nproject_instructions: true")


@pytest.mark.parametrize(
    ("written", "name", "notes"),
    [
        ("powershell-5.1-expert", "powershell-5.1-expert", ()),
        ("data_scientist", "data_scientist", ()),
        ("Data-Scientist", "data-scientist", ("name Data-Scientist written as data-scientist",)),
    ],
)
def test_names_with_dots_underscores_and_capitals(
    written: str, name: str, notes: tuple[str, ...]
) -> None:
    d = load(f"name: {written}\ndescription: x")
    assert (d.name, d.notes) == (name, notes)


def test_a_name_from_a_capitalised_file_name(tmp_path: Path) -> None:
    path = tmp_path / "Frontend-Dev.md"
    path.write_text("---\ndescription: x\n---\nbody\n")
    d = parse_agent_file(path)
    assert d.name == "frontend-dev"
    assert d.notes == ("name Frontend-Dev (from the file name) written as frontend-dev",)


@pytest.mark.parametrize(
    ("written", "reason"),
    [
        ("../etc", "name: must be lowercase"),
        ("a/b", "name: must be lowercase"),
        (".hidden", "name: must be lowercase"),
        ("a..b", "without '..'"),
        ("a.b..", "without '..'"),
        ('"two words"', "name: must be lowercase"),
        ("x" * 65, "name: String should have at most 64 characters"),
    ],
)
def test_names_that_could_name_a_path_are_refused(written: str, reason: str) -> None:
    assert reason in refusal(f"name: {written}\ndescription: x")


def test_tool_aliases_map_tools_baton_lacks() -> None:
    aliases = {"WebFetch": "mcp__fetch__fetch"}
    d = load(
        "description: Fetches.\ntools: Read, WebFetch, WebFetch(domain:example.com)\n"
        "disallowedTools: WebFetch",
        tool_aliases=aliases,
    )
    assert d.tools == ("read_file", "mcp__fetch__fetch")
    assert d.disallowed_tools == ("mcp__fetch__fetch",)
    assert d.notes == (
        "tools: Read → read_file, WebFetch → mcp__fetch__fetch (tool_aliases), "
        "WebFetch(domain:example.com) → mcp__fetch__fetch (tool_aliases)",
        "tool WebFetch(domain:example.com): read as mcp__fetch__fetch; the scope "
        "(domain:example.com) is not enforced by the file: Baton's permission rules decide",
        "disallowedTools: WebFetch → mcp__fetch__fetch (tool_aliases)",
    )


def test_task_cannot_be_smuggled_in_by_a_file_or_an_alias() -> None:
    by_file = load("description: x\ntools: Task, Agent, Read, task")
    assert by_file.tools == ("task", "read_file")
    assert "tool Task: in Baton, delegation comes from allowed_subagents, not tools" in (
        by_file.notes
    )
    by_alias = load(
        "description: x\ntools: Read, WebFetch", tool_aliases={"WebFetch": "task", "Read": "task"}
    )
    assert by_alias.tools == ("task",)
    assert by_file.resolve_tools(PARENT).names() == ["read_file"]
    assert by_alias.resolve_tools(PARENT).names() == []
    # An allowlist naming the control tool does not keep it either.
    control = load("description: x\ntools: submit_result, task, bash")
    assert control.resolve_tools(PARENT).names() == ["bash"]


KNOWN = KnownTools.of(
    ["read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "bash", "skill"],
    mcp_servers=["github"],
)


def test_unknown_tool_names_are_kept_as_written_and_said() -> None:
    """Kept as written (a tool of that name may come later), and never left out unsaid."""
    d = load(
        "description: x\ntools: read_file, FancyTool, TeamCreate, mcp__jira__*, "
        "mcp__github__create_issue\ndisallowedTools: Nonsense",
        known_tools=KNOWN,
    )
    assert d.tools == (
        "read_file", "FancyTool", "TeamCreate", "mcp__jira__*", "mcp__github__create_issue",
    )  # fmt: skip
    assert d.notes == (
        "tools FancyTool, TeamCreate: Baton has no tool of those names (an operator can map "
        "them with tool_aliases); left out",
        "tool mcp__jira__*: no such MCP server is configured (mcp_servers in baton.yaml); left out",
        "disallowed tool Nonsense: no such tool here; nothing to deny",
    )
    assert d.resolve_tools(PARENT).names() == ["read_file", "mcp__github__create_issue"]
    # Without knowing the tools here, nothing is said (the registry knows them).
    assert load("description: x\ntools: FancyTool").notes == ()


def test_a_file_whose_tools_are_all_unknown_is_said_to_get_none() -> None:
    d = load("description: x\ntools: TeamCreate, TeamDelete", known_tools=KNOWN)
    assert d.notes[-1] == "tools: none of the tools listed is available here, so it gets no tools"
    assert len(d.resolve_tools(PARENT)) == 0


def test_ten_thousand_tools_load_with_bounded_notes() -> None:
    """A hostile file: 10,000 names (one value, under the size limit) load quickly, and
    what loading says about them stays small."""
    names = ",".join(f"T{i}" for i in range(10_000))
    started = time.perf_counter()
    d = load(f"description: x\ntools: Read, {names}, Bash(x:*), WebFetch", known_tools=KNOWN)
    assert time.perf_counter() - started < 2.0
    assert len(d.tools or ()) == 10_002
    assert sum(len(note) for note in d.notes) < MAX_NOTES * MAX_NOTE_CHARS
    unknown = next(note for note in d.notes if note.startswith("tools T0, T1"))
    assert "and 9,988 more" in unknown and len(unknown) <= MAX_NOTE_CHARS
    assert d.resolve_tools(PARENT).names() == ["read_file", "bash"]
    scoped = [f"Bash(cmd{i}:*)" for i in range(3_000)]
    many = load(f"description: x\ntools: {', '.join(scoped)}", known_tools=KNOWN)
    assert len(many.notes) <= MAX_NOTES and many.notes[-1].startswith("… and ")


@pytest.mark.parametrize("written", ["webfetch", "WEBFETCH", "WebFetch", "wEbFeTcH"])
def test_tool_alias_keys_match_in_any_case(written: str) -> None:
    d = load("description: x\ntools: WebFetch, Read", tool_aliases={written: "mcp__github__get"})
    assert d.tools == ("mcp__github__get", "read_file")
    assert "WebFetch → mcp__github__get (tool_aliases)" in d.notes[0]


def test_a_tool_alias_written_as_given_wins_over_another_case() -> None:
    aliases = {"webfetch": "mcp__a__lower", "WebFetch": "mcp__a__exact"}
    assert load("description: x\ntools: WebFetch", tool_aliases=aliases).tools == ("mcp__a__exact",)


def test_skills_with_a_tool_list_without_the_skill_tool_are_said_to_be_preloaded() -> None:
    d = load("description: x\ntools: Read, Grep\nskills: [pdf, release]")
    assert d.tools == ("read_file", "grep") and d.skills == ("pdf", "release")
    assert d.notes[-1] == (
        "skills pdf, release: its tools leave out the skill tool, so these skills' "
        "instructions are put in its prompt when it starts (as Claude Code preloads an "
        "agent's skills)"
    )
    with_tool = load("description: x\ntools: Read, Skill\nskills: pdf")
    assert not any("skills" in note for note in with_tool.notes)
    inherits = load("description: x\nskills: pdf")
    assert inherits.notes == ()


@pytest.mark.parametrize(
    ("frontmatter", "reason"),
    [
        ("description: x\ntools:\n  Read: yes", "tools: expected a list or a comma-separated "
         "string of tool names, got a mapping"),
        ("description: x\ntools: [Read, [Grep]]", "tools: expected tool names (strings)"),
        ("description: x\ndisallowedTools: 3", "disallowedTools: expected a list or a "
         "comma-separated string of tool names, got a number"),
        ("description: x\nomitClaudeMd: sometimes", "omitClaudeMd: must be true or false"),
        ("description: x\nmaxTurns: many", "max_turns"),
        ("  description: [unclosed", "not valid YAML"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_clearly(frontmatter: str, reason: str) -> None:
    assert reason in refusal(frontmatter)


def test_a_huge_frontmatter_is_refused() -> None:
    padding = "\n".join(f"key{i}: {'v' * 60}" for i in range(2000))
    assert "at most 65,536 are read" in refusal(f"description: x\n{padding}")


def test_yaml_aliases_cannot_multiply_a_small_frontmatter() -> None:
    bomb = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for level in "bcdefg":
        previous = chr(ord(level) - 1)
        bomb.append(f"{level}: &{level} [{', '.join([f'*{previous}'] * 10)}]")
    assert "holds more than 5,000 values" in refusal("description: x\n" + "\n".join(bomb))


def test_deep_nesting_does_not_crash_the_loader() -> None:
    d = load("description: x\nhooks: " + "[" * 5000)
    assert d.extra == {"hooks": "[" * 5000}
    assert d.notes[0].startswith("hooks read as Claude Code reads it")


def test_a_file_cannot_set_what_only_baton_sets() -> None:
    d = load(
        "description: x\nnotes: [all fine]\nsource: builtin\nsystem_prompt: Obey me.\n"
        "extra: 1\ncontext_window: 5"
    )
    assert (d.source, d.system_prompt, d.context_window) == ("a.md", "You work.", 0)
    assert d.extra == {
        "notes": ["all fine"],
        "source": "builtin",
        "system_prompt": "Obey me.",
        "extra": 1,
        "context_window": 5,
    }
    assert d.notes == ("unused keys kept: notes, source, system_prompt, extra, context_window",)


def test_an_impossible_date_is_read_as_text_not_a_crash() -> None:
    d = load("description: x\nversion: 2024-02-30")
    assert d.extra == {"version": "2024-02-30"}
    assert d.notes[0] == (
        "version read as Claude Code reads it (the frontmatter is not strict YAML: day is out "
        "of range for month)"
    )


def test_line_by_line_reading_keeps_keys_apart_from_the_description() -> None:
    d = load(
        "description: Keeps notes in .baton/memory/<name>.md. Examples:\n"
        "<example>\n"
        'user: "Remember this"\n'
        "model: what the user said\n"
        "</example>\n"
        "category: memory\n"
        "tools: Read"
    )
    # Inside <example>…</example> no line starts a key; a `<name>` placeholder that is
    # never closed does not hold `category` in the description.
    assert d.description == (
        "Keeps notes in .baton/memory/<name>.md. Examples:\n<example>\n"
        'user: "Remember this"\nmodel: what the user said\n</example>'
    )
    assert (d.model, d.tools, d.extra) == (None, ("read_file",), {"category": "memory"})
    assert d.notes == (
        "description read as Claude Code reads it (the frontmatter is not strict YAML: "
        "mapping values are not allowed here at line 2)",
        "tools: Read → read_file",
        "unused keys kept: category",
    )


def test_claude_codes_skill_tool_is_batons_skill_tool() -> None:
    d = load("description: x\ntools: Skill, Read")
    assert d.tools == ("skill", "read_file")
    assert d.notes == ("tools: Skill → skill, Read → read_file",)


def test_max_turns_above_batons_most_is_kept_at_the_most_with_a_note() -> None:
    d = load("description: x\nmaxTurns: 5000")
    assert d.max_turns == MAX_TURNS_CAP
    assert f"maxTurns 5000: Baton's most is {MAX_TURNS_CAP}" in d.notes
    assert load("description: x\nmax_turns: 40").max_turns == 40
    assert "max_turns" in refusal("description: x\nmaxTurns: -3")  # not a number of turns


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("claude-sonnet-4-20250514", "sonnet"),
        ("claude-3-5-sonnet-20241022", "sonnet"),
        ("claude-3-opus-20240229", "opus"),
        ("Claude-Opus-4-1", "opus"),
        ("claude-haiku-4-5", "haiku"),
        ("claude-sonnet-4-5@20250929", "sonnet"),
    ],
)
def test_a_full_claude_model_id_runs_on_its_familys_alias(model: str, family: str) -> None:
    aliases = {"Sonnet": "big-one", "opus": "o3", "haiku": "small-one"}
    d = resolve_model(load(f"description: x\nmodel: {model}"), aliases)
    assert d.model == {"sonnet": "big-one", "opus": "o3", "haiku": "small-one"}[family]
    assert f"model {model} → {d.model} (model_aliases: {family}, its family)" in d.notes


def test_a_claude_model_id_mapped_itself_or_by_nobody() -> None:
    written = load("description: x\nmodel: claude-sonnet-4-20250514")
    # Its own entry wins over its family's.
    own = resolve_model(written, {"sonnet": "big-one", "claude-sonnet-4-20250514": "exact"})
    assert own.model == "exact"
    # Nothing maps it: sent as written (an Anthropic-speaking provider knows it), said.
    alone = resolve_model(written, {"opus": "o3"})
    assert alone.model == "claude-sonnet-4-20250514"
    assert any(n.startswith("model claude-sonnet-4-20250514: sent as written") for n in alone.notes)
    # Names that only look alike are not Claude's.
    for other in ("my-claude-sonnet", "claude-sonnetx", "claude-instant-1", "gpt-4o"):
        d = resolve_model(load(f"description: x\nmodel: {other}"), {"sonnet": "big-one"})
        assert d.model == other and not any("family" in n for n in d.notes), other
