"""Block Kit builders: every view within Slack's limits, and nothing dropped."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.describe import task_mark
from bot.slack.blocks import (
    CANCEL_RUN,
    CANCEL_TASK,
    LOG_PAGE,
    VIEW_LOG,
    error_message,
    home_view,
    log_pages,
    progress_blocks,
    progress_text,
    state_in_words,
    task_detail_blocks,
    task_finished_message,
    task_log_modal,
    tasks_panel,
)
from bot.slack.text import escape_mrkdwn
from bot.store.tasks import TaskDetail, TaskRecord
from bot.subagents.handoff import Handoff

NOW = datetime(2025, 3, 4, 12, 0, tzinfo=UTC)
BLOCK_LIMITS = {"message": 50, "modal": 100, "home": 100}


# --------------------------------------------------------------------- validator


def check_button(button: dict[str, Any]) -> None:
    assert button["type"] == "button"
    assert button["text"]["type"] == "plain_text"
    assert 0 < len(button["text"]["text"]) <= 75
    assert 0 < len(button["action_id"]) <= 255
    assert len(button.get("value", "")) <= 2_000
    assert button.get("style") in (None, "primary", "danger")


def check_blocks(blocks: list[dict[str, Any]], kind: str) -> None:
    """Assert Slack's limits for the blocks of a message, a modal or App Home."""
    assert 0 < len(blocks) <= BLOCK_LIMITS[kind]
    block_ids = [block["block_id"] for block in blocks if "block_id" in block]
    assert len(block_ids) == len(set(block_ids)), block_ids
    assert all(0 < len(block_id) <= 255 for block_id in block_ids)
    markdown_total = 0
    for block in blocks:
        match block["type"]:
            case "section":
                assert block["text"]["type"] in ("mrkdwn", "plain_text")
                assert 0 < len(block["text"]["text"]) <= 3_000
                if "accessory" in block:
                    check_button(block["accessory"])
            case "markdown":
                assert kind == "message", "markdown blocks are for messages"
                assert block["text"]
                markdown_total += len(block["text"])
            case "header":
                assert block["text"]["type"] == "plain_text"
                assert 0 < len(block["text"]["text"]) <= 150
            case "context":
                assert 0 < len(block["elements"]) <= 10
                for element in block["elements"]:
                    assert element["type"] in ("mrkdwn", "plain_text")
                    assert 0 < len(element["text"]) <= 2_000
            case "actions":
                assert 0 < len(block["elements"]) <= 25
                action_ids = [element["action_id"] for element in block["elements"]]
                assert len(action_ids) == len(set(action_ids))
                for element in block["elements"]:
                    check_button(element)
            case "divider":
                pass
            case other:
                pytest.fail(f"unexpected block type {other}")
    assert markdown_total <= 12_000


def check_message(text: str, blocks: list[dict[str, Any]]) -> None:
    assert 0 < len(text) <= 40_000
    check_blocks(blocks, "message")


def check_view(view: dict[str, Any]) -> None:
    assert view["type"] in ("modal", "home")
    if view["type"] == "modal":
        assert view["title"]["type"] == "plain_text"
        assert 0 < len(view["title"]["text"]) <= 24
        for key in ("close", "submit"):
            if key in view:
                assert 0 < len(view[key]["text"]) <= 24
    assert len(view.get("private_metadata", "")) <= 3_000
    check_blocks(view["blocks"], view["type"])


def all_text(blocks: list[dict[str, Any]]) -> str:
    parts = []
    for block in blocks:
        if isinstance(block.get("text"), dict):
            parts.append(block["text"]["text"])
        elif isinstance(block.get("text"), str):
            parts.append(block["text"])
        parts.extend(
            element.get("text", "")
            for element in block.get("elements", [])
            if "type" in element and element["type"] in ("mrkdwn", "plain_text")
        )
    return "\n".join(parts)


