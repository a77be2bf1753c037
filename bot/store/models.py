"""The database tables. Only `bot/store` sees these; the rest of Baton gets plain values."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, DateTime, Text, UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


def storable(text: str | None) -> str | None:
    """`text` as every database Baton runs on can hold it: PostgreSQL's text refuses the
    NUL character, which a person's message, a command's output (`find -print0`, a
    binary file) or a model's answer may carry; it becomes U+FFFD, as undecodable bytes
    do. Without this, the turn holding it failed on PostgreSQL and worked on SQLite."""
    if text is None or "\x00" not in text:
        return text
    return text.replace("\x00", "\ufffd")


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything Baton writes is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _timestamp(**kwargs: Any) -> Any:
    return Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), **kwargs))


class SessionRow(SQLModel, table=True):
    """One conversation: a Slack thread (team, channel, thread ts) or a terminal chat."""

    __tablename__ = "sessions"

    id: int | None = Field(default=None, primary_key=True)
    key: str = Field(unique=True, index=True, max_length=255)
    kind: str = Field(max_length=16)
    team_id: str | None = Field(default=None, max_length=32)
    channel_id: str | None = Field(default=None, max_length=32, index=True)
    thread_ts: str | None = Field(default=None, max_length=32)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    created_at: datetime = _timestamp(nullable=False)
    updated_at: datetime = _timestamp(nullable=False)


class MessageRow(SQLModel, table=True):
    """One message of a session, in order; tool calls and results kept whole."""

    __tablename__ = "messages"
    __table_args__ = (UniqueConstraint("session_id", "seq"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    seq: int
    role: str = Field(max_length=16)
    content: str | None = Field(default=None, sa_column=Column(Text))
    tool_calls: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(JSON))
    tool_call_id: str | None = Field(default=None, max_length=128)
    name: str | None = Field(default=None, max_length=128)
    created_at: datetime = _timestamp(nullable=False)


class CompactionRow(SQLModel, table=True):
    """A summary that stands for a session's messages up to `through_seq` (folded history).

    The newest row of a session wins: its summary covers the earlier ones.
    """

    __tablename__ = "compactions"

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    # The seq of the last message the summary replaces.
    through_seq: int
    summary: str = Field(sa_column=Column(Text, nullable=False))
    # How many messages the summary replaces in all.
    folded: int = 0
    created_at: datetime = _timestamp(nullable=False)


class TaskRow(SQLModel, table=True):
    """A sub-agent run (foreground or background) and its outcome."""

    __tablename__ = "tasks"

    id: str = Field(primary_key=True, max_length=128)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    channel_id: str | None = Field(default=None, max_length=32, index=True)
    agent: str = Field(max_length=64)
    description: str = Field(default="", max_length=255)
    prompt: str = Field(sa_column=Column(Text, nullable=False))
    background: bool = False
    state: str = Field(default="running", max_length=16, index=True)
    started_by: str | None = Field(default=None, max_length=32)
    owner: str | None = Field(default=None, max_length=64, index=True)
    result: str | None = Field(default=None, sa_column=Column(Text))
    error: str | None = Field(default=None, sa_column=Column(Text))
    prompt_tokens: int = 0
    completion_tokens: int = 0
    delivered: bool = False
    created_at: datetime = _timestamp(nullable=False)
    finished_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    # The task that started this one (None: the main agent did), and how deep it is:
    # the main agent is depth 0, its children 1, theirs 2.
    parent_id: str | None = Field(default=None, max_length=128, index=True)
    depth: int = 1
    # Tasks started with the same group come back together (fan-in).
    group_name: str | None = Field(default=None, max_length=64)
    # An isolated child's branch, what it changed, and what became of the branch:
    # pending (waiting for Merge or Discard), merged, discarded.
    branch: str | None = Field(default=None, max_length=160)
    # The commit the task's work was recorded as: Merge merges exactly that commit.
    branch_commit: str | None = Field(default=None, max_length=64)
    change: str | None = Field(default=None, sa_column=Column(Text))
    merge_state: str | None = Field(default=None, max_length=16)
    # The child's validated handoff (submit_result), as JSON.
    handoff: str | None = Field(default=None, sa_column=Column(Text))


class TaskMessageRow(SQLModel, table=True):
    """A message for a running task (steering), waiting for the process that runs it."""

    __tablename__ = "task_messages"

    id: int | None = Field(default=None, primary_key=True)
    task_id: str = Field(max_length=128, index=True)
    author: str = Field(max_length=64)
    text: str = Field(sa_column=Column(Text, nullable=False))
    taken: bool = Field(default=False, index=True)
    created_at: datetime = _timestamp(nullable=False)


class TaskSequenceRow(SQLModel, table=True):
    """The last number handed out per agent, so task ids stay unique across restarts."""

    __tablename__ = "task_sequences"

    agent: str = Field(primary_key=True, max_length=64)
    last: int = 0


class TaskLogRow(SQLModel, table=True):
    """One line of a task's progress log."""

    __tablename__ = "task_log"

    id: int | None = Field(default=None, primary_key=True)
    task_id: str = Field(foreign_key="tasks.id", index=True, max_length=128)
    line: str = Field(sa_column=Column(Text, nullable=False))
    created_at: datetime = _timestamp(nullable=False)


