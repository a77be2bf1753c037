"""Skills end to end: the real composition root, the fake model over HTTP."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from bot.config import PermissionsConfig
from bot.engine import ApprovalDecision, ApprovalRequest
from bot.subagents.definition import AgentDefinition
from bot.subagents.runner import child_tools
from bot.tools import SkillTool, ToolRegistry
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.subagents.harness import Router, make_baton, run_turn, wait_finished

GENERAL = "Understand the task first"


def make_skill(root: Path, name: str, description: str, body: str) -> None:
    folder = root / ".baton" / "skills" / name
    folder.mkdir(parents=True)
    header = f"name: {name}\ndescription: {description}"
    (folder / "SKILL.md").write_text(f"---\n{header}\n---\n{body}\n")


def write_agent(tmp_path: Path, name: str, frontmatter: str, body: str) -> None:
    directory = tmp_path / "agents"
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.md").write_text(f"---\n{frontmatter}\n---\n{body}\n")


def skill_call(name: str, id: str) -> ToolCallSpec:
    return ToolCallSpec("skill", {"name": name}, id=id)


def skill_schema(request: RecordedRequest) -> dict[str, Any] | None:
    return next((t for t in request.body["tools"] if t["function"]["name"] == "skill"), None)


def tool_result_of(request: RecordedRequest, call_id: str) -> str:
    return next(m["content"] for m in request.messages if m.get("tool_call_id") == call_id)


async def never_asked(request: ApprovalRequest) -> ApprovalDecision:
    raise AssertionError(f"a person was asked about {request.tool_name}: {request.reason}")


async def test_the_main_agent_is_offered_skills_and_loads_one_without_asking(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    make_skill(baton.workspace.root, "release", "Cuts a release.", "RELEASE-STEPS: tag, build.")
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[skill_call("release", "S1")]), Reply(text="Done.")]
    try:
        await run_turn(baton, "Cut a release.", approval=never_asked)
    finally:
        await baton.close()
    first, second = router.main_requests()
    schema = skill_schema(first)
    assert schema is not None
    assert "- release: Cuts a release." in schema["function"]["description"]
    assert schema["function"]["parameters"]["required"] == ["name"]
    result = tool_result_of(second, "S1")
    assert "RELEASE-STEPS: tag, build." in result and "description:" not in result


async def test_a_child_sees_and_loads_only_the_skills_its_file_names(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_agent(tmp_path, "narrow", "description: Narrow.\nskills: [a]", "NARROW-PROMPT")
    baton = await make_baton(tmp_path, fake_llm)
    make_skill(baton.workspace.root, "a", "Skill A.", "A-BODY")
    make_skill(baton.workspace.root, "b", "Skill B.", "B-BODY")
    router = Router(fake_llm)
    task = {"subagent_type": "narrow", "prompt": "use skills"}
    wide = {"subagent_type": "general-purpose", "prompt": "look"}
    router.main += [
        Reply(tool_calls=[ToolCallSpec("task", task, id="T1"), ToolCallSpec("task", wide, id="W")]),
        Reply(text="ok"),
    ]
    router.children["NARROW-PROMPT"] = [
        Reply(tool_calls=[skill_call("b", "B"), skill_call("a", "A")]),
        Reply(text="used a"),
    ]
    router.children[GENERAL] = [Reply(text="saw all")]
    try:
        await run_turn(baton, "go", approval=never_asked)
    finally:
        await baton.close()
    narrow = [r for r in router.child_requests() if "NARROW-PROMPT" in r.messages[0]["content"]]
    general = next(r for r in router.child_requests() if GENERAL in r.messages[0]["content"])
    schema = skill_schema(narrow[0])
    assert schema is not None
    listed = schema["function"]["description"].split("Available skills:\n", 1)[1]
    assert listed == "- a: Skill A."
    refused = tool_result_of(narrow[1], "B")
    assert "no skill named 'b'; available: a" in refused and "B-BODY" not in refused
    assert "A-BODY" in tool_result_of(narrow[1], "A")
    wide_schema = skill_schema(general)
    assert wide_schema is not None
    assert "- a: Skill A.\n- b: Skill B." in wide_schema["function"]["description"]
    # The main agent's own tool is not narrowed by its child's file.
    main_schema = skill_schema(router.main_requests()[0])
    assert main_schema is not None and "- b: Skill B." in main_schema["function"]["description"]


async def test_a_background_child_loads_a_skill_without_asking(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    make_skill(baton.workspace.root, "audit", "Audits.", "AUDIT-CHECKLIST")
    router = Router(fake_llm)
    task = {"subagent_type": "general-purpose", "prompt": "audit", "background": True}
    router.main += [Reply(tool_calls=[ToolCallSpec("task", task, id="BG")]), Reply(text="started")]
    router.children[GENERAL] = [
        Reply(tool_calls=[skill_call("audit", "K")]),
        Reply(text="audited"),
    ]
    try:
        await run_turn(baton, "go", approval=never_asked)
        [record] = await baton.tracker.list(session_id=1)
        finished = await wait_finished(baton, record.id)
        detail = await baton.tracker.get(record.id)
    finally:
        await baton.close()
    assert finished.state == "completed"
    assert "AUDIT-CHECKLIST" in tool_result_of(router.child_requests()[1], "K")
    assert detail is not None and not any("denied" in line for line in detail.log)


async def test_a_child_never_gets_a_skill_tool_its_parent_lacks(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm)
    try:
        skill = baton.tools.get("skill")
        assert isinstance(skill, SkillTool)
        limited = AgentDefinition(description="x", system_prompt="y", name="n", skills=("a",))
        free = AgentDefinition(description="x", system_prompt="y", name="m")
        no_skill = ToolRegistry(t for t in baton.tools if t.name != "skill")
        assert "skill" not in child_tools(limited, no_skill)
        assert "skill" not in child_tools(free, no_skill)
        assert child_tools(free, baton.tools).get("skill") is skill
        narrowed = child_tools(limited, baton.tools).get("skill")
        assert isinstance(narrowed, SkillTool) and narrowed.allowed == frozenset({"a"})
        # A grandchild's limit stays within its parent's.
        other = AgentDefinition(description="x", system_prompt="y", name="o", skills=("a", "b"))
        grandchild = child_tools(other, child_tools(limited, baton.tools)).get("skill")
        assert isinstance(grandchild, SkillTool) and grandchild.allowed == frozenset({"a"})
        reader = AgentDefinition(
            description="x", system_prompt="y", name="r", tools=("read_file",), skills=("a",)
        )
        assert "skill" not in child_tools(reader, baton.tools)
    finally:
        await baton.close()


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


async def test_a_worktree_child_lists_skills_at_once_and_keeps_its_parents_limit(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_agent(
        tmp_path, "lead", "description: Leads.\nskills: [a]\nallowed_subagents: [coder]", "LEAD"
    )
    write_agent(tmp_path, "coder", "description: Codes.\nisolation: worktree", "CODER")
    baton = await make_baton(tmp_path, fake_llm)
    root = baton.workspace.root
    make_skill(root, "a", "Skill A.", "A-BODY")
    make_skill(root, "b", "Skill B.", "B-BODY")
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "user.email=dev@example.com", "-c", "user.name=Dev", "add", ".")
    git(root, "-c", "user.email=dev@example.com", "-c", "user.name=Dev", "commit", "-qm", "x")
    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[ToolCallSpec("task", {"subagent_type": "lead", "prompt": "p"})]),
        Reply(text="ok"),
    ]
    coder = {"subagent_type": "coder", "prompt": "code"}
    router.children["LEAD"] = [
        Reply(tool_calls=[ToolCallSpec("task", coder, id="C")]),
        Reply(text="led"),
    ]
    router.children["CODER"] = [
        Reply(tool_calls=[skill_call("a", "A"), skill_call("b", "B")]),
        Reply(text="coded"),
    ]
    try:
        await run_turn(baton, "go", approval=never_asked)
    finally:
        await baton.close()
    requests = [r for r in router.child_requests() if "CODER" in r.messages[0]["content"]]
    assert "a git worktree of the project made for you alone" in requests[0].messages[0]["content"]
    schema = skill_schema(requests[0])
    assert schema is not None
    assert schema["function"]["description"].endswith("Available skills:\n- a: Skill A.")
    # Read from the workspace, as its parent reads them: the worktree is still being
    # checked out when its first request lists them.
    assert "A-BODY" in tool_result_of(requests[1], "A")
    assert "no skill named 'b'; available: a" in tool_result_of(requests[1], "B")


async def test_a_child_whose_tools_leave_out_skill_gets_its_skills_in_its_prompt(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The usual Claude Code shape, `tools: Read, Grep` with `skills: [a]`: as Claude Code
    does, the skill's instructions are in the agent's prompt from the start; the file
    says so in a note, and a skill that does not exist is reported, not dropped unsaid."""
    write_agent(
        tmp_path, "reader", "description: Reads.\ntools: Read, Grep\nskills: [a, nope]", "READER"
    )
    baton = await make_baton(tmp_path, fake_llm)
    make_skill(baton.workspace.root, "a", "Skill A.", "A-BODY: check the changelog.")
    (baton.workspace.root / ".baton" / "skills" / "a" / "ref.md").write_text("REF\n")
    make_skill(baton.workspace.root, "b", "Skill B.", "B-BODY")
    router = Router(fake_llm)
    task = {"subagent_type": "reader", "prompt": "read"}
    router.main += [Reply(tool_calls=[ToolCallSpec("task", task, id="T")]), Reply(text="ok")]
    router.children["READER"] = [Reply(text="read it")]
    router.default_child = lambda request: Reply(text="read it")
    try:
        await run_turn(baton, "go", approval=never_asked)
        [record] = await baton.tracker.list(session_id=1)
        detail = await baton.tracker.get(record.id)
        reader = baton.agents.get("reader")
    finally:
        await baton.close()
    first = next(r for r in router.child_requests() if "READER" in r.messages[0]["content"])
    prompt = str(first.messages[0]["content"])
    assert '<skill name="a">' in prompt and "A-BODY: check the changelog." in prompt
    assert "ref.md" in prompt and "read them with read_file" in prompt
    assert "B-BODY" not in prompt  # only the skills its file names
    assert skill_schema(first) is None  # its tools are its file's: no skill tool
    assert sorted(first.tools) == ["grep", "read_file", "submit_result"]
    assert detail is not None
    assert "⚠ skill 'nope' not found; running without it" in detail.log
    assert reader is not None and any("put in its prompt" in note for note in reader.notes)


