"""Slack ids as configuration names them: users U…/W…, user groups S…, channels C…/G…/D…."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictStr, StringConstraints

USER_OR_GROUP_PATTERN = r"^[UWS][A-Z0-9]{1,31}$"

UserOrGroupId = Annotated[str, StringConstraints(pattern=USER_OR_GROUP_PATTERN)]
UserId = Annotated[str, StringConstraints(pattern=r"^[UW][A-Z0-9]{1,31}$")]
ChannelId = Annotated[str, StringConstraints(pattern=r"^[CGD][A-Z0-9]{1,31}$")]

# An id (or ts) as a Slack event carries it: as long as the database columns that keep
# them (bot/store/models.py).
SLACK_ID_CHARS = 32
SlackId = Annotated[StrictStr, Field(min_length=1, max_length=SLACK_ID_CHARS)]
