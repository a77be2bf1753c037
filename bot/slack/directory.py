"""Who people are, from Slack: the whole directory read ahead, kept fresh by events.

It is the access `Directory` (`bot.access.directory`) and also gives the names runs
show. At start, and again every hour, `users.list` is read page by page in the
background, so a person it holds costs no call: a burst of new people costs no
`users.info` each. `user_change` and `team_join` events change an entry at once (a
deactivation takes effect on the next lookup). Whoever it does not hold (joined since,
or the read has not reached them yet) is asked with `users.info`, kept five minutes,
as before; when Slack cannot say, the answer is None and access is refused.

Replicas: an event reaches one of them. Entries are spread over `BUCKETS` buckets by
a stable hash of the user id; a change that matters to access or names is announced
on its bucket's signal (`bot.store.signals`, PostgreSQL), and every replica forgets
that bucket at its next lookup there, so their next answer comes from Slack. While
this replica cannot hear signals, nothing older than five minutes is trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
import time
import zlib
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.access.directory import Person
from bot.ids import SlackId, UserId
from bot.slack.events import slack_id_or_none
from bot.store.signals import Signals, Subscription

logger = logging.getLogger(__name__)

# What users.info and usergroups.users.list said is kept this long (as before).
DIRECTORY_TTL_S = 300.0
# users.list is Tier 2 (about 20 pages a minute); Slack advises at most 200 a page.
PAGE_SIZE = 200
# Events can be missed (Slack gives up after its retries): the whole directory is read
# again this long after the previous read ended, and what a read or an event said is
# trusted for two such periods, so one failed read does not make it stale at once.
REWARM_EVERY_S = 3600.0
# After a read that could not finish, the next one comes sooner.
RETRY_WARM_S = 300.0
# A page that failed is asked again from the same cursor after these pauses; then the
# read stops (what it read is kept) until RETRY_WARM_S.
PAGE_RETRY_S = (2.0, 10.0, 30.0)
# Slack's users.list errors that asking again will not mend.
FINAL_ERRORS = frozenset(
    {"missing_scope", "not_authed", "invalid_auth", "account_inactive", "token_revoked",
     "invalid_cursor", "not_allowed_token_type"}
)  # fmt: skip
# Bounds against a page or a directory that is not what Slack promises: members read of
# one page (we ask for PAGE_SIZE), pages of one read, people held (those beyond are
# asked with users.info; one holds about half a kilobyte), characters kept of a name.
MAX_PAGE_MEMBERS = 1000
MAX_PAGES = 2000
MAX_PEOPLE = 50_000
MAX_NAME_CHARS = 256
MAX_EMAIL_CHARS = 254
# Buckets of the cross-replica signal: a change makes every replica forget one bucket
# (1/256 of what it holds), not everyone.
BUCKETS = 256
SIGNAL_TOPIC = "directory"


# ----------------------------------------------------------------- Slack's user object


def _text(value: object) -> str | None:
    return value[:MAX_NAME_CHARS] if isinstance(value, str) and value else None


def _email(value: object) -> str | None:
    if isinstance(value, str) and "@" in value and len(value) <= MAX_EMAIL_CHARS:
        return value
    return None


def _flag(value: object) -> object:
    return False if value is None else value


Text = Annotated[str | None, BeforeValidator(_text)]
Email = Annotated[str | None, BeforeValidator(_email)]
Flag = Annotated[bool, BeforeValidator(_flag)]


class SlackProfile(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    team: SlackId | None = None
    display_name: Text = None
    real_name: Text = None
    # Only shared with the users:read.email scope (named here as Slack names it, so the
    # manifest check sees the field read).
    email: Email = Field(default=None, validation_alias="email")


class SlackEnterpriseUser(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    enterprise_id: SlackId | None = None


class SlackUser(BaseModel):
    """A user object of users.list, users.info, user_change and team_join, as far as
    Baton reads it. Names are cut; a field of the wrong type makes the whole object
    unreadable (it is then not trusted for anything)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: UserId
    team_id: SlackId | None = None
    name: Text = None
    real_name: Text = None
    deleted: Flag = False
    is_restricted: Flag = False
    is_ultra_restricted: Flag = False
    profile: Annotated[SlackProfile, BeforeValidator(lambda v: {} if v is None else v)] = (
        SlackProfile()
    )
    enterprise_user: SlackEnterpriseUser | None = None

    @property
    def home_team(self) -> str | None:
        return self.team_id or self.profile.team


