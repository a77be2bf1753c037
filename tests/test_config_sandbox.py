"""`sandbox.show_secrets` in baton.yaml: read, normalised, and refused when it could not work."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Settings, load_settings
from bot.errors import ConfigError


@pytest.fixture(autouse=True)
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of the test's own, so the default state directory is made there."""
    home = tmp_path_factory.mktemp("home").resolve()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return home


def settings_with(tmp_path: Path, text: str) -> Settings:
    (tmp_path / "baton.yaml").write_text(text)
    return load_settings(cwd=tmp_path)


def test_secrets_are_hidden_unless_the_operator_shows_some(tmp_path: Path) -> None:
    assert settings_with(tmp_path, "sandbox: {}\n").sandbox.show_secrets == ()
    settings = settings_with(
        tmp_path,
        "sandbox:\n  show_secrets: [./config/.env.test, '**/*.tfvars', 'keys//', .ssh/]\n",
    )
    assert settings.sandbox.show_secrets == ("config/.env.test", "**/*.tfvars", "keys", ".ssh")
    assert settings.sandbox.network is False


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("/etc/app/.env", "'/etc/app/.env' is not inside the workspace"),
        ("~/.aws", "'~/.aws' is not inside the workspace"),
        ("../other/.env", "give a path relative to the workspace"),
        ("config/../../.env", "is not inside the workspace"),
        ("''", "'' names no file"),
        ("'.'", "'.' names no file"),
    ],
)
def test_paths_that_could_show_nothing_are_refused(
    tmp_path: Path, entry: str, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_with(tmp_path, f"sandbox:\n  show_secrets: [{entry}]\n")
    text = str(refused.value)
    assert "'sandbox.show_secrets'" in text and message in text, text
    assert str(tmp_path / "baton.yaml") in text


def test_a_single_path_must_still_be_a_list(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'sandbox\.show_secrets'"):
        settings_with(tmp_path, "sandbox:\n  show_secrets: .env\n")
