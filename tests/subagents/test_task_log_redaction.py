"""A sub-agent's task log never holds part of a configured secret: each line is redacted
whole before it is shortened (a secret cut in two is no longer found by the redaction
that runs when the log is shown, and its first half would stay)."""

from __future__ import annotations

from pathlib import Path

from bot.describe import SUMMARY_CHARS
from bot.subagents.runner import MAX_LOG_TEXT
from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec
from tests.subagents.harness import Router, make_baton, run_turn

# Configured as the GitHub token: no pattern knows its shape, only the settings do.
SECRET = "Zq9vK3mPx7Lw2Rt8Ny4Bc6Hd"
EXPLORE = "read-only"  # in explore's prompt


async def test_a_secret_straddling_the_cut_of_a_log_line_is_hidden_whole(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await make_baton(tmp_path, fake_llm, github_token=SECRET)
    # The secret starts a few characters before each cut: the tool line's summary
    # (SUMMARY_CHARS) and a piece of the model's text (MAX_LOG_TEXT).
    pattern = "x" * (SUMMARY_CHARS - 10) + SECRET
    text = "y" * (MAX_LOG_TEXT - 5) + SECRET
    router = Router(fake_llm)
    look = {"subagent_type": "explore", "prompt": "look", "description": "look"}
    router.main += [Reply(tool_calls=[ToolCallSpec("task", look, id="T")]), Reply(text="ok")]
    grep = ToolCallSpec("grep", {"pattern": pattern, "path": "."}, id="G")
    router.default_child = lambda request: Reply(text="nothing found")
    router.children[EXPLORE] = [Reply(text=text, tool_calls=[grep])]
    try:
        await run_turn(baton, "look for it")
        [record] = await baton.tracker.list(session_id=1)
        detail = await baton.tracker.get(record.id)
    finally:
        await baton.close()
    assert detail is not None
    stored = "\n".join(detail.log)
    assert "▸ grep " + "x" * (SUMMARY_CHARS - 10) in stored  # the tool line was kept
    assert "y" * 100 in stored  # and the text piece
    # No piece of the secret, however short, is left where the line was cut.
    assert SECRET[:4] not in stored, stored[-600:]