def parse_user(raw: object, *, source: str) -> SlackUser | None:
    """`raw` as a SlackUser; None (logged, naming only the fields) if it does not fit."""
    try:
        return SlackUser.model_validate(raw)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in error["loc"]) or "-" for error in exc.errors()})
        logger.warning("ignored a user object from %s that does not fit: %s", source, fields)
        return None


def _interned(value: str | None) -> str | None:
    # Every person of a workspace names the same team: one string, not thousands.
    return sys.intern(value) if value is not None else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Known:
    """What the directory holds of one person, and since and until when."""

    person: Person
    name: str
    email: str | None
    as_of: float  # monotonic: when Slack was asked, or its event came
    until: float  # monotonic: trusted until then

    @classmethod
    def of(cls, user: SlackUser, *, as_of: float, ttl: float) -> Known:
        profile = user.profile
        enterprise = user.enterprise_user.enterprise_id if user.enterprise_user else None
        return cls(
            person=Person(
                id=user.id,
                team_id=_interned(user.home_team),
                enterprise_id=_interned(enterprise),
                guest=user.is_restricted or user.is_ultra_restricted,
                deactivated=user.deleted,
            ),
            name=profile.display_name or profile.real_name or user.real_name or user.name
            or user.id,
            email=profile.email,
            as_of=as_of,
            until=as_of + ttl,
        )  # fmt: skip

    def says_the_same(self, other: Known) -> bool:
        return (self.person, self.name, self.email) == (other.person, other.name, other.email)


@dataclass(slots=True)
class _Bucket:
    people: dict[str, Known] = field(default_factory=dict)
    # When a signal last made this bucket forget: an answer Slack gave to a question
    # asked before then may predate the change, and is not kept.
    cleared_at: float = -math.inf


def bucket_of(user_id: str) -> int:
    """The same bucket for a user on every replica (`hash` differs per process)."""
    return zlib.crc32(user_id.encode()) % BUCKETS


def signal_topic(bucket: int) -> str:
    return f"{SIGNAL_TOPIC}-{bucket:02x}"


# ----------------------------------------------------------------- the directory


