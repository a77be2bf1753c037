"""Channels mapped to workspaces of their own: each works in its directory and no other's.

Built through the real composition root, with the real sandbox and the fake OpenAI
server; site A's tools, commands and agents must never reach site B's files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.app import Baton, build_baton
from bot.cli import render_agents
from bot.engine import Done
from bot.errors import ToolError
from bot.sessions import UnknownAgentError
from bot.sites import Site
from bot.store import SessionKey
from bot.tools import Tool
from bot.tools.base import person_approved
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec
from tests.sandbox.conftest import require

A_TEXT = "file of site A\n"
B_SECRET = "B-SECRET-7f3c\n"


@dataclass
class Layout:
    """Two channel workspaces beside the default one."""

    a: Path
    b: Path


def lay_out(parent: Path) -> Layout:
    a = parent / "site-a"
    b = parent / "site-b"
    for root, agent in ((a, "alpha"), (b, "beta")):
        (root / ".baton" / "agents").mkdir(parents=True)
        (root / ".baton" / "agents" / f"{agent}.md").write_text(
            f"---\ndescription: The {agent} agent of {root.name}.\n---\nWork in {root.name}.\n"
        )
    (a / "a.txt").write_text(A_TEXT)
    (b / "secret.txt").write_text(B_SECRET)
    (b / "docs").mkdir()
    (b / "docs" / "plan.txt").write_text(B_SECRET)
    return Layout(a.resolve(), b.resolve())


async def start(tmp_path: Path, fake_llm: FakeOpenAI, layout: Layout) -> Baton:
    settings = make_settings(
        tmp_path,
        fake_llm.url,
        # Two channels share A's directory: they share its site.
        workspaces={"C_A": layout.a, "C_A2": layout.a, "C_B": layout.b},
    )
    return await build_baton(settings)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return lay_out(tmp_path)


@pytest.fixture
async def baton(tmp_path: Path, fake_llm: FakeOpenAI, layout: Layout) -> AsyncIterator[Baton]:
    app = await start(tmp_path, fake_llm, layout)
    yield app
    await app.close()


@pytest.fixture
def approved() -> Iterator[None]:
    """As if a person approved every call: the workspace must hold even then."""
    token = person_approved.set(True)
    yield
    person_approved.reset(token)


async def call(site: Site, name: str, **arguments: object) -> str:
    tool = site.tools.get(name)
    assert isinstance(tool, Tool)
    return await tool.run(tool.parse_arguments(json.dumps(arguments)))


def untouched(layout: Layout) -> None:
    assert sorted(p.name for p in layout.b.iterdir()) == [".baton", "docs", "secret.txt"]
    assert (layout.b / "secret.txt").read_text() == B_SECRET
    assert sorted(p.name for p in (layout.b / "docs").iterdir()) == ["plan.txt"]


# ---------------------------------------------------------------- which site a channel gets


async def test_a_channel_gets_its_mapped_site_and_everything_else_the_default(
    baton: Baton, layout: Layout
) -> None:
    site_a, site_b = baton.site_for("C_A"), baton.site_for("C_B")
    assert site_a.root == layout.a and site_b.root == layout.b
    assert baton.site_for("C_A2") is site_a
    for unmapped in ("C_OTHER", "D0123DM", None):
        assert baton.site_for(unmapped) is baton.default_site
    assert baton.default_site.root == baton.settings.workspace
    assert baton.sites == (baton.default_site, site_a, site_b)


async def test_the_old_attributes_are_the_default_sites_parts(baton: Baton) -> None:
    default = baton.default_site
    assert baton.workspace is default.workspace and baton.tools is default.tools
    assert baton.permissions is default.permissions and baton.hooks is default.hooks
    assert baton.sandbox is default.sandbox and baton.agents is default.agents
    assert baton.runner is default.runner and baton.conversations is default.conversations


async def test_sites_share_the_database_sessions_and_tasks_but_not_their_tools(
    baton: Baton,
) -> None:
    site_a, site_b = baton.site_for("C_A"), baton.site_for("C_B")
    assert site_a.conversations.store is site_b.conversations.store
    assert site_a.conversations.tracker is site_b.conversations.tracker is baton.tracker
    assert site_a.runner.workspace == site_a.root and site_b.runner.workspace == site_b.root
    assert site_a.tools is not site_b.tools and site_a.permissions.workspace is site_a.workspace
    # What is learnt of a model (calibration, its stated window) holds in every workspace.
    assert site_a.runner.counter is site_b.runner.counter is baton.default_site.runner.counter
    assert site_a.main_agent.counter is site_a.runner.counter


async def test_each_sites_sandbox_hides_every_other_site(baton: Baton, layout: Layout) -> None:
    default = baton.settings.workspace
    assert baton.site_for("C_A").policy.workspace == layout.a
    assert {layout.b, default} <= set(baton.site_for("C_A").policy.masked)
    assert {layout.a, default} <= set(baton.site_for("C_B").policy.masked)
    assert {layout.a, layout.b} <= set(baton.default_site.policy.masked)
    assert layout.a not in baton.site_for("C_A").policy.masked


# ---------------------------------------------------------------- file tools stay in their site


async def test_file_tools_of_site_a_work_in_a(baton: Baton, layout: Layout) -> None:
    site_a = baton.site_for("C_A")
    assert A_TEXT.strip() in await call(site_a, "read_file", path="a.txt")
    assert A_TEXT.strip() in await call(site_a, "read_file", path=str(layout.a / "a.txt"))
    with pytest.raises(ToolError):
        await call(baton.default_site, "read_file", path="a.txt")


@pytest.mark.parametrize("spelling", ["absolute", "dotdot", "link", "dir-link"])
async def test_file_tools_of_site_a_cannot_read_site_b(
    baton: Baton, layout: Layout, spelling: str, approved: None
) -> None:
    site_a = baton.site_for("C_A")
    (layout.a / "link").symlink_to(layout.b / "secret.txt")
    (layout.a / "b-dir").symlink_to(layout.b)
    path = {
        "absolute": str(layout.b / "secret.txt"),
        "dotdot": "../site-b/secret.txt",
        "link": "link",
        "dir-link": "b-dir/secret.txt",
    }[spelling]
    with pytest.raises(ToolError) as caught:
        await call(site_a, "read_file", path=path)
    assert B_SECRET.strip() not in str(caught.value)
    directory = {"absolute": str(layout.b), "dotdot": "../site-b", "link": "b-dir"}.get(
        spelling, "b-dir/docs"
    )
    for name, arguments in [
        ("list_dir", {"path": directory}),
        ("glob", {"pattern": "*", "path": directory}),
        ("grep", {"pattern": "SECRET", "path": directory}),
    ]:
        try:
            shown = await call(site_a, name, **arguments)
        except ToolError as exc:
            shown = str(exc)
        assert "secret.txt" not in shown and "plan.txt" not in shown and "7f3c" not in shown


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
@pytest.mark.parametrize("spelling", ["absolute", "dotdot", "link", "dir-link"])
async def test_file_tools_of_site_a_cannot_write_site_b(
    baton: Baton, layout: Layout, tool: str, spelling: str, approved: None
) -> None:
    site_a = baton.site_for("C_A")
    (layout.a / "link").symlink_to(layout.b / "secret.txt")
    (layout.a / "b-dir").symlink_to(layout.b)
    for target in ("secret.txt", "new.txt"):
        path = {
            "absolute": str(layout.b / target),
            "dotdot": f"../site-b/{target}",
            "link": "link" if target == "secret.txt" else "b-dir/new.txt",
            "dir-link": f"b-dir/{target}",
        }[spelling]
        arguments = (
            {"path": path, "content": "pwned"}
            if tool == "write_file"
            else {"path": path, "old_text": "B-SECRET", "new_text": "pwned"}
        )
        with pytest.raises(ToolError):
            await call(site_a, tool, **arguments)
    untouched(layout)


# ---------------------------------------------------------------- bash stays in its site


async def bash(site: Site, command: str) -> str:
    require(site.sandbox)
    return await call(site, "bash", command=command)


async def test_bash_in_site_a_cannot_read_list_or_write_site_b(
    baton: Baton, layout: Layout
) -> None:
    site_a = baton.site_for("C_A")
    assert site_a.sandbox.available and baton.sandboxed and baton.sandbox_notice is None
    assert A_TEXT.strip() in await bash(site_a, "pwd; cat a.txt")
    assert str(layout.a) in await bash(site_a, "pwd")
    b = layout.b
    (layout.a / "link").symlink_to(b / "secret.txt")
    commands = [
        f"cat {b}/secret.txt",
        "cat ../site-b/secret.txt",
        "cat link",
        f"ls -la {b} {b}/docs",
        f"find {b.parent} -name '*.txt'",
        f"grep -r SECRET {b.parent}",
        f"echo pwned > {b}/new.txt",
        f"echo pwned >> {b}/secret.txt",
        f"mkdir -p {b}/made && touch {b}/made/x",
        f"rm -f {b}/secret.txt",
    ]
    for command in commands:
        shown = await bash(site_a, command)
        assert "7f3c" not in shown and "plan.txt" not in shown, (command, shown)
    untouched(layout)


@pytest.fixture
def system_layout() -> Iterator[Layout]:
    """Sites under /opt, which every sandbox shows read-only: there masking must hide them."""
    if not os.access("/opt", os.W_OK):
        pytest.skip("/opt is not writable here")
    parent = Path(tempfile.mkdtemp(prefix="baton-sites-", dir="/opt"))
    try:
        yield lay_out(parent)
    finally:
        shutil.rmtree(parent)


async def test_a_site_the_sandbox_would_show_is_masked_for_the_others(
    tmp_path: Path, fake_llm: FakeOpenAI, system_layout: Layout
) -> None:
    app = await start(tmp_path, fake_llm, system_layout)
    try:
        site_a = app.site_for("C_A")
        b = system_layout.b
        # Without the mask, the read-only /opt would show B to A's commands.
        listing = await bash(site_a, f"ls -a {b}; cat {b}/secret.txt {b}/docs/plan.txt")
        assert "7f3c" not in listing and "secret.txt " not in listing
        assert "secret.txt" not in await bash(site_a, f"ls {b}")
        await bash(site_a, f"echo pwned > {b}/new.txt; touch {b}/docs/x")
        assert A_TEXT.strip() in await bash(site_a, "cat a.txt")
        assert A_TEXT.strip() not in await bash(app.site_for("C_B"), f"cat {system_layout.a}/a.txt")
        assert "7f3c" not in await bash(app.default_site, f"cat {b}/secret.txt")
    finally:
        await app.close()
    untouched(system_layout)


# ---------------------------------------------------------------- agents and conversations


async def test_each_site_loads_its_own_agents(baton: Baton) -> None:
    site_a, site_b = baton.site_for("C_A"), baton.site_for("C_B")
    assert site_a.agents.get("alpha") is not None and site_a.agents.get("beta") is None
    assert site_b.agents.get("beta") is not None and site_b.agents.get("alpha") is None
    default = baton.default_site.agents
    assert default.get("alpha") is None and default.get("beta") is None
    # The built-in agents serve every site.
    assert all(site.agents.get("explore") is not None for site in baton.sites)


def thread(channel: str) -> SessionKey:
    return SessionKey.slack_thread(team_id="T1", channel_id=channel, thread_ts="1.000")


async def test_a_conversation_in_channel_a_reads_site_a(
    baton: Baton, fake_llm: FakeOpenAI, layout: Layout
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "a.txt"}, id="c1")]),
        Reply(text="read A"),
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "a.txt"}, id="c2")]),
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": str(layout.a / "a.txt")})]),
        Reply(text="done"),
    )
    events = [e async for e in baton.site_for("C_A").conversations.run_turn(thread("C_A"), "go")]
    assert isinstance(events[-1], Done) and events[-1].final_text == "read A"
    first, second = fake_llm.requests[0], fake_llm.requests[1]
    assert str(layout.a) in first.messages[0]["content"]
    assert A_TEXT.strip() in second.messages[-1]["content"]

    # In channel B's thread, B has no a.txt, and A's is out of reach by any name.
    site_b = baton.site_for("C_B")
    events = [e async for e in site_b.conversations.run_turn(thread("C_B"), "go")]
    assert isinstance(events[-1], Done)
    assert str(layout.b) in fake_llm.requests[2].messages[0]["content"]
    for request in fake_llm.requests[3:]:
        assert A_TEXT.strip() not in request.messages[-1]["content"]
    fake_llm.assert_all_used()


async def test_a_direct_agent_run_uses_its_channels_site(
    baton: Baton, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "a.txt"}, id="c1")]),
        Reply(text="alpha read it"),
    )
    outcome = await baton.site_for("C_A").conversations.run_agent(thread("C_A"), "alpha", "read")
    assert outcome.text == "alpha read it"
    assert A_TEXT.strip() in fake_llm.requests[1].messages[-1]["content"]
    with pytest.raises(UnknownAgentError):
        await baton.site_for("C_B").conversations.run_agent(thread("C_B"), "alpha", "read")


async def test_baton_agents_lists_each_workspaces_agents(baton: Baton, layout: Layout) -> None:
    report = render_agents(baton.settings)
    default, site_a, site_b = report.split("Workspace ")[1:]
    assert default.startswith(f"{baton.settings.workspace} (default: unmapped channels")
    assert site_a.startswith(f"{layout.a} (channels C_A, C_A2)")
    assert site_b.startswith(f"{layout.b} (channels C_B)")
    assert "alpha" in site_a and "alpha" not in site_b and "alpha" not in default
    assert "beta" in site_b and "beta" not in site_a
    assert all("explore" in section for section in (default, site_a, site_b))