async def test_a_rule_that_denies_a_skill_keeps_it_out_of_the_prompt_too(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """Put in a prompt, a skill passes the same rules as a call of the skill tool: a deny
    (or an ask, since nobody can be asked while a prompt is made) keeps it out, said."""
    write_agent(tmp_path, "reader", "description: Reads.\ntools: Read\nskills: a, b", "READER")
    rules = PermissionsConfig(deny=("skill(a)",), ask=("skill(b)",))
    baton = await make_baton(tmp_path, fake_llm, permissions=rules)
    make_skill(baton.workspace.root, "a", "Skill A.", "A-BODY")
    make_skill(baton.workspace.root, "b", "Skill B.", "B-BODY")
    router = Router(fake_llm)
    task = {"subagent_type": "reader", "prompt": "read"}
    router.main += [Reply(tool_calls=[ToolCallSpec("task", task, id="T")]), Reply(text="ok")]
    router.default_child = lambda request: Reply(text="read it")
    try:
        await run_turn(baton, "go", approval=never_asked)
        [record] = await baton.tracker.list(session_id=1)
        detail = await baton.tracker.get(record.id)
    finally:
        await baton.close()
    prompt = str(router.child_requests()[0].messages[0]["content"])
    assert "A-BODY" not in prompt and "B-BODY" not in prompt
    assert detail is not None
    said = "\n".join(detail.log)
    assert "⚠ skill 'a' not put in its prompt (" in said
    assert "⚠ skill 'b' not put in its prompt (" in said
