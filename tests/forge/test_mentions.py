"""Which comments on GitHub ask Baton: `@baton`, or the names it goes by there."""

from __future__ import annotations

import pytest

from bot.forge.webhooks import mention_pattern


@pytest.mark.parametrize(
    "text",
    [
        "@baton please rename",
        "@Baton[bot] rename it",
        "hey @acme-baton, rename",
        "@acme-baton[bot]: rename",
        "(@ACME-BATON) rename",
    ],
)
def test_mentions_of_baton_and_its_logins_ask(text: str) -> None:
    assert mention_pattern(("acme-baton", "acme-baton[bot]")).search(text)


@pytest.mark.parametrize(
    "text",
    [
        "ops@baton.dev wrote this",
        "@batonist said",
        "see docs/@baton/x",
        "@acme-baton-ops please",
        "@acme rename",
        "no mention at all",
    ],
)
def test_look_alikes_do_not(text: str) -> None:
    assert not mention_pattern(("acme-baton", "acme-baton[bot]")).search(text)


def test_hostile_logins_are_taken_literally() -> None:
    """A login is escaped into the pattern: one holding regex syntax matches nothing else."""
    pattern = mention_pattern((".*", "a|b"))
    assert not pattern.search("@anything at all")
    assert pattern.search("@baton still works")
