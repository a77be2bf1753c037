"""Schedules from Slack: `/tasks schedule` (a modal), `/tasks schedules` (a channel's list),
App Home's list, and their Pause, Resume and Delete buttons.

Who may: making a schedule takes `access.schedulers` (user or group ids; empty: the
approvers) and being allowed to start runs in its channel. A schedule made in Slack is
paused, resumed or deleted by a scheduler or its owner; one set in baton.yaml is paused
or resumed by a scheduler only, and deleted nowhere but in the file. A modal or a
button only shows what may be asked: every submission and click is checked again here,
since a payload can be replayed or made up.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.access.deciders import Deciders
from bot.access.directory import Directory, includes
from bot.access.refusal import Refusal
from bot.sessions.turns import AccessGate
from bot.slack.blocks import Block
from bot.slack.events import channel_of
from bot.slack.schedule_views import (
    AGENT_BLOCK,
    CHANNEL_BLOCK,
    CRON_BLOCK,
    DELETE_SCHEDULE,
    NAME_BLOCK,
    PAUSE_SCHEDULE,
    PROMPT_BLOCK,
    PROMPT_CHARS,
    RESUME_SCHEDULE,
    SCHEDULE_VIEW,
    TIMEZONE_BLOCK,
    ScheduleForm,
    channel_schedules_blocks,
    home_schedules_blocks,
    parse_schedule_value,
    schedule_form,
    schedule_modal,
)
from bot.triggers.definitions import AgentName, TriggerName, check_cron, check_timezone
from bot.triggers.scheduler import ScheduleInfo, Scheduler, slack_date

logger = logging.getLogger(__name__)

Verb = Literal["pause", "resume", "delete"]
# Show App Home again to a person, with what their click did.
RefreshHome = Callable[[str, str | None], Awaitable[None]]
# The id of the workspace Baton is installed in.
TeamId = Callable[[], Awaitable[str | None]]

_NAME = TypeAdapter(TriggerName)
_AGENT = TypeAdapter(AgentName)
# Words in a sentence of the scheduler that say which field it is about, first first.
_FIELD_WORDS = (
    ("named", NAME_BLOCK),
    ("a name", NAME_BLOCK),
    ("cron", CRON_BLOCK),
    ("time zone", TIMEZONE_BLOCK),
    ("timezone", TIMEZONE_BLOCK),
    ("channel", CHANNEL_BLOCK),
    ("agent", AGENT_BLOCK),
    ("prompt", PROMPT_BLOCK),
)
_UNREACHABLE = {"channel_not_found", "not_in_channel"}
_BOLD_NAME = re.compile(r"\*([a-z0-9][a-z0-9._-]*)\*")


class ScheduleActions:
    """The schedule commands, the modal's submission and the list's buttons; thin: check
    who and where, call the scheduler, say what it did."""

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        client: AsyncWebClient,
        deciders: Deciders,
        directory: Directory,
        access: AccessGate,
        schedulers: Sequence[str],
        spawn: Callable[..., Any],
        refresh_home: RefreshHome,
        team_id: TeamId,
        agent_names: Callable[[str], Sequence[str]] | None = None,
    ) -> None:
        """Hold what the handlers need.

        Args:
            scheduler: Lists, makes and changes schedules (and knows baton.yaml's).
            client: The Slack Web API client.
            deciders: Who the approvers are (the schedulers when `schedulers` is empty).
            directory: Looks user groups up.
            access: Who may start runs where.
            schedulers: `access.schedulers`: user and group ids.
            spawn: Runs a coroutine as an owned task (the turn machine's).
            refresh_home: Publishes a person's App Home again, with a notice.
            team_id: The workspace's id, for access checks of what no request carries
                (App Home's list).
            agent_names: The agents a channel's runs have (a schedule's `agent` must be
                one of them).
        """
        self.agent_names = agent_names
        self.scheduler = scheduler
        self.client = client
        self.deciders = deciders
        self.directory = directory
        self.access = access
        self.schedulers = tuple(schedulers)
        self.spawn = spawn
        self.refresh_home = refresh_home
        self.team_id = team_id

    def register(self, app: AsyncApp) -> None:
        app.view(SCHEDULE_VIEW)(self.handle_submission)
        app.action(PAUSE_SCHEDULE)(self.handle_pause)
        app.action(RESUME_SCHEDULE)(self.handle_resume)
        app.action(DELETE_SCHEDULE)(self.handle_delete)

    # ---------------------------------------------------------------- authority

    async def is_scheduler(self, user: str) -> bool:
        """Whether `user` may make schedules and change any of them."""
        if self.schedulers:
            return await includes(self.directory, self.schedulers, user)
        return await self.deciders.is_approver(user)

    def _schedulers_named(self) -> str:
        return (
            "the people `access.schedulers` names"
            if self.schedulers
            else "approvers (`access.schedulers` is empty)"
        )

    async def may_start(
        self,
        *,
        user: str,
        channel: str,
        team_id: str | None = None,
        user_team: str | None = None,
        enterprise_id: str | None = None,
    ) -> Refusal | None:
        """Why `user` may not start runs in `channel`; None when they may (`team_id`
        defaults to the workspace Baton is installed in)."""
        return await self.access.may_start(
            user_id=user,
            channel_id=channel,
            is_dm=channel.startswith("D"),
            team_id=team_id or await self.team_id(),
            user_team=user_team,
            enterprise_id=enterprise_id,
        )

    async def may_look(self, user: str, channel: str, **where: str | None) -> Refusal | None:
        """Whether `user` may see a channel's schedules: approvers, and who may run there
        (what `/tasks` asks to show a channel's tasks)."""
        if await self.deciders.is_approver(user):
            return None
        return await self.may_start(user=user, channel=channel, **where)

    async def may_change(self, user: str, info: ScheduleInfo, **where: str | None) -> bool:
        """Schedulers; for one made in Slack also its owner, while they may look at its
        channel."""
        return bool(await self._changeable(user, [info], **where))

    async def _changeable(
        self, user: str, schedules: Sequence[ScheduleInfo], **where: str | None
    ) -> set[tuple[str, str]]:
        """The (source, name) of the schedules `user` may change."""
        if await self.is_scheduler(user):
            return {(info.source, info.name) for info in schedules}
        return {
            (info.source, info.name)
            for info in schedules
            if info.source == "slack"
            and info.owner == user
            and await self.may_look(user, info.channel_id, **where) is None
        }

    # ----------------------------------------------------------------- commands

    async def open_form(self, command: dict[str, Any], respond: AsyncRespond | None) -> None:
        """`/tasks schedule`: the modal for schedulers, a refusal for anyone else."""
        user, channel = command["user_id"], command["channel_id"]
        if not await self.is_scheduler(user):
            await self._say(
                channel,
                user,
                f"Only {self._schedulers_named()} can make schedules.",
                respond=respond,
            )
            return
        await self.client.views_open(
            trigger_id=command["trigger_id"], view=schedule_modal(channel_id=channel)
        )

    async def show_list(self, command: dict[str, Any], respond: AsyncRespond | None) -> None:
        """`/tasks schedules`: the schedules of the channel it is typed in, to people who
        may see that channel's tasks."""
        user, channel = command["user_id"], command["channel_id"]
        refusal = await self.may_look(
            user,
            channel,
            team_id=command.get("team_id"),
            enterprise_id=command.get("enterprise_id"),
        )
        if refusal is not None:
            await self._say(channel, user, refusal.text, respond=respond)
            return
        where = {"team_id": command.get("team_id"), "enterprise_id": command.get("enterprise_id")}
        text, blocks = await self._channel_list(user, channel, notice=None, where=where)
        await self._say(channel, user, text, blocks, respond=respond)

    async def _channel_list(
        self, user: str, channel: str, *, notice: str | None, where: dict[str, str | None]
    ) -> tuple[str, list[Block]]:
        schedules = await self.scheduler.listing(channel_id=channel)
        allowed = await self._changeable(user, schedules, **where)
        blocks = channel_schedules_blocks(
            schedules,
            channel_id=channel,
            may_change=lambda info: (info.source, info.name) in allowed,
            notice=notice,
        )
        count = f"{len(schedules):,} schedule{'s' if len(schedules) != 1 else ''} here"
        return (f"{notice} · {count}" if notice else count), blocks

    async def home_blocks(self, user: str) -> list[Block]:
        """App Home's schedules: every one for a scheduler, else the viewer's own."""
        everyone = await self.is_scheduler(user)
        schedules = await self.scheduler.listing(owner=None if everyone else user)
        allowed = await self._changeable(user, schedules)
        return home_schedules_blocks(
            schedules,
            everyone=everyone,
            may_change=lambda info: (info.source, info.name) in allowed,
        )

    # --------------------------------------------------------------- the modal

    async def handle_submission(
        self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        """Make the schedule before answering Slack (within its 3 s), so that what is
        wrong shows under its field; a forged submission makes nothing."""
        user = (body.get("user") or {}).get("id")
        if not isinstance(user, str) or not user:
            await ack(
                response_action="errors",
                errors={NAME_BLOCK: "Slack did not say who submitted this."},
            )
            return
        form = schedule_form(view)
        try:
            errors = await self._errors(body, user, form)
            if not errors:
                made = await self.scheduler.create(
                    name=form.name,
                    cron=check_cron(form.cron),
                    timezone=form.timezone,
                    channel_id=form.channel_id,
                    prompt=form.prompt,
                    agent=form.agent,
                    owner=user,
                    by=user,
                )
                if made is not None:
                    errors = {_field_of(made): _plain(made)}
        except Exception:
            logger.exception("could not make schedule %r", form.name)
            errors = {NAME_BLOCK: "Baton could not save the schedule; try again."}
        if errors:
            await ack(response_action="errors", errors=errors)
            return
        await ack()
        self.spawn(self.confirm(user, form), "schedule_made")

    async def _errors(self, body: dict[str, Any], user: str, form: ScheduleForm) -> dict[str, str]:
        """What is wrong with a submission, by the block id of its field."""
        if not await self.is_scheduler(user):
            return {NAME_BLOCK: f"Only {self._schedulers_named()} can make schedules."}
        errors: dict[str, str] = {}
        try:
            _NAME.validate_python(form.name)
        except ValidationError:
            errors[NAME_BLOCK] = (
                "Use lowercase letters, digits, dots, dashes and underscores (at most 48), "
                "starting with a letter or a digit."
            )
        else:
            if self.scheduler.book.triggers.schedule(form.name) is not None:
                errors[NAME_BLOCK] = (
                    f"baton.yaml has a schedule named {form.name}; choose another name."
                )
        for block, check, value in (
            (CRON_BLOCK, check_cron, form.cron),
            (TIMEZONE_BLOCK, check_timezone, form.timezone),
        ):
            try:
                check(value)
            except ValueError as exc:
                errors[block] = _sentence(str(exc))
        if not form.prompt:
            errors[PROMPT_BLOCK] = "Write what Baton should do."
        elif len(form.prompt) > PROMPT_CHARS:
            errors[PROMPT_BLOCK] = f"At most {PROMPT_CHARS:,} characters."
        try:
            _AGENT.validate_python(form.agent)
        except ValidationError:
            errors[AGENT_BLOCK] = "Not an agent's name: lowercase letters, digits, . _ and -."
        else:
            if form.agent and form.channel_id and self.agent_names is not None:
                names = self.agent_names(form.channel_id)
                if form.agent not in names:
                    errors[AGENT_BLOCK] = _sentence(
                        f"No agent named {form.agent} works in that channel; "
                        f"there are {', '.join(names)}"
                    )
        if not form.channel_id or form.channel_id[0] not in "CG":
            errors[CHANNEL_BLOCK] = "Choose a channel."
        else:
            refusal = await self.may_start(
                user=user,
                channel=form.channel_id,
                team_id=(body.get("team") or {}).get("id"),
                user_team=(body.get("user") or {}).get("team_id"),
                enterprise_id=(body.get("enterprise") or {}).get("id"),
            )
            if refusal is not None:
                errors[CHANNEL_BLOCK] = refusal.text
        return errors

    async def confirm(self, user: str, form: ScheduleForm) -> None:
        """Tell whoever made a schedule that it is made and when it first runs: in its
        channel (only to them), or in a direct message when Baton is not in it."""
        made = next(
            (
                info
                for info in await self.scheduler.listing(channel_id=form.channel_id)
                if info.name == form.name and info.source == "slack"
            ),
            None,
        )
        first = (
            f"first run {slack_date(made.next_fire)}"
            if made is not None and made.next_fire is not None
            else "no run is due"
        )
        text = (
            f"⏰ Schedule *{form.name}* made: `{check_cron(form.cron)}` ({form.timezone}) in "
            f"<#{form.channel_id}>; {first}. `/tasks schedules` there lists it."
        )
        try:
            await self.client.chat_postEphemeral(channel=form.channel_id, user=user, text=text)
        except SlackApiError as exc:
            if exc.response.get("error") not in _UNREACHABLE:
                raise
            await self.client.chat_postMessage(
                channel=user, text=f"{text} Invite me there (/invite @baton): its runs post there."
            )

    # ------------------------------------------------------------------ buttons

    async def handle_pause(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.change(body, "pause"), "schedule_pause")

    async def handle_resume(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.change(body, "resume"), "schedule_resume")

    async def handle_delete(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.change(body, "delete"), "schedule_delete")

    async def change(self, body: dict[str, Any], verb: Verb) -> None:
        """Pause, resume or delete the schedule of a click, if the clicker may; the list
        they clicked in is shown again with what happened."""
        user = (body.get("user") or {}).get("id")
        parsed = parse_schedule_value(((body.get("actions") or [{}])[0]).get("value"))
        channel = channel_of(body)
        home = (body.get("view") or {}).get("type") == "home"
        if not isinstance(user, str) or not user or parsed is None or (not home and not channel):
            logger.info("ignored a schedule click that is not one of Baton's buttons")
            return
        source, name = parsed
        where = {
            "team_id": (body.get("team") or {}).get("id"),
            "user_team": (body.get("user") or {}).get("team_id"),
            "enterprise_id": (body.get("enterprise") or {}).get("id"),
        }
        listed = await self.scheduler.listing(channel_id=None if home else channel)
        named = [s for s in listed if s.name == name]
        info = next((s for s in named if s.source == source), None)
        in_file = any(s.source == "baton.yaml" for s in named)
        if verb == "delete" and (info is None or info.source == "baton.yaml") and in_file:
            # Whatever the value claims, baton.yaml's schedule is changed in the file.
            notice = f"*{name}* is set in baton.yaml; change it there."
        elif info is None:
            # Gone meanwhile, or a value carried from another channel's list.
            notice = f"There is no schedule *{name}* " + (
                "any more." if home else "in this channel."
            )
        elif verb != "delete" and info.shadowed:
            notice = (
                f"*{name}* made in Slack does not run: baton.yaml's schedule of that name "
                "does. Delete it, or make it again under another name."
            )
        elif not await self.may_change(user, info, **where):
            if info.source == "baton.yaml":
                notice = (
                    f"Only {self._schedulers_named()} can {verb} {name}, a schedule of baton.yaml."
                )
            else:
                notice = (
                    f"Only its owner {_mention(info.owner)} or {self._schedulers_named()} "
                    f"can {verb} {name}."
                )
        else:
            act = {
                "pause": self.scheduler.pause,
                "resume": self.scheduler.resume,
                "delete": self.scheduler.delete,
            }[verb]
            notice = await act(name, by=user)
        if home:
            await self.refresh_home(user, notice)
            return
        assert channel is not None
        if await self.may_look(user, channel, **where) is not None:
            await self._say(channel, user, notice)
            return
        text, blocks = await self._channel_list(user, channel, notice=notice, where=where)
        await self._say(channel, user, text, blocks)

    # ------------------------------------------------------------------- saying

    async def _say(
        self,
        channel: str,
        user: str,
        text: str,
        blocks: list[Block] | None = None,
        *,
        respond: AsyncRespond | None = None,
    ) -> None:
        """An ephemeral message; through the command's response URL when Baton is not in
        the channel (a click's answer is then only logged)."""
        try:
            await self.client.chat_postEphemeral(
                channel=channel, user=user, text=text, blocks=blocks
            )
        except SlackApiError as exc:
            if exc.response.get("error") not in _UNREACHABLE:
                raise
            if respond is None:
                logger.info("could not answer in %s: %s", channel, exc.response.get("error"))
                return
            await respond(text=text, blocks=blocks, response_type="ephemeral")


def _field_of(sentence: str) -> str:
    """The block id of the field a sentence of the scheduler is about (the name's, when
    it names none: a name already taken)."""
    lowered = sentence.lower()
    return next((block for word, block in _FIELD_WORDS if word in lowered), NAME_BLOCK)


def _plain(sentence: str) -> str:
    """A sentence of the scheduler for a field's error, which Slack shows as plain text:
    a name in bold is a name."""
    return _BOLD_NAME.sub(r"\1", sentence)


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _mention(user_id: str) -> str:
    return f"<@{user_id}>" if user_id[:1] in ("U", "W") and user_id.isalnum() else user_id
