"""A refusal to start a run: why, in words the person can act on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """Why someone may not start a run now.

    Attributes:
        reason: A short machine-friendly reason (``not_listed``, ``guest``, ``external``,
            ``channel``, ``user_budget``, ``channel_budget``, ``unknown_person``, ``check_failed``).
        text: The message shown to that person alone: what happened and whom to ask.
    """

    reason: str
    text: str