class ApprovalRow(SQLModel, table=True):
    """A request for a person's decision: pending → approved / denied / expired / cancelled."""

    __tablename__ = "approvals"

    id: str = Field(primary_key=True, max_length=64)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    task_id: str | None = Field(default=None, max_length=128)
    agent: str = Field(default="main", max_length=64)
    tool: str = Field(max_length=64)
    arguments: str = Field(sa_column=Column(Text, nullable=False))
    reason: str = Field(sa_column=Column(Text, nullable=False))
    state: str = Field(default="pending", max_length=16, index=True)
    requested_by: str | None = Field(default=None, max_length=32)
    owner: str | None = Field(default=None, max_length=64, index=True)
    decided_by: str | None = Field(default=None, max_length=32)
    decided_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    channel_id: str | None = Field(default=None, max_length=32)
    message_ts: str | None = Field(default=None, max_length=32)
    created_at: datetime = _timestamp(nullable=False)


class RunRow(SQLModel, table=True):
    """A run in a Slack thread: who owns it, its progress message, a cancel request."""

    __tablename__ = "runs"

    id: str = Field(primary_key=True, max_length=64)
    owner: str = Field(max_length=64, index=True)
    session_id: int = Field(foreign_key="sessions.id", index=True)
    channel_id: str = Field(max_length=32)
    thread_ts: str = Field(max_length=32)
    user_id: str = Field(max_length=32)
    progress_ts: str | None = Field(default=None, max_length=32)
    state: str = Field(default="running", max_length=16, index=True)
    cancel_requested_by: str | None = Field(default=None, max_length=32)
    # What started it when no person did: `schedule:<name>`, `webhook:<name>`,
    # `watch:<channel>`.
    trigger: str | None = Field(default=None, max_length=96, index=True)
    created_at: datetime = _timestamp(nullable=False)


class InstanceRow(SQLModel, table=True):
    """A running Baton process; its heartbeat says it still owns its tasks and approvals."""

    __tablename__ = "instances"

    id: str = Field(primary_key=True, max_length=64)
    host: str = Field(max_length=255)
    pid: int
    started_at: datetime = _timestamp(nullable=False)
    heartbeat_at: datetime = _timestamp(nullable=False)


class ProcessedEventRow(SQLModel, table=True):
    """A Slack event (or message) already taken, so a retry or duplicate starts nothing."""

    __tablename__ = "processed_events"

    key: str = Field(primary_key=True, max_length=255)
    created_at: datetime = _timestamp(nullable=False)


class UsageRow(SQLModel, table=True):
    """Tokens one LLM call spent: whose run, which channel, which UTC day, which model."""

    __tablename__ = "usage"

    id: int | None = Field(default=None, primary_key=True)
    day: str = Field(max_length=10, index=True)  # YYYY-MM-DD, UTC
    user_id: str | None = Field(default=None, max_length=32, index=True)
    channel_id: str | None = Field(default=None, max_length=32, index=True)
    run_id: str | None = Field(default=None, max_length=64, index=True)
    task_id: str | None = Field(default=None, max_length=128)
    model: str = Field(max_length=255)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    created_at: datetime = _timestamp(nullable=False)


