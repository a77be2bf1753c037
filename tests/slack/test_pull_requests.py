"""From a thread to a pull request: a branch per thread, pushed by Baton, a draft PR."""

from __future__ import annotations

from pathlib import Path

from bot.slack.forge_views import OPEN_PULL
from tests.slack.forge_harness import (
    CHANNEL,
    REPO,
    ask,
    start_forge_harness,
    until_said,
    writes,
)
from tests.slack.harness import ALICE


async def test_a_threads_change_becomes_a_draft_pull_request(tmp_path: Path) -> None:
    async for forge in start_forge_harness(tmp_path):
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        offer = await until_said(forge, thread, OPEN_PULL)
        assert "greet.py" in str(offer)
        button = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert button is not None
        await forge.slack.click(OPEN_PULL, button["button"]["value"], user=ALICE)
        await until_said(forge, thread, "Opened draft pull request")
        pulls = forge.github.pulls(REPO)
        assert len(pulls) == 1
        pull = pulls[0]
        assert pull.draft and pull.base_ref == "main" and pull.head_ref.startswith("baton/")
        assert forge.git.show(REPO, pull.head_ref, "greet.py") == "print('hi')\n"
        # The body links the thread and names who asked; the commit is Baton's, with the
        # person who asked as co-author.
        assert "Alice" in (pull.body or "") and "slack.com" in (pull.body or "")
        commit = forge.commit(pull.head_ref)
        assert commit.startswith("Baton <")
        assert "Co-authored-by: Alice <alice@example.com>" in commit
        assert "add a greeting" in commit
        link = await until_said(forge, thread, "Opened draft pull request")
        assert f"/pull/{pull.number}" in str(link)
        # The checkout everyone shares is untouched: the work lives on the thread's branch.
        assert not (forge.checkout / "greet.py").exists()
