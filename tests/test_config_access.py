"""The access, approval and limit keys of baton.yaml: read, checked, and named when wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.config import AccessConfig, LimitsConfig, PriceConfig, load_settings
from bot.errors import ConfigError
from tests.test_config import home, write  # noqa: F401  (the fixture isolates HOME)

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_restrict_guests_and_externals_and_cap_runs(tmp_path: Path) -> None:
    settings = load_settings(cwd=tmp_path)
    assert settings.access == AccessConfig(
        users=(), user_groups=(), channels=(), guests=False, external=False
    )
    assert settings.self_approval is True
    assert settings.workspaces == {}
    assert settings.limits == LimitsConfig(
        runs_per_user=3,
        runs=32,
        tokens_per_run=0,
        tokens_per_user_per_day=0,
        tokens_per_channel_per_day=0,
    )
    assert settings.prices == {}


def test_the_documented_example_is_read(tmp_path: Path) -> None:
    write(
        tmp_path / "baton.yaml",
        """
approvers: [U012ABCDEF, S0SECURITY]
self_approval: false
permissions:
  ask:
    - bash
    - {rule: "bash(git push*)", approvers: [S0PLATFORM]}
access:
  users: [U0ALICE]
  user_groups: [S0ENG]
  channels: [C0123ABCDEF, G0PRIVATE]
  guests: true
  external: true
limits:
  runs_per_user: 2
  runs: 10
  tokens_per_run: 200000
  tokens_per_user_per_day: 2000000
  tokens_per_channel_per_day: 10000000
prices:
  gpt-4.1-mini: {input: 0.4, output: 1.6}
""",
    )
    settings = load_settings(cwd=tmp_path)
    assert settings.approvers == ("U012ABCDEF", "S0SECURITY")
    assert settings.self_approval is False
    assert settings.access.user_groups == ("S0ENG",)
    assert settings.access.channels == ("C0123ABCDEF", "G0PRIVATE")
    assert settings.access.guests and settings.access.external
    assert settings.limits.tokens_per_user_per_day == 2_000_000
    assert settings.prices["gpt-4.1-mini"] == PriceConfig(input=0.4, output=1.6)
    plain, push = settings.permissions.ask_rules()
    assert (plain.text, plain.approvers) == ("bash", ())
    assert (push.text, push.tool, push.approvers) == ("bash(git push*)", "bash", ("S0PLATFORM",))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("access:\n  users: [alice]\n", "'access.users.0'"),
        ("access:\n  channels: [U0ALICE]\n", "'access.channels.0'"),
        ("access:\n  guest: true\n", "unknown key 'access.guest'"),
        ("limits:\n  runs: -1\n", "'limits.runs': Input should be greater than or equal to 0"),
        ("limits:\n  tokens_per_day: 5\n", "unknown key 'limits.tokens_per_day'"),
        ("prices:\n  gpt-x: {input: 1}\n", "'prices.gpt-x.output': Field required"),
        ("approvers: [everyone]\n", "'everyone' is not a Slack user id"),
        (
            "permissions:\n  ask: [{rule: 'bash(', approvers: [U1]}]\n",
            "'bash(' is not a rule",
        ),
        ("permissions:\n  ask: [{rule: bash, approvers: []}]\n", "approvers"),
        ("permissions:\n  ask: [{rule: bash, approver: [U1]}]\n", "approver"),
        ("workspaces:\n  general: /tmp\n", "'workspaces.general"),
    ],
)
def test_bad_access_and_limit_keys_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path / "baton.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_settings(cwd=tmp_path)
    assert str(tmp_path / "baton.yaml") in str(caught.value)
    assert message in str(caught.value)


def test_self_approval_off_without_approvers_is_one_line_naming_both_keys(
    tmp_path: Path,
    home: Path,  # noqa: F811
) -> None:
    write(tmp_path / "baton.yaml", "self_approval: false\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(cwd=tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert "self_approval" in message and "approvers" in message


def test_the_command_exits_2_with_that_one_line(tmp_path: Path, home: Path) -> None:  # noqa: F811
    write(tmp_path / "baton.yaml", "self_approval: false\napprovers: []\n")
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "BATON_WORKSPACE": str(tmp_path),
        "BATON_CONFIG": str(tmp_path / "baton.yaml"),
        "BATON_STATE_DIR": str(home / "state"),
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": "secret",
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("baton: ")
    assert "self_approval is false and approvers is empty" in lines[0]


def test_the_readmes_hardened_example_is_a_valid_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = (ROOT / "README.md").read_text()
    after = readme.split("A hardened configuration", 1)[1]
    example = after.split("```yaml\n", 1)[1].split("```", 1)[0]
    repos = tmp_path / "repos"
    for name in ("api", "web", "infra"):
        (repos / name).mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    write(tmp_path / "baton.yaml", example.replace("/srv/baton/repos", str(repos)))
    monkeypatch.setenv("BATON_CONFIG", str(tmp_path / "baton.yaml"))
    settings = load_settings(cwd=tmp_path / "ws")
    assert settings.self_approval is False
    assert settings.access.user_groups == ("S0ENGINEERS",)
    assert set(settings.workspaces) == {"C0APITEAM", "C0WEBTEAM", "C0PLATFORM"}
    assert [r.approvers for r in settings.permissions.ask_rules() if r.approvers] == [
        ("S0PLATFORM",),
        ("S0PLATFORM",),
    ]
    assert settings.limits.tokens_per_user_per_day == 2_000_000


def test_model_calls_are_read_and_checked(tmp_path: Path) -> None:
    write(
        tmp_path / "baton.yaml",
        "context_window: 32000\nmodel_calls: {max_concurrent: 4, retry_deadline_s: 30,"
        " stall_timeout_s: 20, answer_timeout_s: 300}\n",
    )
    settings = load_settings(cwd=tmp_path)
    assert settings.context_window == 32_000
    calls = settings.model_calls
    assert (calls.max_concurrent, calls.retry_deadline_s) == (4, 30)
    assert (calls.stall_timeout_s, calls.answer_timeout_s) == (20, 300)
    write(tmp_path / "baton.yaml", "model_calls: {max_concurrent: 0}\n")
    with pytest.raises(ConfigError, match=r"'model_calls\.max_concurrent'"):
        load_settings(cwd=tmp_path)
    write(tmp_path / "baton.yaml", "context_window: 100\n")
    with pytest.raises(ConfigError, match="'context_window'"):
        load_settings(cwd=tmp_path)