def buttons(blocks: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """(action_id, value, style) of every button, in order."""
    return [
        (element["action_id"], element["value"], element.get("style"))
        for block in blocks
        if block["type"] == "actions"
        for element in block["elements"]
    ]


# ----------------------------------------------------------------------- records


def make_task(**changes: Any) -> TaskRecord:
    values: dict[str, Any] = {
        "id": "task-explore-3",
        "session_id": 1,
        "channel_id": "C1",
        "agent": "explore",
        "description": "Find the config loader",
        "prompt": "Find where   the settings\nare loaded and list every environment variable read.",
        "background": True,
        "state": "completed",
        "started_by": "U1",
        "result": "The settings load in `bot/config.py`.",
        "error": None,
        "prompt_tokens": 1_234,
        "completion_tokens": 56,
        "delivered": False,
        "created_at": NOW - timedelta(seconds=180 + 12.3),
        "finished_at": NOW - timedelta(seconds=180),
    }
    values.update(changes)
    return TaskRecord(**values)


def running_task(**changes: Any) -> TaskRecord:
    return make_task(state="running", result=None, finished_at=None, **changes)


# ---------------------------------------------------------------------- progress


def test_progress_while_running_has_a_cancel_button() -> None:
    lines = [f"[explore] ▸ read_file {i}" for i in range(30)]
    blocks = progress_blocks(lines, run_id="run-1", running=True, status="Working…")
    check_blocks(blocks, "message")
    assert blocks[0]["elements"][0]["text"] == "Working…"
    code = blocks[1]["text"]["text"]
    assert code.startswith("```\n") and code.endswith("\n```")
    assert code.count("\n") == 12 + 1
    assert "read_file 29" in code and "read_file 18" in code and "read_file 17" not in code
    assert buttons(blocks) == [(CANCEL_RUN, "run-1", "danger")]


def test_progress_when_done_has_no_button() -> None:
    status = "✓ Done · 3 turns · 1,234 in / 56 out tokens · 12.3 s"
    blocks = progress_blocks(["✓ Done"], run_id="run-1", running=False, status=status)
    check_blocks(blocks, "message")
    assert buttons(blocks) == []
    assert blocks[0]["elements"][0]["text"] == status


def test_progress_without_lines_shows_only_the_status() -> None:
    blocks = progress_blocks([], run_id="r", running=True, status="Working…")
    check_blocks(blocks, "message")
    assert [block["type"] for block in blocks] == ["context", "actions"]


@pytest.mark.parametrize(
    "lines",
    [
        ["x" * 10_000] * 12,
        ["<&>" * 2_000] * 20,
        ["a ``` b"] * 3,
        ["short", "y" * 50_000],
    ],
)
def test_progress_stays_within_a_section(lines: list[str]) -> None:
    blocks = progress_blocks(lines, run_id="r", running=True, status="s" * 5_000)
    check_blocks(blocks, "message")
    code = blocks[1]["text"]["text"]
    assert code.count("```") == 2  # a backtick run in a line cannot end the block early
    text = progress_text(lines, "Working…")
    assert 0 < len(text) <= 40_000
    assert text.startswith("Working…")


def test_progress_escapes_lines() -> None:
    blocks = progress_blocks(["ping <!channel>"], run_id="r", running=False, status="s")
    assert "&lt;!channel&gt;" in blocks[1]["text"]["text"]


# --------------------------------------------------------------------- post-back


def test_task_finished_message_headline_and_result() -> None:
    post = task_finished_message(make_task())
    check_message(post.text, post.blocks)
    headline = "✓ explore · task-explore-3 · done · 12.3 s · 1,234 in / 56 out tokens"
    assert post.blocks[0]["elements"][0]["text"] == headline
    assert post.blocks[1] == {"type": "markdown", "text": "The settings load in `bot/config.py`."}
    assert post.text.startswith(headline)
    assert post.file is None


@pytest.mark.parametrize(
    ("state", "error", "result", "shown"),
    [
        ("failed", "the model went away", None, "**Failed:** the model went away"),
        ("cancelled", "cancelled by <@U2>", None, "**Cancelled:** cancelled by <@U2>"),
        ("failed", None, None, "**Failed:** no reason given"),
        ("failed", "turn limit", "partial work", "**Partial result:**\n\npartial work"),
        ("completed", None, "", "_(no result text)_"),
    ],
)
def test_task_finished_message_outcomes(
    state: str, error: str | None, result: str | None, shown: str
) -> None:
    post = task_finished_message(make_task(state=state, error=error, result=result))
    check_message(post.text, post.blocks)
    assert post.blocks[0]["elements"][0]["text"].startswith(f"{task_mark(state)} explore")
    assert shown in post.blocks[1]["text"]
    assert post.file is None


@pytest.mark.parametrize("length", [11_001, 30_000, 200_000])
def test_task_finished_message_attaches_a_long_result(length: int) -> None:
    result = "\n\n".join(f"Finding {i}: " + "detail " * 20 for i in range(length // 150 + 1))
    result = result[:length]
    post = task_finished_message(make_task(result=result))
    check_message(post.text, post.blocks)
    assert post.file is not None
    assert post.file.content == result
    assert post.file.filename == "task-explore-3.md"
    shown = post.blocks[1]["text"]
    assert f"({len(result):,} characters)" in shown
    assert "task-explore-3.md" in shown
    assert result.startswith(shown.rsplit("\n\n", 1)[0])


def test_task_finished_message_keeps_an_11k_result_inline() -> None:
    result = "word " * 2_200
    post = task_finished_message(make_task(result=result))
    check_message(post.text, post.blocks)
    assert post.file is None
    assert post.blocks[1]["text"] == result.strip()


@pytest.mark.parametrize("text", ["boom", "a <b> & c", "", "e" * 200_000])
def test_error_message(text: str) -> None:
    message = error_message(text)
    check_message(message.text, message.blocks)
    assert message.text.startswith("✗ ")
    assert message.blocks[0]["text"]["text"].startswith("✗ ")
    if "<" in text:
        assert "&lt;b&gt; &amp; c" in message.blocks[0]["text"]["text"]
    if len(text) > 150_000:
        assert "more characters of this error are not shown" in all_text(message.blocks)


# ------------------------------------------------------------------ /tasks panel


def test_tasks_panel_when_empty() -> None:
    blocks = tasks_panel([], now=NOW, running=0, done=0, viewer_may_cancel=lambda task: True)
    check_blocks(blocks, "message")
    assert "⚙ 0 running · 0 done" in blocks[0]["text"]["text"]
    assert "No tasks in this channel yet." in blocks[1]["text"]["text"]


def test_tasks_panel_entry() -> None:
    task = make_task()
    blocks = tasks_panel([task], now=NOW, running=0, done=1, viewer_may_cancel=lambda t: True)
    check_blocks(blocks, "message")
    assert blocks[0]["text"]["text"] == "*⚙ 0 running · 1 done*"
    assert blocks[1]["text"]["text"] == (
        "✓ *explore* · Find the config loader · `task-explore-3` · done\n"
        "“Find where the settings are loaded and list ever…” · 3 min ago"
        " · 1,234 in / 56 out tokens"
    )
    assert buttons(blocks) == [(VIEW_LOG, "task-explore-3", None)]


def test_tasks_panel_prompt_preview_is_48_characters() -> None:
    prompt = "  ".join(["abcdefghij"] * 10)
    blocks = tasks_panel(
        [running_task(prompt=prompt)], now=NOW, running=1, done=0, viewer_may_cancel=lambda t: True
    )
    preview = re.search(r"“(.*)”", blocks[1]["text"]["text"])
    assert preview is not None
    assert preview.group(1) == " ".join(["abcdefghij"] * 10)[:48] + "…"
    assert "tokens" not in blocks[1]["text"]["text"]  # only finished tasks show usage


@pytest.mark.parametrize(
    ("state", "allowed", "expected"),
    [
        ("running", True, [VIEW_LOG, "baton_steer_task", CANCEL_TASK]),
        ("running", False, [VIEW_LOG]),
        ("completed", True, [VIEW_LOG]),
        ("failed", True, [VIEW_LOG]),
        ("cancelled", True, [VIEW_LOG]),
    ],
)
def test_cancel_button_only_when_running_and_allowed(
    state: str, allowed: bool, expected: list[str]
) -> None:
    task = make_task(state=state)
    panel = tasks_panel([task], now=NOW, running=1, done=0, viewer_may_cancel=lambda t: allowed)
    detail = task_detail_blocks(
        TaskDetail(task=task, log=("line",)), now=NOW, viewer_may_cancel=allowed
    )
    for blocks in (panel, detail):
        check_blocks(blocks, "message")
        assert [action for action, _, _ in buttons(blocks)] == expected
        for action, value, style in buttons(blocks):
            assert value == task.id
            assert style == ("danger" if action == CANCEL_TASK else None)


def test_tasks_panel_asks_about_each_task() -> None:
    tasks = [running_task(id=f"task-explore-{i}", started_by=f"U{i}") for i in range(4)]
    blocks = tasks_panel(
        tasks, now=NOW, running=4, done=0, viewer_may_cancel=lambda t: t.started_by == "U2"
    )
    cancels = [value for action, value, _ in buttons(blocks) if action == CANCEL_TASK]
    assert cancels == ["task-explore-2"]


@pytest.mark.parametrize(("count", "running", "done"), [(20, 5, 15), (21, 1, 20), (60, 10, 50)])
def test_tasks_panel_truncates_many_tasks(count: int, running: int, done: int) -> None:
    tasks = [running_task(id=f"task-explore-{i}") for i in range(count)]
    blocks = tasks_panel(
        tasks, now=NOW, running=running, done=done, viewer_may_cancel=lambda t: True
    )
    check_blocks(blocks, "message")
    shown = [value for action, value, _ in buttons(blocks) if action == VIEW_LOG]
    assert shown == [f"task-explore-{i}" for i in range(min(count, 20))]
    if count > 20:
        assert blocks[-1]["type"] == "context"
        assert blocks[-1]["elements"][0]["text"] == f"… and {count - 20} more"
    else:
        assert blocks[-1]["type"] == "actions"


def test_tasks_panel_counts_tasks_beyond_the_list() -> None:
    tasks = [make_task(id=f"task-explore-{i}") for i in range(25)]
    blocks = tasks_panel(tasks, now=NOW, running=0, done=80, viewer_may_cancel=lambda t: True)
    assert blocks[-1]["elements"][0]["text"] == "… and 60 more"


def test_tasks_panel_escapes_what_people_and_models_wrote() -> None:
    task = make_task(description="<!channel> & co", prompt="<@U1> look", agent="explore")
    blocks = tasks_panel([task], now=NOW, running=0, done=1, viewer_may_cancel=lambda t: True)
    text = blocks[1]["text"]["text"]
    assert "&lt;!channel&gt; &amp; co" in text
    assert "&lt;@U1&gt; look" in text
    assert "<!channel>" not in text


def test_tasks_panel_with_huge_fields_stays_within_limits() -> None:
    tasks = [
        make_task(id=f"task-{'a' * 60}-{i}", description="d" * 5_000, prompt="p" * 50_000)
        for i in range(30)
    ]
    blocks = tasks_panel(tasks, now=NOW, running=0, done=30, viewer_may_cancel=lambda t: True)
    check_blocks(blocks, "message")
    assert "and 10 more" in str(blocks[-1])


@pytest.mark.parametrize(
    ("age", "expected"),
    [(timedelta(seconds=5), "just now"), (timedelta(hours=2, minutes=1), "2 h ago")],
)
def test_tasks_panel_age(age: timedelta, expected: str) -> None:
    task = running_task(created_at=NOW - age)
    blocks = tasks_panel([task], now=NOW, running=1, done=0, viewer_may_cancel=lambda t: True)
    assert blocks[1]["text"]["text"].endswith(f"” · {expected}")


# ------------------------------------------------------------------- /tasks ID


def test_task_detail_shows_the_last_ten_log_lines() -> None:
    log = tuple(f"[explore] ▸ grep {i}" for i in range(25))
    blocks = task_detail_blocks(
        TaskDetail(task=running_task(), log=log), now=NOW, viewer_may_cancel=True
    )
    check_blocks(blocks, "message")
    text = all_text(blocks)
    assert "`task-explore-3`" in blocks[0]["text"]["text"]
    assert all(f"grep {i}\n" in text for i in range(15, 25))
    assert "grep 14\n" not in text
    assert "The last 10 of 25 log lines." in text
    assert buttons(blocks) == [
        (VIEW_LOG, "task-explore-3", None),
        ("baton_steer_task", "task-explore-3", None),
        (CANCEL_TASK, "task-explore-3", "danger"),
    ]


def test_task_detail_without_log() -> None:
    blocks = task_detail_blocks(
        TaskDetail(task=make_task(), log=()), now=NOW, viewer_may_cancel=False
    )
    check_blocks(blocks, "message")
    assert "No log lines yet." in all_text(blocks)


# --------------------------------------------------------------------- log modal


def modal_pages(detail: TaskDetail) -> list[dict[str, Any]]:
    return [task_log_modal(detail, page=page) for page in range(log_pages(detail))]


def test_log_modal_of_a_small_task() -> None:
    detail = TaskDetail(task=make_task(), log=("[explore] ▸ read_file", "[explore] ✓ done"))
    view = task_log_modal(detail)
    check_view(view)
    assert log_pages(detail) == 1
    assert view["title"]["text"] == "Task log"
    assert view["close"]["text"] == "Close"
    assert view["private_metadata"] == "task-explore-3"
    text = all_text(view["blocks"])
    for expected in (
        "*explore*",
        "`task-explore-3`",
        "completed",
        "12.3 s",
        "1,234 in / 56 out tokens",
        "Find where   the settings",
        "[explore] ▸ read_file\n[explore] ✓ done",
        "— Final result —",
        "The settings load in `bot/config.py`.",
    ):
        assert expected in text
    assert buttons(view["blocks"]) == []


def test_log_modal_shows_the_error_of_a_failed_task() -> None:
    task = make_task(state="failed", error="interrupted by a restart; start it again", result=None)
    text = all_text(task_log_modal(TaskDetail(task=task, log=()))["blocks"])
    assert "*Failed:* interrupted by a restart; start it again" in text


def test_log_modal_paginates_without_losing_a_line() -> None:
    log = tuple(f"[explore] ▸ bash <step {i}> " + "x" * (i % 300) for i in range(3_000))
    result = "\n\n".join(f"Paragraph {i} of the result." for i in range(2_000))
    detail = TaskDetail(task=make_task(result=result), log=log)
    pages = modal_pages(detail)
    assert len(pages) > 2
    texts = []
    for number, view in enumerate(pages):
        check_view(view)
        assert view["private_metadata"] == "task-explore-3"
        assert view["blocks"][0]["elements"][0]["text"] == f"Page {number + 1} of {len(pages)}"
        expected = []
        if number > 0:
            expected.append((LOG_PAGE, f"task-explore-3:{number - 1}", None))
        if number < len(pages) - 1:
            expected.append((LOG_PAGE, f"task-explore-3:{number + 1}", None))
        assert buttons(view["blocks"]) == expected
        texts.append(all_text(view["blocks"]))
    joined = "\n".join(texts)
    log_lines = [
        line for line in joined.split("\n") if line.startswith("[explore] ▸ bash &lt;step ")
    ]
    assert log_lines == [escape_mrkdwn(line) for line in log]
    paragraphs = re.findall(r"Paragraph (\d+) of the result\.", joined)
    assert paragraphs == [str(i) for i in range(2_000)]


def test_log_modal_splits_a_line_longer_than_a_section() -> None:
    line = "<" * 10_000
    pages = modal_pages(TaskDetail(task=make_task(), log=(line,)))
    for view in pages:
        check_view(view)
    text = "".join(all_text(view["blocks"]) for view in pages)
    assert re.sub(r"[^&lt;]", "", text).count("&lt;") >= 10_000


def test_log_modal_out_of_range_page_shows_the_nearest() -> None:
    log = tuple(f"line {i} " + "y" * 2_900 for i in range(250))
    detail = TaskDetail(task=make_task(), log=log)
    last = log_pages(detail) - 1
    assert last >= 1
    assert task_log_modal(detail, page=99) == task_log_modal(detail, page=last)
    assert task_log_modal(detail, page=-3) == task_log_modal(detail, page=0)


def test_log_modal_of_a_running_task() -> None:
    view = task_log_modal(TaskDetail(task=running_task(), log=("[explore] ▸ glob",)))
    check_view(view)
    assert "Still running." in all_text(view["blocks"])


# ---------------------------------------------------------------------- App Home


def test_home_view_without_tasks_says_how_to_start() -> None:
    view = home_view(running=0, done=0, tasks=[], now=NOW)
    check_view(view)
    assert view["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": "Baton"}}
    text = all_text(view["blocks"])
    assert "⚙ 0 running · 0 done" in text
    assert "Your recent tasks" in text
    assert "Mention @baton in a thread" in text
    assert "`/tasks`" in text


def test_home_view_lists_at_most_15_tasks() -> None:
    tasks = [
        replace(running_task(), id=f"task-explore-{i}", created_at=NOW - timedelta(minutes=i))
        for i in range(40)
    ]
    view = home_view(running=2, done=3, tasks=tasks, now=NOW)
    check_view(view)
    text = all_text(view["blocks"])
    assert "⚙ 2 running · 3 done" in text
    assert "`task-explore-14`" in text and "`task-explore-15`" not in text
    assert "● *explore* · Find the config loader · `task-explore-3` · running · 3 min ago" in text
    assert "… and 25 more" in text


@pytest.mark.parametrize(
    ("state", "error", "words"),
    [
        ("running", None, "running"),
        ("completed", None, "done"),
        ("failed", "crashed: ValueError: bad input", "failed: crashed: ValueError: bad input"),
        ("failed", None, "failed"),
        ("cancelled", "cancelled by <@UALICE>", "cancelled by <@UALICE>"),
        ("failed", "interrupted by a restart; start it again", "interrupted by a restart"),
    ],
)
def test_states_are_said_in_words(state: str, error: str | None, words: str) -> None:
    task = replace(make_task(), state=state, error=error)
    assert state_in_words(task) == words


def test_who_cancelled_a_task_shows_as_a_mention_and_nothing_else_does() -> None:
    post = task_finished_message(make_task(state="cancelled", error="cancelled by <@U2>"))
    headline = post.blocks[0]["elements"][0]["text"]
    assert "cancelled by <@U2>" in headline and "&lt;@U2&gt;" not in headline
    # A failure's words are the model's or a tool's: a mention or ping in them stays text.
    for error in ("cancelled by <!channel>", "cancelled by <@U2> and <@U3>"):
        post = task_finished_message(make_task(state="cancelled", error=error))
        headline = post.blocks[0]["elements"][0]["text"]
        assert "<!channel>" not in headline and "<@U3>" not in headline
    post = task_finished_message(make_task(state="failed", error="cancelled by <@U2>"))
    assert "<@U2>" not in post.blocks[0]["elements"][0]["text"]


def test_a_finished_post_says_the_handoffs_status_and_limitations() -> None:
    handoff = Handoff(
        status="blocked",
        answer="Could not run the migration.",
        limitations=("needs database credentials",),
    )
    task = make_task(
        state="completed", result="Could not run the migration.", handoff=handoff.to_json()
    )
    markdown = task_finished_message(task).blocks[1]["text"]
    assert markdown.startswith("**Status:** blocked\n\nCould not run the migration.")
    assert "**Limitations:**\n- needs database credentials" in markdown
    # A task stored without a handoff (or with an unreadable one) shows its result alone.
    for stored in (None, "not json"):
        plain = task_finished_message(make_task(state="completed", result="R", handoff=stored))
        assert plain.blocks[1]["text"] == "R"


def test_a_finished_post_pings_nobody_whatever_the_child_wrote() -> None:
    handoff = Handoff(
        status="uncertain",
        answer="Done <!channel> and <@U0BOSS>",
        limitations=("ask <!here> about it",),
    )
    task = make_task(state="completed", result=handoff.answer, handoff=handoff.to_json())
    post = task_finished_message(task)
    shown = post.blocks[1]["text"] + post.text
    for ping in ("<!channel>", "<@U0BOSS>", "<!here>"):
        assert ping not in shown
    assert "channel>" in shown and "here>" in shown  # still readable
