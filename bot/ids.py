"""Slack ids as configuration names them: users U…/W…, user groups S…, channels C…/G…/D…."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

USER_OR_GROUP_PATTERN = r"^[UWS][A-Z0-9]{1,31}$"

UserOrGroupId = Annotated[str, StringConstraints(pattern=USER_OR_GROUP_PATTERN)]
UserId = Annotated[str, StringConstraints(pattern=r"^[UW][A-Z0-9]{1,31}$")]
ChannelId = Annotated[str, StringConstraints(pattern=r"^[CGD][A-Z0-9]{1,31}$")]