class ApprovalDecidersRow(SQLModel, table=True):
    """Who may decide one approval request, fixed when it is made (any replica reads it)."""

    __tablename__ = "approval_deciders"

    approval_id: str = Field(primary_key=True, foreign_key="approvals.id", max_length=64)
    # Sets of user and group ids; a decider must be in every set. Empty: the usual deciders.
    approver_sets: list[list[str]] = Field(default_factory=list, sa_column=Column(JSON))
    self_approval: bool = True


class FeedbackRow(SQLModel, table=True):
    """One person's 👍 or 👎 on a run's answer; a later click replaces the earlier one."""

    __tablename__ = "feedback"

    run_id: str = Field(primary_key=True, foreign_key="runs.id", max_length=64)
    user_id: str = Field(primary_key=True, max_length=32)
    channel_id: str = Field(max_length=32, index=True)
    value: str = Field(max_length=8)  # "good" or "bad"
    created_at: datetime = _timestamp(nullable=False)


class SlackRateRow(SQLModel, table=True):
    """One Slack rate limit shared by every replica: a method's, or a channel's messages.

    `tat` is the limit's theoretical arrival time (GCRA): seconds since the epoch on
    the database's clock, so replicas whose clocks disagree still share one budget.
    """

    __tablename__ = "slack_rate"

    key: str = Field(primary_key=True, max_length=128)
    tat: float = 0.0


class ThreadMessageRow(SQLModel, table=True):
    """A person's message for a thread's turns, stored when it is taken from Slack.

    Taking it (inserting the row: channel and ts are unique) is what makes a retried
    or duplicate delivery start nothing. Its `state` then follows it: ``new`` until
    its receiver has checked who sent it, ``pending`` while it waits for the thread's
    turn, ``taken`` once a run has it (as its question or as steering), then ``done``,
    ``dropped`` (talk nobody acted on), ``refused``, or ``interrupted`` (its run's
    process stopped: it can be retried). `holder` is the process answerable for it
    while it is ``new`` or ``taken``.
    """

    __tablename__ = "thread_messages"
    __table_args__ = (UniqueConstraint("channel_id", "ts"),)

    id: int | None = Field(default=None, primary_key=True)
    session_key: str = Field(max_length=255, index=True)
    channel_id: str = Field(max_length=32)
    thread_ts: str = Field(max_length=32)  # where answers go
    ts: str = Field(max_length=64)  # Slack's; within a thread, the order of the messages
    user_id: str = Field(max_length=32)  # whose turn it is: who may spend, who approves
    # Who wrote the text (a Retry runs another's question; `gh:<login>` for the forge's).
    author_id: str = Field(max_length=64)
    team_id: str | None = Field(default=None, max_length=32)
    user_team: str | None = Field(default=None, max_length=32)
    enterprise_id: str | None = Field(default=None, max_length=32)
    text: str = Field(default="", sa_column=Column(Text, nullable=False))
    files: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON))
    is_dm: bool = False
    addressed: bool = True  # it asked Baton (a mention, a DM); else talk that may steer a run
    state: str = Field(default="new", max_length=16, index=True)
    holder: str | None = Field(default=None, max_length=64, index=True)
    run_id: str | None = Field(default=None, max_length=64, index=True)
    # The trigger that wrote it (`schedule:<name>`, …); None for a person's message.
    trigger: str | None = Field(default=None, max_length=96)
    created_at: datetime = _timestamp(nullable=False)


class ThreadLeaseRow(SQLModel, table=True):
    """Which process runs a thread's turn now: at most one, across every replica."""

    __tablename__ = "thread_leases"

    session_key: str = Field(primary_key=True, max_length=255)
    owner: str = Field(max_length=64, index=True)
    run_id: str = Field(max_length=64)
    direct: bool = False  # an `@agent` run: it reads no steering
    created_at: datetime = _timestamp(nullable=False)


