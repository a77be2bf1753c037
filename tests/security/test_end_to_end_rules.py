"""Issue 24's rules through `python -m bot` as deployed: Slack, the model, the sandbox.

The model is the attacker: the fake provider answers a mention with tool calls that
step around the rules (a wrapper carrying a denied command, a program option that
writes, a command too large to judge). The bot runs as a real process in HTTP mode.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.slack_api import FakeSlackAPI
from tests.security.test_end_to_end import mention, running_bot
from tests.slack.harness import ALICE, BOT, until


def tool_results(llm: FakeOpenAI) -> list[str]:
    """What the tools answered, as the model saw it in its second request."""
    return [m.get("content", "") for m in llm.requests[1].messages if m.get("role") == "tool"]


def asked_in_thread(slack: FakeSlackAPI, ts: str) -> list[str]:
    """The approval requests posted in the thread, as text."""
    return [
        json.dumps(m.get("blocks", []))
        for m in slack.thread_messages("C1", ts)
        if "approve" in json.dumps(m.get("blocks", [])).lower()
    ]


async def test_wrappers_do_not_carry_a_denied_command_past_the_rules(tmp_path: Path) -> None:
    attacks = [
        "taskset -c 0 rm -rf src",
        "trap 'rm -rf src' EXIT",
        "script -qc 'rm -rf src' /dev/null",
        "setsid -w taskset 1 rm -rf src",
        "xargs rm -rf < names.txt",
    ]
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        llm.script(
            Reply(tool_calls=[ToolCallSpec("bash", {"command": c}) for c in attacks]),
            Reply(text="All done."),
        )
        config = 'permissions:\n  allow: [bash]\n  deny: ["bash(rm *)"]\n'
        async with running_bot(tmp_path, slack, llm, config) as (process, base, http):
            src = tmp_path / "ws" / "src"
            src.mkdir()
            (src / "app.py").write_text("print('keep')\n")
            (tmp_path / "ws" / "names.txt").write_text("src\n")
            ts = await mention(http, base, slack, "clean up please")

            def answered() -> bool:
                return any(
                    "All done." in m.get("text", "") for m in slack.thread_messages("C1", ts)
                )

            await until(answered, within=30)
            results = tool_results(llm)
            assert len(results) == len(attacks)
            for result in results:
                assert "deny: bash(rm *)" in result, result
            assert (src / "app.py").read_text() == "print('keep')\n"
            assert process.returncode is None


async def test_a_read_only_rule_waits_for_a_person_before_find_exec_writes(
    tmp_path: Path,
) -> None:
    hostile = "find . -maxdepth 0 -exec sh -c ': > README.md' ';'"
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        llm.script(Reply(tool_calls=[ToolCallSpec("bash", {"command": hostile})]))
        config = 'permissions:\n  allow: [read_file, "bash(find *)", "bash(ls*)"]\n'
        async with running_bot(tmp_path, slack, llm, config) as (_, base, http):
            ts = await mention(http, base, slack, "find the files")
            await until(lambda: bool(asked_in_thread(slack, ts)), within=30)
            assert "find -exec runs a program" in asked_in_thread(slack, ts)[0]
            assert (tmp_path / "ws" / "README.md").read_text() == "# Demo\n"


async def test_a_command_too_large_to_judge_asks_at_once_and_the_bot_keeps_answering(
    tmp_path: Path,
) -> None:
    pipeline = "|".join(["x"] * 40_000)  # 80 KB: seconds of parsing, were it parsed
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        llm.script(Reply(tool_calls=[ToolCallSpec("bash", {"command": pipeline})]))
        async with running_bot(tmp_path, slack, llm, "permissions:\n  allow: [bash]\n") as (
            process,
            base,
            http,
        ):
            ts = await mention(http, base, slack, "run this")
            await until(lambda: bool(asked_in_thread(slack, ts)), within=30)
            assert "too complex to judge automatically" in asked_in_thread(slack, ts)[0]
            async with http.get(f"{base}/healthz") as response:
                assert response.status == 200
            assert process.returncode is None