class SlackDirectory:
    """People, their names and group members, from Slack.

    Args:
        client: The Web API client (its calls are paced by the rate budget).
        ttl: How long a users.info or usergroups.users.list answer is kept.
        signals: Cross-replica signals; on PostgreSQL, changes reach other replicas.
        rewarm_every_s: Pause between two reads of the whole directory.
        warm_ttl: How long what a read or an event said is trusted (by default two
            read periods).
        page_retry_s: Pauses before a failed users.list page is asked again.
        retry_warm_s: Pause after a read that could not finish.

    Nothing happens in the background until `start`; failures are not cached.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        ttl: float = DIRECTORY_TTL_S,
        signals: Signals | None = None,
        rewarm_every_s: float = REWARM_EVERY_S,
        warm_ttl: float | None = None,
        page_retry_s: Sequence[float] = PAGE_RETRY_S,
        retry_warm_s: float = RETRY_WARM_S,
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.rewarm_every_s = rewarm_every_s
        self.warm_ttl = 2 * rewarm_every_s if warm_ttl is None else warm_ttl
        self.page_retry_s = tuple(page_retry_s)
        self.retry_warm_s = retry_warm_s
        self.team_id: str | None = None
        # Set once a read of the whole directory has finished.
        self.warmed = asyncio.Event()
        # Only PostgreSQL has other replicas to tell.
        self._signals = signals if signals is not None and signals.postgres else None
        self._stale: list[Subscription] = []
        self._buckets = [_Bucket() for _ in range(BUCKETS)]
        self._held = 0
        self._full_noted = False
        self._groups: dict[str, tuple[float, frozenset[str]]] = {}
        self._warming = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------- the Directory

    async def person(self, user_id: str) -> Person | None:
        known = await self._lookup(user_id)
        return known.person if known else None

    async def name_of(self, user_id: str) -> str:
        """The name people know someone by; their id when Slack cannot say."""
        known = await self._lookup(user_id)
        return known.name if known else user_id

    async def email_of(self, user_id: str) -> str | None:
        """Their email, when Slack shares it (the app needs `users:read.email`)."""
        known = await self._lookup(user_id)
        return known.email if known else None

    async def group_members(self, group_id: str) -> frozenset[str] | None:
        cached = self._groups.get(group_id)
        if cached and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            response = await self.client.usergroups_users_list(usergroup=group_id)
        except SlackApiError as exc:
            logger.warning(
                "usergroups.users.list %s failed: %s", group_id, exc.response.get("error")
            )
            return None
        members = frozenset(response.get("users") or ())
        self._groups[group_id] = (time.monotonic(), members)
        return members

    def holds(self, user_id: str) -> bool:
        """Whether a lookup of `user_id` would be answered without asking Slack (signals
        that came for its bucket are only taken by a lookup)."""
        known = self._buckets[bucket_of(user_id)].people.get(user_id)
        return known is not None and self._trusted(known, time.monotonic())

    # ------------------------------------------------------------- lifecycle

    def start(self, *, team_id: str | None) -> None:
        """Read the directory now in the background, and again every `rewarm_every_s`.

        `team_id` is the workspace Baton is installed in: only its events are taken.
        Without it nothing is read ahead and every event is ignored (users.info only).
        """
        if self._tasks or self.team_id is not None:
            return  # started already
        self.team_id = team_id
        if team_id is None:
            logger.warning("the workspace is unknown: people are looked up one by one")
            return
        if self._signals is not None and not self._stale:
            self._stale = [self._signals.subscribe(signal_topic(b)) for b in range(BUCKETS)]
        self._spawn(self._keep_warm(), "directory-warm")

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for subscription in self._stale:
            subscription.close()
        self._stale = []

    # ------------------------------------------------------------- reading ahead

    async def warm(self) -> bool:
        """Read every page of users.list; True when the last page was read.

        A page that fails is asked again (`page_retry_s`); when it still fails, what the
        pages before it said is kept and the rest is looked up one by one.
        """
        async with self._warming:
            cursor = ""
            seen: set[str] = set()
            for _ in range(MAX_PAGES):
                asked_at = time.monotonic()
                response = await self._page(cursor)
                if response is None:
                    return False
                self._take_page(response.get("members"), asked_at)
                metadata = response.get("response_metadata")
                cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else None
                if not cursor:
                    break
                if not isinstance(cursor, str) or cursor in seen:
                    logger.warning("users.list gave a cursor it gave before; reading stops")
                    return False
                seen.add(cursor)
            else:
                logger.warning("users.list has more than %d pages; reading stops", MAX_PAGES)
                return False
        self._prune()
        self.warmed.set()
        logger.info("directory read: %d people", self._held)
        return True

    async def _keep_warm(self) -> None:
        while True:
            try:
                done = await self.warm()
            except Exception:
                logger.exception("reading the directory failed")
                done = False
            await asyncio.sleep(self.rewarm_every_s if done else self.retry_warm_s)

    async def _page(self, cursor: str) -> dict[str, Any] | None:
        """One users.list page, asked again after each pause; None when it cannot be had."""
        for pause in (*self.page_retry_s, None):
            try:
                response = await self.client.users_list(limit=PAGE_SIZE, cursor=cursor or None)
                return dict(response.data) if isinstance(response.data, dict) else None
            except SlackApiError as exc:
                error = str(exc.response.get("error"))
                logger.warning("users.list failed: %s", error)
                if error in FINAL_ERRORS:
                    return None
            except Exception as exc:  # a connection lost, a timeout: asked again
                logger.warning("users.list failed: %s", type(exc).__name__)
            if pause is None:
                return None
            await asyncio.sleep(pause)
        return None

    def _take_page(self, members: object, asked_at: float) -> None:
        if not isinstance(members, list):
            logger.warning("users.list gave a page without members")
            return
        if len(members) > MAX_PAGE_MEMBERS:
            logger.warning(
                "users.list gave %d members on one page; the first %d are read",
                len(members),
                MAX_PAGE_MEMBERS,
            )
            members = members[:MAX_PAGE_MEMBERS]
        for raw in members:
            user = parse_user(raw, source="users.list")
            if user is not None:
                self._keep(Known.of(user, as_of=asked_at, ttl=self.warm_ttl))

    # ------------------------------------------------------------- events

    async def handle_user_event(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        """`user_change` or `team_join`: the person's whole user object, taken at once.

        Only events of Baton's own workspace are taken, and only for people of it: a
        person of another organisation is forgotten here (users.info speaks for them).
        A user_change that changes what access or names read is announced to the other
        replicas (a status or an avatar is not).
        """
        kind = str(event.get("type"))
        team = slack_id_or_none(body.get("team_id"))
        if self.team_id is None:
            logger.warning("ignored a %s event: Baton's workspace is not known", kind)
            return
        if team != self.team_id:
            logger.warning("ignored a %s event of another workspace (%s)", kind, team)
            return
        user = parse_user(event.get("user"), source=kind)
        if user is None:
            return
        if user.home_team != self.team_id:
            logger.info("%s of %s, who is from another team: looked up again", kind, user.id)
            self._forget(user.id)
            return
        known = Known.of(user, as_of=time.monotonic(), ttl=self.warm_ttl)
        held = self._buckets[bucket_of(user.id)].people.get(user.id)
        self._keep(known, changed=True)
        # A new person is held by no other replica, or as users.info told it since.
        changed = held is None or not held.says_the_same(known)
        if kind == "user_change" and changed and self._signals is not None:
            self._spawn(self._announce(user.id), "directory-signal")

    async def _announce(self, user_id: str) -> None:
        if self._signals is not None:
            # Every replica forgets the bucket, this one too (its own wake): its next
            # lookup there asks Slack, whose answer is no older than this event.
            await self._signals.notify(signal_topic(bucket_of(user_id)), user_id)

    # ------------------------------------------------------------- the entries

    async def _lookup(self, user_id: str) -> Known | None:
        index = bucket_of(user_id)
        await self._take_signal(index)
        known = self._buckets[index].people.get(user_id)
        if known is not None and self._trusted(known, time.monotonic()):
            return known
        return await self._ask(user_id)

    async def _ask(self, user_id: str) -> Known | None:
        asked_at = time.monotonic()
        try:
            response = await self.client.users_info(user=user_id)
        except SlackApiError as exc:
            logger.warning("users.info %s failed: %s", user_id, exc.response.get("error"))
            return None
        raw = response.get("user")
        if isinstance(raw, dict):
            raw = {"id": user_id, **raw}
        user = parse_user(raw, source="users.info")
        if user is None or user.id != user_id:
            return None
        known = Known.of(user, as_of=asked_at, ttl=self.ttl)
        self._keep(known)
        return known

    def _trusted(self, known: Known, now: float) -> bool:
        if now >= known.until:
            return False
        # Deaf to the other replicas: what they learnt may be missing here, so only
        # what is as fresh as a users.info answer counts.
        deaf = self._signals is not None and not self._signals.listening
        return not deaf or now - known.as_of < self.ttl

    async def _take_signal(self, index: int) -> None:
        if self._stale and await self._stale[index].wait(0):
            bucket = self._buckets[index]
            self._held -= len(bucket.people)
            bucket.people.clear()
            bucket.cleared_at = time.monotonic()

    def _keep(self, known: Known, *, changed: bool = False) -> None:
        """Hold `known`, unless what is held is newer or a change came since Slack was
        asked (`changed`: it is the change itself, from an event)."""
        bucket = self._buckets[bucket_of(known.person.id)]
        if not changed and known.as_of < bucket.cleared_at:
            return
        held = bucket.people.get(known.person.id)
        if held is not None and held.as_of > known.as_of:
            return
        if held is None:
            if self._held >= MAX_PEOPLE:
                if not self._full_noted:
                    logger.warning("the directory holds %d people: others are asked", MAX_PEOPLE)
                    self._full_noted = True
                return
            self._held += 1
        bucket.people[known.person.id] = known

    def _forget(self, user_id: str) -> None:
        if self._buckets[bucket_of(user_id)].people.pop(user_id, None) is not None:
            self._held -= 1

    def _prune(self) -> None:
        now = time.monotonic()
        for bucket in self._buckets:
            gone = [user_id for user_id, known in bucket.people.items() if now >= known.until]
            for user_id in gone:
                del bucket.people[user_id]
            self._held -= len(gone)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        with contextlib.suppress(asyncio.CancelledError):
            if (error := task.exception()) is not None:
                logger.error("%s failed", task.get_name(), exc_info=error)