class ThreadBranchRow(SQLModel, table=True):
    """A thread's branch on a workspace with a git remote, its worktree and its PR.

    One per thread (`session_key`); the branch is unique in its repository. `head` is
    the last commit Baton made on it, `pushed` the last it pushed (the lease of the
    next push), `checks_sha`/`checks_told` the head whose failing checks were told and
    which. `state`: ``active``, ``discarded``, ``merged`` or ``closed``.
    """

    __tablename__ = "thread_branches"
    # Ids are never reused (SQLite would reuse the highest after a delete): an old
    # message's buttons must never reach a thread's next branch.
    __table_args__ = (UniqueConstraint("repo", "branch"), {"sqlite_autoincrement": True})

    id: int | None = Field(default=None, primary_key=True)
    session_key: str = Field(max_length=255, unique=True, index=True)
    channel_id: str = Field(max_length=32)
    thread_ts: str = Field(max_length=32)
    repo: str = Field(max_length=255, index=True)  # owner/name on the forge
    branch: str = Field(max_length=160)
    base: str = Field(max_length=200)
    worktree: str = Field(sa_column=Column(Text, nullable=False))
    requester: str | None = Field(default=None, max_length=32)
    head: str | None = Field(default=None, max_length=64)
    pushed: str | None = Field(default=None, max_length=64)
    pr_number: int | None = None
    pr_url: str | None = Field(default=None, sa_column=Column(Text))
    checks_sha: str | None = Field(default=None, max_length=64)
    checks_told: list[str] = Field(default_factory=list, sa_column=Column(JSON))
    state: str = Field(default="active", max_length=16, index=True)
    created_at: datetime = _timestamp(nullable=False)
    updated_at: datetime = _timestamp(nullable=False)


class ScheduleRow(SQLModel, table=True):
    """A schedule made from Slack (`/tasks schedule`); baton.yaml's live in the file."""

    __tablename__ = "schedules"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=63, unique=True)
    cron: str = Field(max_length=120)
    timezone: str = Field(max_length=64)
    channel_id: str = Field(max_length=32, index=True)
    prompt: str = Field(sa_column=Column(Text, nullable=False))
    agent: str = Field(default="", max_length=64)
    owner: str = Field(max_length=32)
    created_by: str = Field(max_length=32)
    created_at: datetime = _timestamp(nullable=False)


class ScheduleStateRow(SQLModel, table=True):
    """Where a schedule (of baton.yaml or Slack, by name) stands, shared by every replica.

    `spec` is the cron expression and time zone its fire times were counted with (a
    changed one starts counting afresh from `since`); `last_fire_at` the latest fire
    time claimed; `failures` its failed runs in a row. `paused_by` is who paused it, or
    ``failures`` when three failed runs in a row did.
    """

    __tablename__ = "schedule_states"

    name: str = Field(primary_key=True, max_length=63)
    spec: str = Field(max_length=200)
    since: datetime = _timestamp(nullable=False)
    last_fire_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    paused: bool = False
    paused_by: str | None = Field(default=None, max_length=32)
    paused_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    failures: int = 0
    updated_at: datetime = _timestamp(nullable=False)


class ScheduleFireRow(SQLModel, table=True):
    """One fire time of a schedule, claimed by the replica that runs it (the row is the
    claim: a schedule and fire time are unique). `missed` counts the fire times it
    stands for beyond its own (downtime); `outcome` is how its run ended."""

    __tablename__ = "schedule_fires"
    __table_args__ = (UniqueConstraint("name", "fire_at"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=63, index=True)
    fire_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    missed: int = 0
    claimed_by: str = Field(max_length=64)
    run_id: str | None = Field(default=None, max_length=64)
    message_ts: str | None = Field(default=None, max_length=64)
    outcome: str | None = Field(default=None, max_length=16)
    created_at: datetime = _timestamp(nullable=False)


class TriggerWindowRow(SQLModel, table=True):
    """Runs a trigger started in one window of time (a watched channel's hour), counted
    across replicas; `noted`: the note that the cap was reached was posted."""

    __tablename__ = "trigger_windows"

    key: str = Field(primary_key=True, max_length=160)
    count: int = 0
    noted: bool = False
    created_at: datetime = _timestamp(nullable=False)
