"""Changes to baton.yaml's schedules, webhooks and watch take effect without a restart:
on SIGHUP, or when the file changes; a broken file keeps what ran."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import aiohttp
import pytest

from bot.config import load_file_config
from bot.triggers.book import TriggerBook
from bot.triggers.definitions import TriggersConfig
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.slack_api import FakeSlackAPI
from tests.processes import wait_until_healthy
from tests.slack.harness import BOT
from tests.slack.test_operable import environment, start_bot

SCHEDULE = '{name: %s, cron: "0 9 * * 1", channel: C1, prompt: "%s", owner: U1}'
HOOK = "{name: %s, secret_env: %s, channel: C1, prompt: p, owner: U1}"


def book_of(path: Path) -> TriggerBook:
    config = load_file_config(path)
    secrets = {hook.name: os.environ[hook.secret_env] for hook in config.webhooks}
    return TriggerBook(config.triggers, secrets, config_path=path)


def test_a_reload_adds_changes_and_removes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_A", "secret-a")
    monkeypatch.setenv("HOOK_B", "secret-b")
    path = tmp_path / "baton.yaml"
    path.write_text(
        f"schedules:\n  - {SCHEDULE % ('kept', 'p')}\n  - {SCHEDULE % ('edited', 'old')}\n"
        f"  - {SCHEDULE % ('dropped', 'p')}\nwebhooks:\n  - {HOOK % ('a', 'HOOK_A')}\n"
    )
    book = book_of(path)
    seen: list[TriggersConfig] = []
    book.on_reload(seen.append)
    assert book.secret("a") == "secret-a"
    assert book.secret("b") is None
    path.write_text(
        f"schedules:\n  - {SCHEDULE % ('kept', 'p')}\n  - {SCHEDULE % ('edited', 'new')}\n"
        f"  - {SCHEDULE % ('fresh', 'p')}\nwebhooks:\n  - {HOOK % ('b', 'HOOK_B')}\n"
    )
    assert book.changed_on_disk()
    report = book.reload()
    assert report.error is None
    assert set(report.added) == {"schedule fresh", "webhook b"}
    assert report.changed == ("schedule edited",)
    assert set(report.removed) == {"schedule dropped", "webhook a"}
    assert [s.name for s in book.triggers.schedules] == ["kept", "edited", "fresh"]
    assert book.triggers.schedule("edited").prompt == "new"  # type: ignore[union-attr]
    # A webhook that is gone is not verified with its old secret any more.
    assert book.secret("a") is None
    assert book.secret("b") == "secret-b"
    assert seen == [book.triggers]
    assert not book.changed_on_disk()


def test_a_broken_file_keeps_what_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HOOK_A", "secret-a")
    path = tmp_path / "baton.yaml"
    path.write_text(f"webhooks:\n  - {HOOK % ('a', 'HOOK_A')}\n")
    book = book_of(path)
    before = book.triggers
    for broken, complaint in [
        ("webhooks: [", "not valid YAML"),
        (
            f"schedules:\n  - {SCHEDULE.replace('0 9 * * 1', '0 25 * * *') % ('x', 'p')}\n",
            "Bad hour",
        ),
        (f"webhooks:\n  - {HOOK % ('a', 'UNSET_SECRET_VARIABLE')}\n", "is not set"),
    ]:
        path.write_text(broken)
        with caplog.at_level(logging.ERROR, logger="bot.triggers.book"):
            report = book.reload()
        assert report.error is not None and complaint in report.error
        assert "was not reloaded" in caplog.text
        assert book.triggers == before
        assert book.secret("a") == "secret-a"
        caplog.clear()


def test_other_keys_wait_for_a_restart_and_say_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "baton.yaml"
    path.write_text("max_turns: 10\n")
    book = book_of(path)
    path.write_text(f"max_turns: 20\nschedules:\n  - {SCHEDULE % ('s', 'p')}\n")
    with caplog.at_level(logging.INFO, logger="bot.triggers.book"):
        report = book.reload()
    assert report.others_changed
    assert report.added == ("schedule s",)
    assert "take effect when Baton restarts" in caplog.text


def test_a_configmap_update_is_seen(tmp_path: Path) -> None:
    # Kubernetes mounts a ConfigMap as a symlink to a directory it swaps atomically.
    first, second = tmp_path / "..data-1", tmp_path / "..data-2"
    first.mkdir()
    second.mkdir()
    (first / "baton.yaml").write_text(f"schedules:\n  - {SCHEDULE % ('one', 'p')}\n")
    (second / "baton.yaml").write_text(f"schedules:\n  - {SCHEDULE % ('two', 'p')}\n")
    (tmp_path / "..data").symlink_to(first.name)
    (tmp_path / "baton.yaml").symlink_to("..data/baton.yaml")
    book = book_of(tmp_path / "baton.yaml")
    assert not book.changed_on_disk()
    (tmp_path / "..data.tmp").symlink_to(second.name)
    os.replace(tmp_path / "..data.tmp", tmp_path / "..data")
    assert book.changed_on_disk()
    book.reload()
    assert [s.name for s in book.triggers.schedules] == ["two"]


async def test_sighup_and_the_file_watcher_reload_a_running_bot(tmp_path: Path) -> None:
    config = tmp_path / "baton.yaml"
    config.write_text(f"webhooks:\n  - {HOOK % ('first', 'FIRST_SECRET')}\n")
    async with FakeSlackAPI(bot_user_id=BOT) as slack, FakeOpenAI() as llm:
        env = environment(
            tmp_path, slack, llm.url, BATON_CONFIG=str(config),
            FIRST_SECRET="first-secret", SECOND_SECRET="second-secret",
        )  # fmt: skip
        base = f"http://127.0.0.1:{env['PORT']}"
        process = await start_bot(tmp_path, env)
        try:
            async with aiohttp.ClientSession() as http:
                await wait_until_healthy(http, base, process)

                async def status(name: str) -> int:
                    async with http.post(f"{base}/hooks/{name}", data=b"{}") as response:
                        return response.status

                # Known: unsigned is refused (401); unknown: 404.
                assert await status("first") == 401
                assert await status("second") == 404
                config.write_text(
                    f"webhooks:\n  - {HOOK % ('first', 'FIRST_SECRET')}\n"
                    f"  - {HOOK % ('second', 'SECOND_SECRET')}\n"
                )
                process.send_signal(signal.SIGHUP)
                answers: list[int] = []

                async def second_known() -> None:
                    while (code := await status("second")) != 401:
                        answers.append(code)
                        await asyncio.sleep(0.05)

                await asyncio.wait_for(second_known(), 30)
                assert set(answers) <= {404}
                # No signal this time: the watcher sees the file change.
                config.write_text(f"webhooks:\n  - {HOOK % ('second', 'SECOND_SECRET')}\n")

                async def first_gone() -> None:
                    # Polling is the point: the change is in another process.
                    while await status("first") != 404:  # noqa: ASYNC110
                        await asyncio.sleep(0.05)

                await asyncio.wait_for(first_gone(), 30)
                assert await status("second") == 401
                # A broken file keeps what ran.
                config.write_text("webhooks: [\n")
                process.send_signal(signal.SIGHUP)
                assert await status("second") == 401
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 40)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        stderr = (await process.stderr.read()).decode()  # type: ignore[union-attr]
    assert "triggers reloaded (added: webhook second)" in stderr
    assert "removed: webhook first" in stderr
    assert "baton.yaml was not reloaded" in stderr
