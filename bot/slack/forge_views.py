"""Block Kit for a thread's branch: its change after a run, and its pull request."""

from __future__ import annotations

from bot.sessions.workbench import WorkChange
from bot.slack.blocks import Block, TaskPostBack, button, context_block, section_block
from bot.slack.text import escape_mrkdwn

OPEN_PULL = "baton_open_pull"
SHOW_DIFF = "baton_show_diff"
DISCARD_BRANCH = "baton_discard_branch"


def change_message(change: WorkChange) -> TaskPostBack:
    """What a run changed on the thread's branch, with Open pull request (Update when
    it has one), Show diff and Discard."""
    value = str(change.branch_id)
    head = f"✎ Changes on `{escape_mrkdwn(change.branch)}`: {escape_mrkdwn(change.summary)}"
    blocks: list[Block] = [section_block(head)]
    if change.note:
        blocks.append(context_block(change.note))
    elif change.pr_url:
        blocks.append(context_block(f"Pull request: <{change.pr_url}>"))
    label = "Update pull request" if change.pr_url else "Open pull request"
    blocks.append(
        {
            "type": "actions",
            "block_id": f"baton_branch_{value}",
            "elements": [
                button(label, OPEN_PULL, value, style="primary"),
                button("Show diff", SHOW_DIFF, value),
                button("Discard", DISCARD_BRANCH, value, style="danger"),
            ],
        }
    )
    return TaskPostBack(
        text=f"Changes on {change.branch}: {change.summary}", blocks=blocks, file=None
    )


def retry_pull_message(text: str, branch_id: int) -> TaskPostBack:
    """A failed attempt to open a pull request, with a button to try again."""
    return TaskPostBack(
        text=text,
        blocks=[
            section_block(text),
            {
                "type": "actions",
                "block_id": f"baton_branch_retry_{branch_id}",
                "elements": [button("Try again", OPEN_PULL, str(branch_id), style="primary")],
            },
        ],
        file=None,
    )
