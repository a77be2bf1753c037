"""baton.yaml's schedules, webhooks and watch: read as DESIGN.md writes them, and every
mistake refused when the file is read, naming the entry and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_settings
from bot.errors import ConfigError
from bot.redaction import Redactor


@pytest.fixture(autouse=True)
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home").resolve()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return home


DESIGN_EXAMPLE = """
schedules:                        # cron runs, once across replicas
  - {name: deps-report, cron: "0 9 * * 1", timezone: Europe/Berlin, channel: C0123ABCDEF,
     prompt: "List outdated dependencies", owner: U012ABCDEF}
webhooks:                         # POST /hooks/<name>, HMAC-signed
  - {name: new-issue, secret_env: ISSUE_HOOK_SECRET, channel: C0123ABCDEF,
     prompt: "Triage: ${issue.title}", owner: U012ABCDEF}
watch:                            # every new top-level message starts a run in its thread
  - {channel: C0ALERTS00, prompt: "Triage this alert", include_bots: true,
     max_runs_per_hour: 20, owner: U012ABCDEF}
access:
  schedulers: [U0SCHED, S0GROUP]
"""


def settings_of(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    (tmp_path / "baton.yaml").write_text(text)
    return load_settings(cwd=tmp_path)


def test_the_design_example_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISSUE_HOOK_SECRET", "hook-secret-value")
    settings = settings_of(tmp_path, DESIGN_EXAMPLE)
    (schedule,) = settings.triggers.schedules
    assert (schedule.name, schedule.cron, schedule.timezone) == (
        "deps-report",
        "0 9 * * 1",
        "Europe/Berlin",
    )
    assert (schedule.channel, schedule.owner, schedule.agent) == ("C0123ABCDEF", "U012ABCDEF", "")
    (hook,) = settings.triggers.webhooks
    assert hook.secret_env == "ISSUE_HOOK_SECRET"
    assert settings.webhook_secrets == {"new-issue": "hook-secret-value"}
    (watch,) = settings.triggers.watch
    assert (watch.channel, watch.include_bots, watch.max_runs_per_hour, watch.match) == (
        "C0ALERTS00",
        True,
        20,
        None,
    )
    assert settings.access.schedulers == ("U0SCHED", "S0GROUP")
    # A webhook's secret is one of Baton's own: never shown in a thread.
    assert "hook-secret-value" not in Redactor(settings.secret_values)("x hook-secret-value y")


BASE = {"name": "a", "cron": '"0 9 * * 1"', "channel": "C1", "prompt": "p", "owner": "U1"}


def entry(**changes: str) -> str:
    """A schedule as baton.yaml writes it, with `changes`."""
    fields = {**BASE, **changes}
    return "{" + ", ".join(f"{key}: {value}" for key, value in fields.items()) + "}"


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        (entry(cron='"0 9 * *"'), "has 5 fields"),
        (entry(cron='"61 * * * *"'), "Bad minute"),
        (entry(cron='"0 0 30 2 *"'), "day-of-month"),
        (entry(timezone="Mars/Olympus"), "not a time zone"),
        (entry(timezone="../../etc/passwd"), "not a time zone"),
        (entry(name='"../x"'), "schedules.0.name"),
        (entry(channel='"#general"'), "channel"),
        (entry(owner="S0GROUP"), "owner"),
        (entry(prompt='""'), "prompt"),
        (entry(agent='"Bad Name"'), "agent"),
        (entry(every="5"), "unknown key"),
    ],
)
def test_a_bad_schedule_is_refused_with_its_reason(
    tmp_path: Path, entry: str, complaint: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_of(tmp_path, f"schedules:\n  - {entry}\n")
    assert complaint in str(refused.value)
    assert "baton.yaml" in str(refused.value)


def test_names_listed_twice_are_refused(tmp_path: Path) -> None:
    entry = '{name: same, cron: "0 9 * * 1", channel: C1, prompt: p, owner: U1}'
    with pytest.raises(ConfigError, match="the name 'same' is listed twice"):
        settings_of(tmp_path, f"schedules:\n  - {entry}\n  - {entry}\n")
    watch = "{channel: C1, prompt: p, owner: U1}"
    with pytest.raises(ConfigError, match="the channel 'C1' is listed twice"):
        settings_of(tmp_path, f"watch:\n  - {watch}\n  - {watch}\n")


@pytest.mark.parametrize(
    ("prompt", "complaint"),
    [
        ('"Triage ${issue.title"', "without its closing"),
        ("\"Run ${__import__('os').system('id')}\"", "not a dotted path"),
        ('"Run ${issue..title}"', "not a dotted path"),
        ('"Run ${}"', "not a dotted path"),
    ],
)
def test_a_webhook_template_is_a_dotted_path_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prompt: str, complaint: str
) -> None:
    monkeypatch.setenv("HOOK", "s")
    with pytest.raises(ConfigError, match=complaint):
        settings_of(
            tmp_path,
            "webhooks:\n  - {name: h, secret_env: HOOK, channel: C1, "
            f"prompt: {prompt}, owner: U1}}\n",
        )


def test_a_webhook_without_its_secret_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MISSING_HOOK_SECRET", raising=False)
    with pytest.raises(ConfigError, match="secret_env MISSING_HOOK_SECRET is not set"):
        settings_of(
            tmp_path,
            "webhooks:\n  - {name: h, secret_env: MISSING_HOOK_SECRET, channel: C1, "
            "prompt: p, owner: U1}\n",
        )


def test_a_webhook_may_not_borrow_one_of_batons_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whoever knows the bot token could otherwise sign deliveries, and the other way round.
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "slack-signing")
    with pytest.raises(ConfigError, match="one of Baton's own secrets"):
        settings_of(
            tmp_path,
            "webhooks:\n  - {name: h, secret_env: SLACK_SIGNING_SECRET, channel: C1, "
            "prompt: p, owner: U1}\n",
        )


def test_no_mcp_server_is_handed_a_webhooks_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_SECRET", "s")
    with pytest.raises(ConfigError, match="a webhook's secret"):
        settings_of(
            tmp_path,
            "webhooks:\n  - {name: h, secret_env: HOOK_SECRET, channel: C1, prompt: p, owner: U1}\n"
            "mcp_servers:\n  leak: {url: 'https://mcp.example.com/', "
            "headers: {X-Key: '${HOOK_SECRET}'}}\n",
        )


@pytest.mark.parametrize(
    ("match", "complaint"),
    [("(error", "missing )"), (r"(a)\1", "invalid escape"), ("(?<=x)y", "RE2")],
)
def test_a_watch_match_is_re2(tmp_path: Path, match: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        settings_of(
            tmp_path,
            f"watch:\n  - {{channel: C1, prompt: p, owner: U1, match: '{match}'}}\n",
        )
