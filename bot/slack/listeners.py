"""Bolt listeners: each acks at once and hands the work to an owned asyncio task (a
message for Baton is stored first, by the intake middleware, so that an ack means kept)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext, AsyncRespond
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError

from bot.access.budgets import DailyBudgets, describe_usage
from bot.access.deciders import Deciders
from bot.access.refusal import Refusal
from bot.describe import redacted_detail
from bot.errors import SteeringFull
from bot.redaction import Redactor
from bot.sessions.turns import AccessGate, Cancelled, TurnMachine
from bot.slack.approval_views import APPROVE, DENY, SHOW_ARGUMENTS, recent_decisions_blocks
from bot.slack.approvals import SlackApprovals, approval_value
from bot.slack.blocks import (
    CANCEL_RUN,
    CANCEL_TASK,
    DISCARD_TASK,
    FEEDBACK_ACTION,
    LOG_PAGE,
    MERGE_TASK,
    RETRY_RUN,
    STEER_INPUT_BLOCK,
    STEER_TASK,
    STEER_TEXT_LIMIT,
    STEER_VIEW,
    TRIGGERED_RUNS,
    VIEW_LOG,
    feedback_line,
    home_view,
    parse_feedback,
    parse_steer_metadata,
    steer_modal,
    steer_text,
    task_detail_blocks,
    task_log_modal,
    tasks_panel,
    triggered_runs_block,
)
from bot.slack.directory import SlackDirectory
from bot.slack.events import channel_of
from bot.slack.schedule_actions import ScheduleActions
from bot.slack.thread_surface import SlackThreadSurface
from bot.store.feedback import FeedbackStore
from bot.store.tasks import TaskDetail, TaskRecord
from bot.store.thread_inbox import ThreadMessage
from bot.subagents import TaskTracker

logger = logging.getLogger(__name__)

PANEL_TASKS = 25
PANEL_DECISIONS = 5
HOME_TASKS = 15
# `/tasks <word>`: these words are commands, not task ids.
SCHEDULE_WORD = "schedule"
SCHEDULES_WORD = "schedules"
# Where the intake middleware leaves the message it stored, for the event listener.
TAKEN_MESSAGE = "baton_taken_message"
# The events that may carry a message for Baton, stored before Slack is answered.
MESSAGE_EVENTS = frozenset({"app_mention", "message"})


# Merge or discard an isolated task's branch, by a person; what happened, in words.
BranchDecision = Callable[..., Awaitable[str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenerParts:
    """What the listeners work with, handed in by the Slack surface."""

    turns: TurnMachine
    threads: SlackThreadSurface
    deciders: Deciders
    approvals: SlackApprovals
    access: AccessGate
    tracker: TaskTracker
    budgets: DailyBudgets
    feedback: FeedbackStore
    merge_task: BranchDecision
    discard_task: BranchDecision
    # What App Home warns of (commands run unsandboxed), and how the MCP servers are.
    sandbox_notice: Callable[[], str | None]
    servers_summary: Callable[[], str | None]
    # Agents per workspace, files refused and why, project instructions read (App Home).
    agents_summary: Callable[[], str | None]
    # What a channel's runs read as project instructions (AGENTS.md), for /tasks.
    instructions_line: Callable[[str], str | None]
    # The pull requests of a channel's threads, or of the threads a person asked in.
    pulls_line: Callable[..., Awaitable[str | None]]
    redact: Redactor
    # A message event of a watched channel, stored as the question of its run (None
    # when it starts none): schedules' and webhooks' runs start elsewhere.
    watched: Callable[..., Awaitable[ThreadMessage | None]] | None = None
    # `/tasks schedule`, `/tasks schedules` and App Home's schedules.
    schedules: ScheduleActions | None = None
    # Who people are: kept fresh by user_change and team_join.
    directory: SlackDirectory | None = None


def is_message_event(event: dict[str, Any]) -> bool:
    """Whether `event` is one that may carry a message for Baton."""
    kind = event.get("type")
    return isinstance(kind, str) and kind in MESSAGE_EVENTS


class Listeners:
    """The Slack entry points. Thin: parse, ack, call one function."""

    def __init__(self, parts: ListenerParts) -> None:
        self.parts = parts
        self.turns = parts.turns
        self.threads = parts.threads
        self.client = parts.threads.client
        self.deciders = parts.deciders
        self.approvals = parts.approvals
        self.tracker = parts.tracker
        self.feedback = parts.feedback
        self.spawn = parts.turns.spawn

    def register(self, app: AsyncApp) -> None:
        app.middleware(self.take_messages)
        app.event("app_mention")(self.handle_app_mention)
        app.event("message")(self.handle_message)
        app.event("app_home_opened")(self.handle_app_home_opened)
        if self.parts.directory is not None:
            app.event("user_change")(self.parts.directory.handle_user_event)
            app.event("team_join")(self.parts.directory.handle_user_event)
        app.command("/tasks")(self.handle_tasks_command)
        app.action(CANCEL_RUN)(self.handle_cancel_run)
        app.action(VIEW_LOG)(self.handle_view_log)
        app.action(CANCEL_TASK)(self.handle_cancel_task)
        app.action(STEER_TASK)(self.handle_steer_task)
        app.view(STEER_VIEW)(self.handle_steer_submission)
        app.action(MERGE_TASK)(self.handle_merge_task)
        app.action(DISCARD_TASK)(self.handle_discard_task)
        app.action(LOG_PAGE)(self.handle_log_page)
        app.action(APPROVE)(self.handle_approve)
        app.action(DENY)(self.handle_deny)
        app.action(SHOW_ARGUMENTS)(self.handle_show_arguments)
        app.action(FEEDBACK_ACTION)(self.handle_feedback)
        app.action(RETRY_RUN)(self.handle_retry_run)

    # -------------------------------------------------------------------- events

    async def take_messages(
        self, body: dict[str, Any], context: AsyncBoltContext, next: Callable[[], Awaitable[Any]]
    ) -> BoltResponse | None:
        """Before Slack is answered, a message for Baton is stored (the question is kept
        from then on, and a retried delivery is known). When the database cannot store
        it, Slack is answered 500 and sends it again, instead of being told it was taken.
        (Socket Mode's events; HTTP mode's are taken before Bolt, in HttpServer.)"""
        event = body.get("event") if body.get("type") == "event_callback" else None
        if isinstance(event, dict) and is_message_event(event):
            try:
                context[TAKEN_MESSAGE] = await self.take(body, event)
            except Exception:
                return BoltResponse(status=500, body="")
        return await next()

    async def take(self, body: dict[str, Any], event: dict[str, Any]) -> ThreadMessage | None:
        """The message event `event` of the delivery `body`, stored (`intake`).

        Raises:
            Exception: it could not be stored (logged here); Slack must be answered 500,
                so that it sends the event again.
        """
        try:
            return await self.intake(
                event, team_id=body.get("team_id"), enterprise_id=body.get("enterprise_id")
            )
        except Exception:
            logger.exception("could not take a message from Slack; it will come again")
            raise

    async def intake(
        self, event: dict[str, Any], *, team_id: str | None, enterprise_id: str | None = None
    ) -> ThreadMessage | None:
        """A message event, stored by the turn machine if it is for Baton (a person's,
        or a new message of a watched channel)."""
        if not self.turns.accepting:
            return None
        if self.parts.watched is not None:
            watched = await self.parts.watched(event, team_id=team_id)
            if watched is not None:
                return watched
        read = await self.threads.inbound(event, team_id=team_id, enterprise_id=enterprise_id)
        if read is None:
            return None
        message, mentions_others = read
        return await self.turns.intake(message, mentions_others=mentions_others)

    async def handle_app_mention(self, context: AsyncBoltContext) -> None:
        self._dispatch(context)

    async def handle_message(self, context: AsyncBoltContext) -> None:
        self._dispatch(context)

    def _dispatch(self, context: AsyncBoltContext) -> None:
        message = context.get(TAKEN_MESSAGE)
        if message is not None:
            self.dispatch(message)

    def dispatch(self, message: ThreadMessage) -> None:
        """Hand a stored message to the turn machine, in a task of its own."""
        self.turns.spawn(self.turns.dispatch(message), f"message-{message.id}", run=True)

    async def handle_app_home_opened(self, event: dict[str, Any]) -> None:
        if event.get("tab", "home") == "home":
            self.spawn(self.publish_home(event["user"]), "app_home")

    async def publish_home(self, user_id: str, notice: str | None = None) -> None:
        """Show a person their App Home: their tasks, runs that triggers started for them,
        their schedules; `notice` is what their last click there did."""
        running, done = await self.tracker.counts(started_by=user_id)
        tasks = await self.tracker.list(started_by=user_id, limit=HOME_TASKS)
        usage = await self.parts.budgets.today(user_id=user_id, channel_id=None)
        # The viewer's own runs: how everyone rated the answers given to them.
        rated = await self.feedback.counts(started_by=user_id)
        await self.client.views_publish(
            user_id=user_id,
            view=home_view(
                running=running,
                done=done,
                tasks=tasks,
                now=datetime.now(UTC),
                warning=self.parts.sandbox_notice(),
                usage=describe_usage(usage),
                feedback=feedback_line(rated.good, rated.bad),
                servers=self.parts.servers_summary(),
                agents=self.parts.agents_summary(),
                pulls=await self.parts.pulls_line(requester=user_id),
                triggered=triggered_runs_block(
                    await self.turns.triggered_runs(user_id=user_id, limit=TRIGGERED_RUNS),
                    now=datetime.now(UTC),
                    title="Runs triggers started for you",
                ),
                schedules=(
                    await self.parts.schedules.home_blocks(user_id)
                    if self.parts.schedules is not None
                    else ()
                ),
                notice=notice,
            ),
        )

    # -------------------------------------------------------------------- /tasks

    async def handle_tasks_command(
        self, ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        text = (command.get("text") or "").strip()
        schedules = self.parts.schedules
        if schedules is not None and text.lower() == SCHEDULE_WORD:
            self.spawn(schedules.open_form(command, respond), "schedule_command")
            return
        if schedules is not None and text.lower() == SCHEDULES_WORD:
            self.spawn(schedules.show_list(command, respond), "schedules_command")
            return
        self.spawn(
            self.show_tasks(
                channel=command["channel_id"],
                user=command["user_id"],
                task_id=text,
                respond=respond,
                team_id=command.get("team_id"),
                enterprise_id=command.get("enterprise_id"),
                team_domain=command.get("team_domain"),
            ),
            "tasks_command",
        )

    async def show_tasks(
        self,
        *,
        channel: str,
        user: str,
        task_id: str,
        respond: AsyncRespond | None = None,
        team_id: str | None = None,
        enterprise_id: str | None = None,
        team_domain: str | None = None,
    ) -> None:
        try:
            refusal = await self._may_look(
                user=user, channel=channel, team_id=team_id, enterprise_id=enterprise_id
            )
            if refusal is not None:
                # Task logs hold what the agents read: only people who may run them see them.
                await self._ephemeral(channel, user, refusal.text)
                return
            await self._show_tasks(
                channel=channel, user=user, task_id=task_id, team_domain=team_domain
            )
        except SlackApiError as exc:
            # chat.postEphemeral needs the bot in the channel; the command's own
            # response URL works everywhere, so say so through it.
            if respond is None or exc.response.get("error") not in {
                "channel_not_found",
                "not_in_channel",
            }:
                raise
            await respond(
                text="Invite me to this channel (/invite @baton) to list its tasks here.",
                response_type="ephemeral",
            )

    async def _show_tasks(
        self, *, channel: str, user: str, task_id: str, team_domain: str | None = None
    ) -> None:
        now = datetime.now(UTC)
        if task_id:
            detail = await self.tracker.get(task_id)
            if detail is None or detail.task.channel_id != channel:
                await self._ephemeral(
                    channel, user, f"There is no task `{task_id}` in this channel."
                )
                return
            allowed = await self.deciders.may_cancel(user, detail.task.started_by)
            blocks = task_detail_blocks(
                redacted_detail(detail, self.parts.redact), now=now, viewer_may_cancel=allowed
            )
            await self._ephemeral(channel, user, f"Task {task_id}", blocks)
            return
        tasks = await self.tracker.list(channel_id=channel, limit=PANEL_TASKS)
        running, done = await self.tracker.counts(channel_id=channel)
        is_approver = await self.deciders.is_approver(user)
        usage = await self.parts.budgets.today(user_id=user, channel_id=channel)
        decided = await self.approvals.store.recent_decisions(channel, limit=PANEL_DECISIONS)
        decisions = [self.approvals.shown(record) for record in decided]

        def viewer_may_cancel(task: TaskRecord) -> bool:
            return is_approver or user == task.started_by

        blocks = tasks_panel(
            tasks,
            now=now,
            running=running,
            done=done,
            viewer_may_cancel=viewer_may_cancel,
            usage=describe_usage(usage),
            instructions=self.parts.instructions_line(channel),
            pulls=await self.parts.pulls_line(channel_id=channel),
            extra=recent_decisions_blocks(decisions, timeout_s=self.approvals.timeout_s),
            triggered=triggered_runs_block(
                await self.turns.triggered_runs(channel_id=channel, limit=TRIGGERED_RUNS),
                now=now,
                team_domain=team_domain,
            ),
        )
        await self._ephemeral(channel, user, f"⚙ {running} running · {done} done", blocks)

    async def _ephemeral(
        self, channel: str, user: str, text: str, blocks: list[dict[str, Any]] | None = None
    ) -> None:
        await self.client.chat_postEphemeral(channel=channel, user=user, text=text, blocks=blocks)

    # ------------------------------------------------------------------- buttons

    async def handle_cancel_run(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.cancel_run(body), "cancel_run")

    async def cancel_run(self, body: dict[str, Any]) -> None:
        user = body["user"]["id"]
        run_id = body["actions"][0]["value"]
        channel = channel_of(body)
        # The run may live in another replica: the database knows who started it.
        run = await self.turns.run_info(run_id)
        if run is None or not run.going:
            if channel:
                await self._ephemeral(channel, user, "That run has already finished.")
            return
        if channel != run.where.channel_id:
            # A Cancel button only exists in its run's thread: a value carried elsewhere
            # cancels nothing, whoever clicks it.
            if channel:
                await self._ephemeral(channel, user, "There is no such run in this channel.")
            return
        if not await self._may_cancel(body, user, run.user_id):
            await self._ephemeral(
                channel, user, "Only the person who started this run or an approver can cancel it."
            )
            return
        if await self.turns.cancel(run_id, by=user) is Cancelled.OVER:
            await self._ephemeral(channel, user, "That run has already finished.")

    async def handle_retry_run(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.retry_run(body), "retry_run")

    async def retry_run(self, body: dict[str, Any]) -> None:
        """Run again the question of a run a restart interrupted; anyone who may start
        runs in that channel may ask, only in the run's own channel."""
        user = body["user"]["id"]
        run_id = str((body.get("actions") or [{}])[0].get("value") or "")
        channel = channel_of(body)
        run = await self.turns.run_info(run_id) if run_id else None
        if run is None or channel != run.where.channel_id:
            if channel:
                await self._ephemeral(channel, user, "There is no such run in this channel.")
            return
        why_not = await self.turns.retry(
            run_id,
            user_id=user,
            team_id=(body.get("team") or {}).get("id"),
            user_team=(body.get("user") or {}).get("team_id"),
            enterprise_id=(body.get("enterprise") or {}).get("id"),
        )
        if why_not is not None:
            await self._ephemeral(channel, user, why_not)

    async def handle_view_log(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.view_log(body), "view_log")

    async def view_log(self, body: dict[str, Any]) -> None:
        task_id = body["actions"][0]["value"]
        detail = await self.tracker.get(task_id)
        if detail is None or detail.task.channel_id != channel_of(body):
            return  # never show another channel's task
        if await self._may_look_by(body, channel=detail.task.channel_id) is not None:
            return  # only from a forged click: the panel shows no logs to such people
        view = task_log_modal(redacted_detail(detail, self.parts.redact))
        await self.client.views_open(trigger_id=body["trigger_id"], view=view)

    async def handle_log_page(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.log_page(body), "log_page")

    async def log_page(self, body: dict[str, Any]) -> None:
        task_id, _, page = body["actions"][0]["value"].rpartition(":")
        view = body.get("view") or {}
        if view.get("private_metadata") != task_id:
            return
        detail = await self.tracker.get(task_id)
        if detail is None:
            return
        if await self._may_look_by(body, channel=detail.task.channel_id or "") is not None:
            return
        shown = redacted_detail(detail, self.parts.redact)
        await self.client.views_update(
            view_id=view["id"], hash=view.get("hash"), view=task_log_modal(shown, page=int(page))
        )

    async def handle_cancel_task(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.cancel_task(body), "cancel_task")

    async def cancel_task(self, body: dict[str, Any]) -> None:
        detail = await self._task_clicked(body, doing="cancel it")
        if detail is None:
            return
        user, channel, task_id = body["user"]["id"], detail.task.channel_id or "", detail.task.id
        record = await self.tracker.cancel(task_id, by=f"<@{user}>")
        text = f"⊘ Cancelled `{task_id}`." if record else f"`{task_id}` is no longer running."
        try:
            await self._ephemeral(channel, user, text)
        except SlackApiError as exc:
            logger.info("could not confirm the cancel: %s", exc.response.get("error"))

    # ------------------------------------------------------ steering and branches

    async def handle_steer_task(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.open_steer(body), "steer_task")

    async def open_steer(self, body: dict[str, Any]) -> None:
        """Open the Steer modal for a running task of the channel clicked in."""
        detail = await self._task_clicked(body, doing="steer it")
        if detail is None:
            return
        user, channel, task_id = body["user"]["id"], detail.task.channel_id or "", detail.task.id
        if detail.task.state != "running":
            await self._ephemeral(channel, user, f"`{task_id}` is no longer running.")
            return
        await self.client.views_open(
            trigger_id=body["trigger_id"], view=steer_modal(detail.task, channel=channel)
        )

    async def handle_steer_submission(
        self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        text = (steer_text(view) or "").strip()
        if not text:
            await ack(response_action="errors", errors={STEER_INPUT_BLOCK: "Write a message."})
            return
        if len(text) > STEER_TEXT_LIMIT:
            await ack(
                response_action="errors",
                errors={STEER_INPUT_BLOCK: f"At most {STEER_TEXT_LIMIT:,} characters."},
            )
            return
        await ack()
        self.spawn(self.send_steer(body, view, text), "steer_submission")

    async def send_steer(self, body: dict[str, Any], view: dict[str, Any], text: str) -> None:
        """Send a submitted Steer modal's text to its task. Everything the modal carried
        is checked again against the task as stored: a forged submission sends nothing."""
        user = body["user"]["id"]
        parsed = parse_steer_metadata(view.get("private_metadata"))
        if parsed is None:
            logger.info("ignored a steer submission without Baton's metadata")
            return
        task_id, channel = parsed
        detail = await self.tracker.get(task_id)
        if detail is None or detail.task.channel_id != channel:
            logger.info("ignored a steer submission for %s, not a task of %s", task_id, channel)
            return
        if not await self._may_cancel(body, user, detail.task.started_by, channel=channel):
            await self._ephemeral(
                channel, user, "Only the person who started this task or an approver can steer it."
            )
            return
        record = None
        full: SteeringFull | None = None
        if detail.task.state == "running":
            try:
                record = await self.tracker.steer(task_id, text, author=f"<@{user}>")
            except SteeringFull as exc:
                full = exc
        if full is not None:
            reply = f"Not sent: {full}."
        elif record:
            reply = f"✉ Sent to `{task_id}`: it reaches the agent before its next model call."
        else:
            reply = f"`{task_id}` finished meanwhile: the message was not sent."
        try:
            await self._ephemeral(channel, user, reply)
        except SlackApiError as exc:
            logger.info("could not confirm the steering: %s", exc.response.get("error"))

    async def handle_merge_task(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.decide_branch(body, merge=True), "merge_task")

    async def handle_discard_task(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.decide_branch(body, merge=False), "discard_task")

    async def decide_branch(self, body: dict[str, Any], *, merge: bool) -> None:
        """Merge or discard the branch of a task of the channel clicked in."""
        user = body["user"]["id"]
        task_id = str((body.get("actions") or [{}])[0].get("value") or "")
        channel = channel_of(body)
        if not channel:
            return
        detail = await self.tracker.get(task_id) if task_id else None
        if detail is None or detail.task.channel_id != channel:
            # A Merge button only exists in its task's channel: a value carried elsewhere
            # touches no branch, whoever clicks it.
            await self._ephemeral(channel, user, "There is no such task in this channel.")
            return
        if not await self._may_cancel(body, user, detail.task.started_by):
            verb = "merge" if merge else "discard"
            await self._ephemeral(
                channel,
                user,
                f"Only the person who started this task or an approver can {verb} its branch.",
            )
            return
        decide = self.parts.merge_task if merge else self.parts.discard_task
        reply = await decide(task_id, by=f"<@{user}>")
        try:
            await self._ephemeral(channel, user, reply)
        except SlackApiError as exc:
            logger.info("could not report the branch decision: %s", exc.response.get("error"))

    async def _task_clicked(self, body: dict[str, Any], *, doing: str) -> TaskDetail | None:
        """The task of a button clicked in the task's own channel, when the clicker may
        do `doing` to it (its starter or an approver); they are told when they may not.
        A button's value carried to another channel reaches no task, whoever clicks it."""
        user = body["user"]["id"]
        channel = channel_of(body)
        detail = await self.tracker.get(body["actions"][0]["value"])
        if detail is None or channel is None or detail.task.channel_id != channel:
            return None
        if not await self._may_cancel(body, user, detail.task.started_by):
            await self._ephemeral(
                channel, user, f"Only the person who started this task or an approver can {doing}."
            )
            return None
        return detail

    async def _may_look(
        self,
        *,
        user: str,
        channel: str,
        team_id: str | None,
        user_team: str | None = None,
        enterprise_id: str | None = None,
    ) -> Refusal | None:
        """Whether `user` may see a channel's tasks and logs: approvers, and who may run."""
        if await self.deciders.is_approver(user):
            return None
        return await self.parts.access.may_start(
            user_id=user,
            channel_id=channel,
            is_dm=channel.startswith("D"),
            team_id=team_id,
            user_team=user_team,
            enterprise_id=enterprise_id,
        )

    async def _may_look_by(self, body: dict[str, Any], *, channel: str) -> Refusal | None:
        """`_may_look` for the person who clicked in `body`."""
        return await self._may_look(
            user=body["user"]["id"],
            channel=channel,
            team_id=(body.get("team") or {}).get("id"),
            user_team=(body.get("user") or {}).get("team_id"),
            enterprise_id=(body.get("enterprise") or {}).get("id"),
        )

    async def may_act(self, body: dict[str, Any], user: str, started_by: str | None) -> bool:
        """Whether who clicked in `body` may act for work `started_by` someone (Cancel's
        authority: the starter, still allowed to start runs here, or an approver)."""
        return await self._may_cancel(body, user, started_by)

    async def _may_cancel(
        self, body: dict[str, Any], user: str, started_by: str | None, *, channel: str | None = None
    ) -> bool:
        """The starter or an approver; a starter also has to be allowed to start runs now
        (in `channel`, by default the one clicked in)."""
        if user != started_by:
            return await self.deciders.is_approver(user)
        where = channel or channel_of(body) or ""
        return await self._may_look_by(body, channel=where) is None

    # ------------------------------------------------------------------ feedback

    async def handle_feedback(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.record_feedback(body), "feedback")

    async def record_feedback(self, body: dict[str, Any]) -> None:
        """Keep a 👍/👎 click on an answer, for the run of the channel it was clicked in."""
        user = (body.get("user") or {}).get("id")
        actions = body.get("actions") or [{}]
        parsed = parse_feedback(actions[0].get("value"))
        channel = channel_of(body)
        if parsed is None or not isinstance(user, str) or not user or not channel:
            logger.info("ignored a feedback click that is not one of Baton's buttons")
            return
        value, run_id = parsed
        if not await self.feedback.record(run_id, user_id=user, channel_id=channel, value=value):
            # The value names no run of this channel: carried here from elsewhere, or made up.
            logger.info("ignored feedback on run %s, which is not in channel %s", run_id, channel)
            return
        mark = "👍" if value == "good" else "👎"
        try:
            await self._ephemeral(channel, user, f"Thanks — noted {mark}")
        except SlackApiError as exc:
            logger.info("could not thank for the feedback: %s", exc.response.get("error"))

    # ----------------------------------------------------------------- approvals

    async def handle_approve(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.decide(body, approve=True), "approve")

    async def handle_deny(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(self.decide(body, approve=False), "deny")

    async def decide(self, body: dict[str, Any], *, approve: bool) -> None:
        user = body["user"]["id"]
        result = await self.approvals.click(approval_value(body), user=user, approve=approve)
        channel = channel_of(body)
        if result.message and channel:
            await self._ephemeral(channel, user, result.message)

    async def handle_show_arguments(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        self.spawn(
            self.approvals.show_arguments(
                approval_value(body),
                trigger_id=body["trigger_id"],
                view=body.get("view"),
                channel=channel_of(body),
            ),
            "show_arguments",
        )
