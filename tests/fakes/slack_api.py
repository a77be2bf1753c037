"""A fake Slack Web API HTTP server for tests.

The fake speaks enough of the Slack Web API wire protocol that the real
``slack_sdk.web.async_client.AsyncWebClient`` can talk to it
(``AsyncWebClient(token="xoxb-test", base_url=fake.url)``). It keeps an in-memory
workspace (messages, threads, users, user groups, views, files, reactions), enforces the
Slack limits that commonly bite bots (text / block sizes, block counts), records every call,
and can inject failures (``fail_next``), latency (``set_latency``) and rate limiting
(``rate_limit``).

Example:
    async with FakeSlackAPI() as fake:
        fake.add_user("U1", "alice", real_name="Alice Liddell")
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
        await client.chat_postMessage(channel="C1", text="hi")
        assert fake.calls_to("chat.postMessage")[0].params["text"] == "hi"

A pytest fixture:
    @pytest.fixture
    async def slack() -> AsyncIterator[FakeSlackAPI]:
        async with FakeSlackAPI() as fake:
            yield fake

Both GET and POST are served on ``/api/{method}``; parameters are merged from the query
string and the body (``application/x-www-form-urlencoded``, ``multipart/form-data`` or
``application/json``). JSON-valued fields (``blocks``, ``attachments``, ``view``,
``files``, ...) sent as JSON-encoded strings in form bodies are decoded.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import inspect
import itertools
import json
import math
import mimetypes
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn

from aiohttp import web

from tests.fakes.serving import FakeServer, listen_on_loopback
from tests.fakes.slack_limits import SLACK_TIERS, SlackLimits

__all__ = [
    "MAX_HEADER_TEXT_CHARS",
    "MAX_MARKDOWN_TEXT_CHARS",
    "MAX_MESSAGE_BLOCKS",
    "MAX_MESSAGE_TEXT_CHARS",
    "MAX_SECTION_TEXT_CHARS",
    "MAX_STREAM_MARKDOWN_CHARS",
    "MAX_VIEW_BLOCKS",
    "SLACK_TIERS",
    "AssistantStatus",
    "FakeSlackAPI",
    "FileDownload",
    "MethodHandler",
    "RecordedCall",
    "UploadedFile",
]

MAX_MESSAGE_TEXT_CHARS = 40_000
MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
MAX_SECTION_TEXT_CHARS = 3_000
MAX_SECTION_FIELD_CHARS = 2_000
MAX_SECTION_FIELDS = 10
MAX_MARKDOWN_TEXT_CHARS = 12_000
MAX_HEADER_TEXT_CHARS = 150
MAX_BLOCK_ID_CHARS = 255
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTIONS_ELEMENTS = 25
MAX_VIEW_TITLE_CHARS = 24
MAX_PRIVATE_METADATA_CHARS = 3_000
MAX_CALLBACK_ID_CHARS = 255
MAX_CONTEXT_ACTIONS_ELEMENTS = 5
MAX_FEEDBACK_BUTTON_TEXT_CHARS = 75
MAX_BUTTON_VALUE_CHARS = 2_000
MAX_STREAM_MARKDOWN_CHARS = 12_000
DEFAULT_STREAM_TTL_S = 300.0
TASK_STATUSES = ("pending", "in_progress", "complete", "error")
TASK_DISPLAY_MODES = ("timeline", "plan")
STREAM_STATES = ("streaming", "stopped", "expired")

MethodHandler = Callable[[dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]]
"""A custom method implementation: takes the decoded params, returns the response body."""

_VALID_TOKEN_PREFIXES = ("xoxb-", "xoxp-", "xapp-")
_JSON_FIELDS = frozenset(
    {
        "attachments",
        "blocks",
        "files",
        "metadata",
        "outputs",
        "prompts",
        "unfurls",
        "user_auth_blocks",
        "view",
    }
)
_NO_AUTH_METHODS = frozenset({"api.test"})
_FIRST_TS_MICROS = 1_700_000_000_000_100
_TS_STEP_MICROS = 100
_TRUE_VALUES = (True, 1, "1", "true", "True")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RecordedCall:
    """One Web API call received by the fake.

    Attributes:
        method: API method name, e.g. ``"chat.postMessage"``.
        params: Decoded parameters (query string and body merged, JSON fields decoded,
            ``token`` removed).
        token: Token from the ``Authorization: Bearer`` header or the ``token`` field.
        failed: True when the call was answered by ``fail_next``, ``rate_limit`` or the
            enforced Slack limits (the fake did not process it).
        error: The Slack ``error`` string returned, or ``None`` when ``ok`` was true.
        status: HTTP status code returned.
        http_method: ``"GET"`` or ``"POST"``.
        rate_limited: True when the call was refused (HTTP 429 ``ratelimited``) by
            ``rate_limit`` or by ``enforce_slack_limits``; it did not take effect.
    """

    method: str
    params: dict[str, Any]
    token: str | None
    failed: bool = False
    error: str | None = None
    status: int = 200
    http_method: str = "POST"
    rate_limited: bool = False

    @property
    def ok(self) -> bool:
        """Whether the call was answered with ``ok: true``."""
        return not self.failed and self.error is None


@dataclass(frozen=True)
class UploadedFile:
    """A file completed through ``files.completeUploadExternal``.

    Attributes:
        id: Slack file id (``"F..."``).
        filename: File name given to ``files.getUploadURLExternal``.
        title: Title given to ``files.completeUploadExternal`` (may be ``None``).
        content: Uploaded bytes.
        channel: Channel the file was shared to, if any.
        thread_ts: Thread the file was shared to, if any.
        initial_comment: Message text posted with the file, if any.
    """

    id: str
    filename: str
    title: str | None
    content: bytes
    channel: str | None
    thread_ts: str | None
    initial_comment: str | None = None

    @property
    def text(self) -> str:
        """The content decoded as UTF-8 (undecodable bytes replaced)."""
        return self.content.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class FileDownload:
    """One request for a file's content (``url_private`` / ``url_private_download``).

    Attributes:
        file_id: The file asked for (``None`` when the path names no known file).
        token: Token from the ``Authorization: Bearer`` header, if any.
        status: HTTP status answered (200, 403 without a valid token, 404 unknown file).
    """

    file_id: str | None
    token: str | None
    status: int


@dataclass(frozen=True)
class AssistantStatus:
    """One ``assistant.threads.setStatus`` call.

    Attributes:
        channel_id: Channel of the assistant thread.
        thread_ts: Thread timestamp.
        status: Status text (an empty string clears the status).
    """

    channel_id: str
    thread_ts: str
    status: str


@dataclass
class _Failure:
    status: int
    retry_after: int | None
    error: str | None
    remaining: int


@dataclass
class _RateLimit:
    window: float
    capacity: int
    per_channel: bool
    history: dict[str, deque[float]] = field(default_factory=dict)


@dataclass
class _Stream:
    """A message created by ``chat.startStream`` and what was streamed into it."""

    started_at: float
    state: str = "streaming"  # "streaming" | "stopped" | "expired" (once observed)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    plan_title: str | None = None
    task_display_mode: str | None = None
    log: list[tuple[float, str]] = field(default_factory=list)


@dataclass
class _PendingUpload:
    file_id: str
    filename: str
    length: int
    content: bytes | None = None


class _SlackError(Exception):
    """Raised by method handlers to answer ``{"ok": false, "error": ...}``."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"ok": False, "error": self.error, **self.extra}


def _fail(error: str, **extra: Any) -> NoReturn:
    raise _SlackError(error, **extra)


def _fail_with_messages(error: str, messages: list[str]) -> NoReturn:
    raise _SlackError(
        error,
        errors=list(messages),
        response_metadata={"messages": [f"[ERROR] {m}" for m in messages]},
    )


# --------------------------------------------------------------------------- helpers


def _format_ts(micros: int) -> str:
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


def _ts_to_micros(ts: str) -> int:
    return int(Decimal(ts) * 1_000_000)


def _ts_key(ts: str) -> Decimal:
    try:
        return Decimal(ts)
    except InvalidOperation:
        return Decimal(0)


def _truthy(value: Any) -> bool:
    return value in _TRUE_VALUES


def _str_param(params: dict[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    return str(value)


def _require(params: dict[str, Any], name: str, error: str = "invalid_arguments") -> str:
    value = _str_param(params, name)
    if value is None:
        _fail_with_messages(error, [f"missing required field: {name}"])
    return value


def _int_param(params: dict[str, Any], name: str, default: int) -> int:
    value = params.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        _fail_with_messages("invalid_arguments", [f"{name} must be an integer"])


def _encode_cursor(offset: int) -> str:
    return base64.b64encode(f"offset:{offset}".encode()).decode()


def _decode_cursor(cursor: Any) -> int:
    if cursor is None or cursor == "":
        return 0
    try:
        prefix, _, number = base64.b64decode(str(cursor)).decode().partition(":")
        if prefix != "offset":
            raise ValueError(cursor)
        return int(number)
    except ValueError:
        _fail("invalid_cursor")


def _paginate(
    items: list[dict[str, Any]], params: dict[str, Any], default_limit: int
) -> tuple[list[dict[str, Any]], bool, str]:
    limit = _int_param(params, "limit", default_limit)
    if limit <= 0:
        limit = default_limit
    limit = min(limit, 1000)
    offset = _decode_cursor(params.get("cursor"))
    page = items[offset : offset + limit]
    has_more = offset + limit < len(items)
    return page, has_more, _encode_cursor(offset + limit) if has_more else ""


def _encode_user_cursor(user_id: str) -> str:
    return base64.b64encode(f"user:{user_id}".encode()).decode()


def _decode_user_cursor(cursor: Any) -> str:
    """The id a users.list page ended at ("" for the first page)."""
    if cursor is None or cursor == "":
        return ""
    try:
        prefix, _, user_id = base64.b64decode(str(cursor), validate=True).decode().partition(":")
    except ValueError:
        _fail("invalid_cursor")
    if prefix != "user" or not user_id:
        _fail("invalid_cursor")
    return user_id


def _ts_window(params: dict[str, Any]) -> Callable[[str], bool]:
    """Return a predicate implementing ``oldest`` / ``latest`` / ``inclusive``."""
    inclusive = _truthy(params.get("inclusive"))
    bounds: dict[str, Decimal | None] = {}
    for name, error in (("oldest", "invalid_ts_oldest"), ("latest", "invalid_ts_latest")):
        raw = _str_param(params, name)
        try:
            bounds[name] = Decimal(raw) if raw is not None else None
        except InvalidOperation:
            _fail(error)
    oldest, latest = bounds["oldest"], bounds["latest"]

    def accept(ts: str) -> bool:
        key = _ts_key(ts)
        if oldest is not None and (key < oldest or (key == oldest and not inclusive)):
            return False
        return not (latest is not None and (key > latest or (key == latest and not inclusive)))

    return accept


def _text_object_errors(
    obj: Any, pointer: str, max_chars: int, *, plain_text_only: bool = False
) -> list[str]:
    if not isinstance(obj, dict):
        return [f"must be an object [json-pointer:{pointer}]"]
    allowed = ("plain_text",) if plain_text_only else ("plain_text", "mrkdwn")
    if obj.get("type") not in allowed:
        return [f"must be one of {', '.join(allowed)} [json-pointer:{pointer}/type]"]
    text = obj.get("text")
    if not isinstance(text, str):
        return [f"missing required field: text [json-pointer:{pointer}]"]
    if not text:
        return [f"must be more than 0 characters [json-pointer:{pointer}/text]"]
    if len(text) > max_chars:
        return [f"must be less than {max_chars + 1} characters [json-pointer:{pointer}/text]"]
    return []


def _section_errors(block: dict[str, Any], pointer: str) -> list[str]:
    errors: list[str] = []
    text = block.get("text")
    fields = block.get("fields")
    if text is None and fields is None:
        return [f"must provide either text or fields [json-pointer:{pointer}]"]
    if text is not None:
        errors += _text_object_errors(text, f"{pointer}/text", MAX_SECTION_TEXT_CHARS)
    if fields is not None:
        if not isinstance(fields, list) or not fields:
            errors.append(f"must be a non-empty array [json-pointer:{pointer}/fields]")
        elif len(fields) > MAX_SECTION_FIELDS:
            errors.append(
                f"no more than {MAX_SECTION_FIELDS} items allowed [json-pointer:{pointer}/fields]"
            )
        else:
            for i, item in enumerate(fields):
                errors += _text_object_errors(
                    item, f"{pointer}/fields/{i}", MAX_SECTION_FIELD_CHARS
                )
    return errors


def _elements_errors(block: dict[str, Any], pointer: str, max_items: int) -> list[str]:
    elements = block.get("elements")
    if not isinstance(elements, list) or not elements:
        return [f"must be a non-empty array [json-pointer:{pointer}/elements]"]
    if len(elements) > max_items:
        return [f"no more than {max_items} items allowed [json-pointer:{pointer}/elements]"]
    return []


def _feedback_button_errors(button: Any, pointer: str) -> list[str]:
    if not isinstance(button, dict):
        return [f"must be an object [json-pointer:{pointer}]"]
    errors = _text_object_errors(
        button.get("text"), f"{pointer}/text", MAX_FEEDBACK_BUTTON_TEXT_CHARS, plain_text_only=True
    )
    value = button.get("value")
    if not isinstance(value, str) or not value:
        errors.append(f"missing required field: value [json-pointer:{pointer}]")
    elif len(value) > MAX_BUTTON_VALUE_CHARS:
        errors.append(
            f"must be less than {MAX_BUTTON_VALUE_CHARS + 1} characters "
            f"[json-pointer:{pointer}/value]"
        )
    return errors


def _context_actions_errors(block: dict[str, Any], pointer: str) -> list[str]:
    """``context_actions``: 1-5 ``feedback_buttons`` / ``icon_button`` elements."""
    errors = _elements_errors(block, pointer, MAX_CONTEXT_ACTIONS_ELEMENTS)
    if errors:
        return errors
    for i, element in enumerate(block["elements"]):
        where = f"{pointer}/elements/{i}"
        kind = element.get("type") if isinstance(element, dict) else None
        if kind == "feedback_buttons":
            assert isinstance(element, dict)
            action_id = element.get("action_id")
            if not isinstance(action_id, str) or not action_id:
                errors.append(f"missing required field: action_id [json-pointer:{where}]")
            for name in ("positive_button", "negative_button"):
                if element.get(name) is None:
                    errors.append(f"missing required field: {name} [json-pointer:{where}]")
                else:
                    errors += _feedback_button_errors(element[name], f"{where}/{name}")
        elif kind == "icon_button":
            assert isinstance(element, dict)
            icon = element.get("icon")
            if not isinstance(icon, str) or not icon:
                errors.append(f"missing required field: icon [json-pointer:{where}]")
            errors += _text_object_errors(
                element.get("text"), f"{where}/text", MAX_FEEDBACK_BUTTON_TEXT_CHARS,
                plain_text_only=True,
            )  # fmt: skip
        else:
            errors.append(
                f"must be one of feedback_buttons, icon_button [json-pointer:{where}/type]"
            )
    return errors


def _chunk_errors(chunks: Any) -> list[str]:
    """Validate streaming ``chunks``; return error strings (empty when valid)."""
    if not isinstance(chunks, list):
        return ["must be an array [json-pointer:/chunks]"]
    errors: list[str] = []
    for i, chunk in enumerate(chunks):
        pointer = f"/chunks/{i}"
        kind = chunk.get("type") if isinstance(chunk, dict) else None
        if not isinstance(chunk, dict):
            errors.append(f"must be an object [json-pointer:{pointer}]")
            continue
        required: tuple[str, ...]
        if kind == "markdown_text":
            required = ("text",)
        elif kind == "task_update":
            required = ("id", "title", "status")
        elif kind == "plan_update":
            required = ("title",)
        else:
            errors.append(
                "must be one of markdown_text, task_update, plan_update "
                f"[json-pointer:{pointer}/type]"
            )
            continue
        for name in required:
            if not isinstance(chunk.get(name), str) or (name != "text" and not chunk[name]):
                errors.append(f"missing required field: {name} [json-pointer:{pointer}]")
        if kind == "markdown_text" and len(str(chunk.get("text", ""))) > MAX_STREAM_MARKDOWN_CHARS:
            errors.append(
                f"must be less than {MAX_STREAM_MARKDOWN_CHARS + 1} characters "
                f"[json-pointer:{pointer}/text]"
            )
        if kind == "task_update":
            if isinstance(chunk.get("status"), str) and chunk["status"] not in TASK_STATUSES:
                errors.append(
                    f"must be one of {', '.join(TASK_STATUSES)} [json-pointer:{pointer}/status]"
                )
            for name in ("details", "output"):
                if chunk.get(name) is not None and not isinstance(chunk[name], str):
                    errors.append(f"must be a string [json-pointer:{pointer}/{name}]")
            if chunk.get("sources") is not None and not isinstance(chunk["sources"], list):
                errors.append(f"must be an array [json-pointer:{pointer}/sources]")
    return errors


def _block_errors(blocks: Any, max_blocks: int) -> list[str]:
    """Validate a ``blocks`` array; return Slack-style error strings (empty when valid)."""
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    errors: list[str] = []
    if len(blocks) > max_blocks:
        errors.append(f"no more than {max_blocks} items allowed [json-pointer:/blocks]")
    block_ids: set[str] = set()
    markdown_total = 0
    for i, block in enumerate(blocks):
        pointer = f"/blocks/{i}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            errors.append(f"missing required field: type [json-pointer:{pointer}]")
            continue
        block_id = block.get("block_id")
        if block_id is not None:
            if not isinstance(block_id, str) or not block_id:
                errors.append(f"must be a non-empty string [json-pointer:{pointer}/block_id]")
            elif len(block_id) > MAX_BLOCK_ID_CHARS:
                errors.append(
                    f"must be less than {MAX_BLOCK_ID_CHARS + 1} characters "
                    f"[json-pointer:{pointer}/block_id]"
                )
            elif block_id in block_ids:
                errors.append(f"duplicate block_id [json-pointer:{pointer}/block_id]")
            else:
                block_ids.add(block_id)
        kind = block["type"]
        if kind == "section":
            errors += _section_errors(block, pointer)
        elif kind == "header":
            errors += _text_object_errors(
                block.get("text"), f"{pointer}/text", MAX_HEADER_TEXT_CHARS, plain_text_only=True
            )
        elif kind == "markdown":
            text = block.get("text")
            if not isinstance(text, str):
                errors.append(f"missing required field: text [json-pointer:{pointer}]")
            elif len(text) > MAX_MARKDOWN_TEXT_CHARS:
                errors.append(
                    f"must be less than {MAX_MARKDOWN_TEXT_CHARS + 1} characters "
                    f"[json-pointer:{pointer}/text]"
                )
            else:
                markdown_total += len(text)
        elif kind == "context":
            errors += _elements_errors(block, pointer, MAX_CONTEXT_ELEMENTS)
        elif kind == "actions":
            errors += _elements_errors(block, pointer, MAX_ACTIONS_ELEMENTS)
        elif kind == "context_actions":
            errors += _context_actions_errors(block, pointer)
    if markdown_total > MAX_MARKDOWN_TEXT_CHARS:
        errors.append(
            "cumulative length of markdown block text must be less than "
            f"{MAX_MARKDOWN_TEXT_CHARS + 1} characters [json-pointer:/blocks]"
        )
    return errors


def _file_type(filename: str) -> tuple[str, str]:
    mimetype = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    extension = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    filetype = {"md": "markdown", "txt": "text", "": "binary"}.get(extension, extension)
    return mimetype, filetype


# --------------------------------------------------------------------------- the fake


class FakeSlackAPI(FakeServer):
    """An in-process fake of the Slack Web API.

    Serves ``GET|POST /api/{method}``, an upload endpoint (``/upload/v1/{file_id}``,
    returned by ``files.getUploadURLExternal``) and file downloads (``GET
    /files-pri/{team}-{file_id}/[download/]{name}``, the ``url_private`` and
    ``url_private_download`` of file objects: 200 with the content only for a valid
    bot token, 403 without one, 404 for an unknown file) on ``127.0.0.1`` with an
    ephemeral port.

    Checks run in this order for every API call: per-method latency, injected failures
    (``fail_next``), token (``not_authed`` / ``invalid_auth``), rate limits
    (``rate_limit``, then Slack's documented limits when ``enforce_slack_limits`` is on),
    then the method itself (custom handlers registered with
    ``register`` take precedence over the built-in ones).

    Chat streaming (``chat.startStream`` / ``chat.appendStream`` / ``chat.stopStream``):
    a start posts a bot reply in ``thread_ts`` (in a channel whose id does not start with
    ``D`` it needs ``recipient_user_id`` and ``recipient_team_id``); appends and the stop
    add markdown (``markdown_text`` and ``markdown_text`` chunks, concatenated into the
    message's ``text``) and ``task_update`` / ``plan_update`` chunks; the stop may add
    ``blocks`` and ``metadata``. A stream not stopped expires ``stream_ttl_s`` seconds after
    its start; appends / stops to anything not streaming answer
    ``message_not_in_streaming_state``, and ``chat.update`` of a message still streaming
    answers ``message_is_streaming``. Inspect with ``stream_state``, ``stream_tasks`` and
    ``stream_log``; ``expire_stream`` expires one at once.

    Attributes:
        calls: Every API call received, in order (upload-endpoint requests excluded).
        ephemerals: Messages sent with ``chat.postEphemeral`` as dicts with ``channel``,
            ``user``, ``ts``, ``thread_ts``, ``text``, ``blocks``, ``attachments``.
        files: Files completed with ``files.completeUploadExternal``.
        shared_files: Content of files people shared (``add_file``) by file id.
        downloads: Every file download request, in order.
        views: Every opened / pushed / published view by view id (latest version).
        home_views: The published Home tab view per user id.
        assistant_statuses: Every ``assistant.threads.setStatus`` call, in order.
        reactions: Reaction names added per ``(channel, ts)``.
        users: User objects by id (the bot user is pre-seeded).
        usergroups: Member user ids per user group id.
        revoked_tokens: Tokens answered with ``invalid_auth``.
        errors: Exceptions raised by custom handlers (answered HTTP 500 ``fatal_error``).
    """

    def __init__(
        self,
        *,
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        bot_name: str = "baton",
        app_id: str = "ABATON",
        team_id: str = "T0001",
        team: str = "Baton Test",
        team_domain: str = "baton-test",
        revoked_tokens: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
        stream_ttl_s: float = DEFAULT_STREAM_TTL_S,
        enforce_slack_limits: bool = False,
    ) -> None:
        """Create a stopped fake server.

        Args:
            bot_user_id: User id of the bot (``auth.test`` ``user_id``, author of posts).
            bot_id: Bot id (``auth.test`` ``bot_id``, ``bot_id`` of posted messages).
            bot_name: Bot user name.
            app_id: App id reported on bot messages and views.
            team_id: Workspace id.
            team: Workspace name.
            team_domain: Workspace domain used in ``url`` and permalinks.
            revoked_tokens: Tokens answered with ``invalid_auth``.
            clock: Monotonic clock (seconds) used by ``rate_limit``, stream expiry and
                ``stream_log``; inject for determinism.
            stream_ttl_s: Seconds after ``chat.startStream`` at which a stream that was
                not stopped expires (then append/stop answer
                ``message_not_in_streaming_state``). Also an attribute.
            enforce_slack_limits: Start with Slack's documented rate limits enforced (see
                ``enforce_slack_limits``); ``reset`` returns to this setting.
        """
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.bot_name = bot_name
        self.app_id = app_id
        self.team_id = team_id
        self.team = team
        self.team_domain = team_domain
        self._initial_revoked = frozenset(revoked_tokens)
        self._clock = clock
        self.stream_ttl_s = stream_ttl_s
        self._initial_enforce = enforce_slack_limits
        self._runner: web.AppRunner | None = None
        self._root: str | None = None
        self._stopping = asyncio.Event()
        self._builtin: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "api.test": self._api_test,
            "auth.test": self._auth_test,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.delete": self._chat_delete,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.getPermalink": self._chat_get_permalink,
            "chat.startStream": self._chat_start_stream,
            "chat.appendStream": self._chat_append_stream,
            "chat.stopStream": self._chat_stop_stream,
            "conversations.replies": self._conversations_replies,
            "conversations.history": self._conversations_history,
            "users.info": self._users_info,
            "users.list": self._users_list,
            "users.lookupByEmail": self._users_lookup_by_email,
            "usergroups.users.list": self._usergroups_users_list,
            "views.open": self._views_open,
            "views.push": self._views_push,
            "views.publish": self._views_publish,
            "views.update": self._views_update,
            "files.getUploadURLExternal": self._files_get_upload_url_external,
            "files.completeUploadExternal": self._files_complete_upload_external,
            "assistant.threads.setStatus": self._assistant_set_status,
            "assistant.threads.setTitle": self._assistant_ok,
            "assistant.threads.setSuggestedPrompts": self._assistant_ok,
            "reactions.add": self._reactions_add,
            "reactions.remove": self._reactions_remove,
        }
        self._init_state()

    def _init_state(self) -> None:
        self.calls: list[RecordedCall] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.files: list[UploadedFile] = []
        self.shared_files: dict[str, tuple[str, bytes]] = {}
        self.downloads: list[FileDownload] = []
        self.views: dict[str, dict[str, Any]] = {}
        self.home_views: dict[str, dict[str, Any]] = {}
        self.assistant_statuses: list[AssistantStatus] = []
        self.reactions: dict[tuple[str, str], list[str]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.usergroups: dict[str, list[str]] = {}
        self.revoked_tokens: set[str] = set(self._initial_revoked)
        self.errors: list[BaseException] = []
        self._messages: dict[str, dict[str, dict[str, Any]]] = {}
        self._uploads: dict[str, _PendingUpload] = {}
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._failures: dict[str, deque[_Failure]] = {}
        self._latency: dict[str, float] = {}
        # While set and not open, downloads of files wait for it (`downloads_waiting`).
        self.download_gate: asyncio.Event | None = None
        self.downloads_waiting = 0
        self._rate_limits: dict[str, _RateLimit] = {}
        self._slack_limits: SlackLimits | None = SlackLimits() if self._initial_enforce else None
        self._custom: dict[str, MethodHandler] = {}
        self._ts_micros = _FIRST_TS_MICROS - _TS_STEP_MICROS
        self._ids = itertools.count(1)
        self.add_user(self.bot_user_id, self.bot_name, real_name=self.bot_name, is_bot=True)

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start listening on 127.0.0.1 with an ephemeral port.

        Raises:
            RuntimeError: If the server is already running.
        """
        if self._runner is not None:
            raise RuntimeError("FakeSlackAPI already started")
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("GET", "/api/{method}", self._handle_api)
        app.router.add_route("POST", "/api/{method}", self._handle_api)
        app.router.add_route("POST", "/upload/v1/{file_id}", self._handle_upload)
        app.router.add_route("PUT", "/upload/v1/{file_id}", self._handle_upload)
        app.router.add_route("GET", "/files-pri/{key}/{rest:.+}", self._handle_download)
        self._stopping = asyncio.Event()
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        self._root = await listen_on_loopback(runner) + "/"
        self._runner = runner

    async def stop(self) -> None:
        """Stop the server (idempotent); pending latency sleeps end at once."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._stopping.set()
        await runner.cleanup()

    @property
    def url(self) -> str:
        """Base URL ending in ``/api/``, for ``AsyncWebClient(base_url=...)``.

        Raises:
            RuntimeError: If the server has not been started.
        """
        if self._root is None:
            raise RuntimeError("FakeSlackAPI not started")
        return f"{self._root}api/"

    # ----------------------------------------------------------------- inspection

    def calls_to(self, method: str) -> list[RecordedCall]:
        """Return the recorded calls of one API method, in order.

        Args:
            method: API method name, e.g. ``"chat.update"``.

        Returns:
            The matching calls (including failed ones).
        """
        return [call for call in self.calls if call.method == method]

    def rate_limited_calls(self) -> list[RecordedCall]:
        """Return the calls refused for rate limits (``rate_limit`` or the Slack limits).

        ``fail_next`` 429s are injected failures, not rate limits, and are not included.
        """
        return [call for call in self.calls if call.rate_limited]

    def clear_calls(self) -> None:
        """Forget the recorded calls only; workspace state and configuration are kept."""
        self.calls.clear()

    def reset(self) -> None:
        """Return the fake to its freshly constructed state while keeping it running.

        Clears recorded calls, messages, ephemerals, files, views, reactions, statuses,
        users (the bot user is re-seeded), user groups, injected failures, latencies,
        rate limits and custom handlers; ``revoked_tokens`` goes back to the constructor's.
        """
        self._init_state()

    def get_message(self, channel: str, ts: str) -> dict[str, Any] | None:
        """Return a stored message as ``conversations.replies`` would show it.

        Args:
            channel: Channel id.
            ts: Message timestamp.

        Returns:
            A copy of the message, or ``None`` if there is no such message.
        """
        message = self._messages.get(channel, {}).get(ts)
        return None if message is None else self._render(channel, message)

    def channel_messages(self, channel: str) -> list[dict[str, Any]]:
        """Return every stored message of a channel (replies included), oldest first.

        Args:
            channel: Channel id.

        Returns:
            Copies of the messages in ``ts`` order.
        """
        stored = sorted(self._messages.get(channel, {}).values(), key=lambda m: _ts_key(m["ts"]))
        return [self._render(channel, m) for m in stored]

    def thread_messages(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        """Return a thread's messages (parent first, then replies in ``ts`` order).

        Args:
            channel: Channel id.
            thread_ts: Timestamp of the parent message.

        Returns:
            Copies of the messages; empty if the parent does not exist and has no replies.
        """
        return [self._render(channel, m) for m in self._thread(channel, thread_ts)]

    def assistant_status(self, channel_id: str, thread_ts: str) -> str | None:
        """Return the latest status set on an assistant thread.

        Args:
            channel_id: Channel id.
            thread_ts: Thread timestamp.

        Returns:
            The last status set (``""`` when cleared), or ``None`` if never set.
        """
        for entry in reversed(self.assistant_statuses):
            if entry.channel_id == channel_id and entry.thread_ts == thread_ts:
                return entry.status
        return None

    def stream_state(self, channel: str, ts: str) -> str | None:
        """Return the state of a message started with ``chat.startStream``.

        Args:
            channel: Channel id.
            ts: The streaming message's timestamp.

        Returns:
            ``"streaming"``, ``"stopped"`` or ``"expired"`` (``stream_ttl_s`` passed since
            the start, or ``expire_stream``), or ``None`` when ``ts`` was never a stream.
        """
        stream = self._streams.get((channel, ts))
        return None if stream is None else self._stream_state(stream)

    def stream_tasks(self, channel: str, ts: str) -> list[dict[str, Any]]:
        """Return the ``task_update`` chunks of a stream, one per task id, in first-seen order.

        A later update of a task id replaces its title / status / details / output / sources
        but keeps its position.

        Args:
            channel: Channel id.
            ts: The streaming message's timestamp.

        Returns:
            Copies of the task dicts (empty when ``ts`` is not a stream).
        """
        stream = self._streams.get((channel, ts))
        return [] if stream is None else copy.deepcopy(list(stream.tasks.values()))

    def stream_log(self, channel: str, ts: str) -> list[tuple[float, str]]:
        """Return when each piece of markdown reached a streaming message.

        Args:
            channel: Channel id.
            ts: The streaming message's timestamp.

        Returns:
            ``(clock time, text appended)`` pairs in arrival order, from start, append and
            stop calls (``markdown_text`` parameter first, then ``markdown_text`` chunks);
            the clock is the one given to the constructor. Empty when ``ts`` is not a stream.
        """
        stream = self._streams.get((channel, ts))
        return [] if stream is None else list(stream.log)

    def expire_stream(self, channel: str, ts: str) -> None:
        """Expire a stream now, as if ``stream_ttl_s`` had passed.

        Args:
            channel: Channel id.
            ts: The streaming message's timestamp.

        Raises:
            KeyError: If ``ts`` was never a stream in ``channel``.
        """
        stream = self._streams[(channel, ts)]
        if self._stream_state(stream) == "streaming":
            stream.state = "expired"

    # ----------------------------------------------------------------- seeding

    def add_message(
        self,
        channel: str,
        text: str,
        user: str,
        ts: str | None = None,
        thread_ts: str | None = None,
        bot_id: str | None = None,
        *,
        blocks: list[dict[str, Any]] | None = None,
        subtype: str | None = None,
    ) -> str:
        """Seed an existing message, e.g. the user message that started a thread.

        Args:
            channel: Channel id.
            text: Message text.
            user: Author user id.
            ts: Message timestamp; a fresh increasing one is generated when omitted.
                Later generated timestamps are always greater than any seeded one.
            thread_ts: Parent timestamp when the message is a thread reply.
            bot_id: Bot id when the author is a bot.
            blocks: Optional Block Kit blocks.
            subtype: Optional message subtype.

        Returns:
            The message timestamp.
        """
        if ts is None:
            ts = self._next_ts()
        else:
            self._ts_micros = max(self._ts_micros, _ts_to_micros(ts))
        message: dict[str, Any] = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "team": self.team_id,
        }
        if subtype is not None:
            message["subtype"] = subtype
        if bot_id is not None:
            message["bot_id"] = bot_id
        if blocks is not None:
            message["blocks"] = copy.deepcopy(blocks)
        self._store_message(channel, message, thread_ts)
        return ts

    def add_user(
        self,
        user_id: str,
        name: str,
        real_name: str | None = None,
        *,
        display_name: str = "",
        email: str | None = None,
        is_bot: bool = False,
        is_admin: bool = False,
        deleted: bool = False,
        tz: str = "UTC",
        is_restricted: bool = False,
        is_ultra_restricted: bool = False,
        team_id: str | None = None,
        enterprise_id: str | None = None,
    ) -> dict[str, Any]:
        """Seed a user for ``users.info`` / ``users.list`` / ``users.lookupByEmail``.

        Args:
            user_id: User id, e.g. ``"U123"``.
            name: Handle (``user.name``).
            real_name: Full name; defaults to ``name``.
            display_name: ``profile.display_name``; empty by default, as for many real users.
            email: ``profile.email``.
            is_bot: Whether the user is a bot.
            is_admin: Whether the user is a workspace admin.
            deleted: Whether the user is deactivated.
            tz: Time zone identifier.
            is_restricted: A multi-channel guest.
            is_ultra_restricted: A single-channel guest.
            team_id: The user's home workspace (``team_id``, ``profile.team``); defaults
                to this fake's workspace. Another id makes a Slack Connect user.
            enterprise_id: The user's Enterprise Grid organisation; when set, the user
                carries ``enterprise_user`` as Slack sends it for Grid members.

        Returns:
            The stored user object (Slack's shape).
        """
        team = team_id if team_id is not None else self.team_id
        real = real_name if real_name is not None else name
        profile: dict[str, Any] = {
            "real_name": real,
            "real_name_normalized": real,
            "display_name": display_name,
            "display_name_normalized": display_name,
            "team": team,
        }
        if email is not None:
            profile["email"] = email
        if is_bot and user_id == self.bot_user_id:
            profile["bot_id"] = self.bot_id
        user: dict[str, Any] = {
            "id": user_id,
            "team_id": team,
            "name": name,
            "deleted": deleted,
            "real_name": real,
            "tz": tz,
            "is_admin": is_admin,
            "is_owner": False,
            "is_restricted": is_restricted,
            "is_ultra_restricted": is_ultra_restricted,
            "is_bot": is_bot,
            "is_app_user": False,
            "updated": 1_700_000_000,
            "profile": profile,
        }
        if enterprise_id is not None:
            user["enterprise_user"] = {
                "id": user_id,
                "enterprise_id": enterprise_id,
                "enterprise_name": f"Enterprise {enterprise_id}",
                "is_admin": False,
                "is_owner": False,
                "is_primary_owner": False,
                "teams": [team],
            }
        self.users[user_id] = user
        return copy.deepcopy(user)

    def add_usergroup(self, usergroup_id: str, user_ids: Iterable[str]) -> None:
        """Seed a user group for ``usergroups.users.list``.

        Args:
            usergroup_id: User group id, e.g. ``"S123"``.
            user_ids: Member user ids.
        """
        self.usergroups[usergroup_id] = list(user_ids)

    def revoke_token(self, token: str) -> None:
        """Make a token answer ``invalid_auth`` from now on.

        Args:
            token: The token to reject.
        """
        self.revoked_tokens.add(token)

    # ----------------------------------------------------------------- behaviour control

    def fail_next(
        self,
        method: str,
        *,
        status: int = 429,
        retry_after: int | None = 1,
        error: str | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail (queued after earlier ones).

        Without ``error``, calls answer HTTP ``status`` (429: body ``ratelimited``; 503:
        ``service_unavailable``; otherwise ``internal_error``) with a ``Retry-After``
        header when ``retry_after`` is not None. With ``error``, calls answer HTTP 200
        ``{"ok": false, "error": error}``. Failed calls are recorded with ``failed=True``.

        Args:
            method: API method name.
            status: HTTP status for the failure.
            retry_after: ``Retry-After`` seconds, or ``None`` for no header.
            error: Slack error string for an HTTP 200 ``ok: false`` answer.
            times: Number of consecutive calls to fail.

        Raises:
            ValueError: If ``times`` is less than 1.
        """
        if times < 1:
            raise ValueError("times must be >= 1")
        queue = self._failures.setdefault(method, deque())
        queue.append(_Failure(status=status, retry_after=retry_after, error=error, remaining=times))

    def set_latency(self, method: str, seconds: float) -> None:
        """Delay answers of ``method`` (``"*"`` for every method without its own latency).

        Args:
            method: API method name or ``"*"``.
            seconds: Delay in seconds; ``0`` removes it.
        """
        if seconds <= 0:
            self._latency.pop(method, None)
        else:
            self._latency[method] = seconds

    def rate_limit(
        self, method: str, per_second: float | None, *, per_channel: bool = False
    ) -> None:
        """Answer calls above a rate with HTTP 429, ``ratelimited`` and ``Retry-After``.

        A sliding-window log over the injected ``clock``: the window is
        ``max(1, 1 / per_second)`` seconds and allows ``max(1, per_second * window)``
        successful calls; rejected calls do not count. ``Retry-After`` is the whole number
        of seconds until a slot frees up (at least 1).

        Args:
            method: API method name.
            per_second: Allowed calls per second, or ``None`` to remove the limit.
            per_channel: Count separately per ``channel`` / ``channel_id`` parameter.

        Raises:
            ValueError: If ``per_second`` is not positive.
        """
        if per_second is None:
            self._rate_limits.pop(method, None)
            return
        if per_second <= 0:
            raise ValueError("per_second must be > 0")
        window = max(1.0, 1.0 / per_second)
        capacity = max(1, int(per_second * window))
        self._rate_limits[method] = _RateLimit(
            window=window, capacity=capacity, per_channel=per_channel
        )

    def enforce_slack_limits(self, enabled: bool = True) -> None:
        """Enforce (or stop enforcing) Slack's documented Web API rate limits.

        Token buckets over the injected ``clock``, modelled in ``tests.fakes.slack_limits``:
        one per method in ``SLACK_TIERS`` (a tier's ``per_minute`` calls a minute, refill
        ``per_minute / 60`` a second, burst ``max(1, per_minute // 6)``, i.e. ten seconds'
        worth), ``chat.postMessage`` as 300 a minute (burst 50), and one per channel shared
        by ``chat.postMessage``, ``chat.startStream`` and ``files.completeUploadExternal``
        with a channel (burst 3, refill 1 a second). A call over a limit answers HTTP 429
        ``ratelimited`` with ``Retry-After`` (whole seconds until it would pass, at least 1),
        takes no effect, and is recorded with ``rate_limited=True``. The check runs after
        ``rate_limit``'s. Enabling starts from full buckets.

        Args:
            enabled: True to enforce, False to stop.
        """
        self._slack_limits = SlackLimits() if enabled else None

    @property
    def slack_limits_enforced(self) -> bool:
        """Whether ``enforce_slack_limits`` is on."""
        return self._slack_limits is not None

    def register(self, method: str, handler: MethodHandler | None) -> None:
        """Install a custom implementation for a method (overrides built-ins).

        The handler gets the decoded params (token removed) after auth, failure injection
        and rate limiting, and returns the response body (sync or async); ``"ok": true``
        is added when missing. Raising an exception answers HTTP 500 ``fatal_error`` and
        stores the exception in ``errors``.

        Args:
            method: API method name.
            handler: The implementation, or ``None`` to remove a custom one.
        """
        if handler is None:
            self._custom.pop(method, None)
        else:
            self._custom[method] = handler

    # ----------------------------------------------------------------- HTTP plumbing

    async def _sleep(self, seconds: float) -> None:
        if seconds <= 0 or self._stopping.is_set():
            return
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    @staticmethod
    async def _read_params(request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.body_exists:
            content_type = request.content_type
            if content_type == "application/json":
                raw = await request.read()
                if raw.strip():
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        _fail("invalid_json")
                    if not isinstance(body, dict):
                        _fail("invalid_json")
                    params.update(body)
            elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
                form = await request.post()
                for key, value in form.items():
                    if isinstance(value, web.FileField):
                        params[key] = value.file.read()
                    else:
                        params[key] = value
        for key in _JSON_FIELDS:
            value = params.get(key)
            if isinstance(value, str):
                try:
                    params[key] = json.loads(value)
                except ValueError:
                    pass  # left as a string; handlers report the malformed field
        return params

    def _auth_error(self, token: str | None) -> str | None:
        if not token:
            return "not_authed"
        if not token.startswith(_VALID_TOKEN_PREFIXES) or token in self.revoked_tokens:
            return "invalid_auth"
        return None

    def _take_failure(self, method: str) -> _Failure | None:
        queue = self._failures.get(method)
        if not queue:
            return None
        failure = queue[0]
        failure.remaining -= 1
        if failure.remaining <= 0:
            queue.popleft()
        return failure

    @staticmethod
    def _failure_answer(failure: _Failure) -> tuple[int, dict[str, Any], dict[str, str]]:
        if failure.error is not None:
            return 200, {"ok": False, "error": failure.error}, {}
        headers = {} if failure.retry_after is None else {"Retry-After": str(failure.retry_after)}
        error = {429: "ratelimited", 503: "service_unavailable"}.get(
            failure.status, "internal_error"
        )
        return failure.status, {"ok": False, "error": error}, headers

    def _rate_limited(self, method: str, params: dict[str, Any]) -> int | None:
        """Return ``Retry-After`` seconds if the call exceeds the rate, else count it."""
        limit = self._rate_limits.get(method)
        if limit is None:
            return None
        key = ""
        if limit.per_channel:
            key = str(params.get("channel") or params.get("channel_id") or "")
        now = self._clock()
        history = limit.history.setdefault(key, deque())
        while history and history[0] <= now - limit.window:
            history.popleft()
        if len(history) >= limit.capacity:
            return max(1, math.ceil(history[0] + limit.window - now))
        history.append(now)
        return None

    async def _handle_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        header = request.headers.get("Authorization", "")
        token: str | None = header[7:].strip() if header.startswith("Bearer ") else None
        try:
            params = await self._read_params(request)
        except _SlackError as exc:
            params, early_error = {}, exc
        else:
            early_error = None
        form_token = params.pop("token", None)
        if token is None and form_token:
            token = str(form_token)
        recorded_params = copy.deepcopy(params)

        await self._sleep(self._latency.get(method, self._latency.get("*", 0.0)))

        status, headers, failed, rate_limited = 200, {}, False, False
        body: dict[str, Any]
        failure = self._take_failure(method)
        auth_error = None if method in _NO_AUTH_METHODS else self._auth_error(token)
        if failure is not None:
            status, body, headers = self._failure_answer(failure)
            failed = True
        elif early_error is not None:
            body = early_error.body()
        elif auth_error is not None:
            body = {"ok": False, "error": auth_error}
        elif (retry_after := self._rate_limited(method, params)) is not None or (
            self._slack_limits is not None
            and (retry_after := self._slack_limits.admit(method, params, self._clock())) is not None
        ):
            status, body, failed, rate_limited = (
                429,
                {"ok": False, "error": "ratelimited"},
                True,
                True,
            )
            headers = {"Retry-After": str(retry_after)}
        elif method in self._custom:
            status, body = await self._run_custom(self._custom[method], params)
        elif method in self._builtin:
            try:
                body = self._builtin[method](params)
            except _SlackError as exc:
                body = exc.body()
        else:
            body = {"ok": False, "error": "unknown_method"}

        self.calls.append(
            RecordedCall(
                method=method,
                params=recorded_params,
                token=token,
                failed=failed,
                error=None if body.get("ok") else str(body.get("error")),
                status=status,
                http_method=request.method,
                rate_limited=rate_limited,
            )
        )
        return web.json_response(body, status=status, headers=headers)

    async def _run_custom(
        self, handler: MethodHandler, params: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        try:
            result = handler(params)
            if inspect.isawaitable(result):
                result = await result
        except _SlackError as exc:
            return 200, exc.body()
        except Exception as exc:
            self.errors.append(exc)
            return 500, {"ok": False, "error": "fatal_error"}
        body = dict(result)
        body.setdefault("ok", True)
        return 200, body

    async def _handle_download(self, request: web.Request) -> web.Response:
        if (gate := self.download_gate) is not None and not gate.is_set():
            self.downloads_waiting += 1
            try:
                await gate.wait()
            finally:
                self.downloads_waiting -= 1
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.startswith("Bearer ") else None
        key = request.match_info["key"]
        file_id = key.split("-", 1)[1] if key.startswith(f"{self.team_id}-") else None
        content = self._file_content(file_id) if file_id else None
        if content is None:
            status, body = 404, b"Not Found"
        elif self._auth_error(token) is not None:
            status, body = 403, b"Forbidden"
        else:
            status, body = 200, content
        self.downloads.append(FileDownload(file_id=file_id, token=token, status=status))
        return web.Response(status=status, body=body, content_type="application/octet-stream")

    def _file_content(self, file_id: str) -> bytes | None:
        if file_id in self.shared_files:
            return self.shared_files[file_id][1]
        for uploaded in self.files:
            if uploaded.id == file_id:
                return uploaded.content
        return None

    async def _handle_upload(self, request: web.Request) -> web.Response:
        upload = self._uploads.get(request.match_info["file_id"])
        if upload is None:
            return web.Response(status=404, text="Not Found", content_type="text/plain")
        if request.content_type == "multipart/form-data":
            content = b""
            form = await request.post()
            for value in form.values():
                if isinstance(value, web.FileField):
                    content = value.file.read()
                    break
        else:
            content = await request.read()
        upload.content = content
        return web.Response(text=f"OK - {len(content)}", content_type="text/plain")

    # ----------------------------------------------------------------- message store

    def _next_ts(self) -> str:
        self._ts_micros += _TS_STEP_MICROS
        return _format_ts(self._ts_micros)

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):08d}"

    def _root_ts(self, channel: str, thread_ts: str) -> str:
        """Resolve a ``thread_ts`` that points at a reply to the thread's parent."""
        target = self._messages.get(channel, {}).get(thread_ts)
        if target is not None and target.get("thread_ts") not in (None, thread_ts):
            return str(target["thread_ts"])
        return thread_ts

    def _store_message(
        self, channel: str, message: dict[str, Any], thread_ts: str | None
    ) -> dict[str, Any]:
        store = self._messages.setdefault(channel, {})
        if thread_ts is not None and thread_ts != message["ts"]:
            root_ts = self._root_ts(channel, thread_ts)
            message["thread_ts"] = root_ts
            parent = store.get(root_ts)
            if parent is not None:
                parent["thread_ts"] = root_ts
                message["parent_user_id"] = parent.get("user")
        store[message["ts"]] = message
        return message

    def _thread(self, channel: str, ts: str) -> list[dict[str, Any]]:
        store = self._messages.get(channel, {})
        root_ts = self._root_ts(channel, ts)
        replies = [
            m for m in store.values() if m.get("thread_ts") == root_ts and m["ts"] != root_ts
        ]
        replies.sort(key=lambda m: _ts_key(m["ts"]))
        root = store.get(root_ts)
        return ([root] if root is not None else []) + replies

    def _render(self, channel: str, message: dict[str, Any]) -> dict[str, Any]:
        rendered = copy.deepcopy(message)
        if message.get("thread_ts") == message["ts"]:
            replies = self._thread(channel, message["ts"])[1:]
            users = list(dict.fromkeys(str(m.get("user")) for m in replies))
            rendered["reply_count"] = len(replies)
            rendered["reply_users"] = users
            rendered["reply_users_count"] = len(users)
            rendered["latest_reply"] = replies[-1]["ts"] if replies else message["ts"]
        return rendered

    def _content(
        self, params: dict[str, Any], *, required: bool = True
    ) -> tuple[str | None, list[Any] | None, list[Any] | None]:
        """Validate ``text`` / ``blocks`` / ``attachments`` like chat.* methods do."""
        text = params.get("text")
        text = None if text is None else str(text)
        blocks = params.get("blocks")
        attachments = params.get("attachments")
        if isinstance(blocks, str):
            _fail("invalid_blocks_format")
        if attachments is not None and not isinstance(attachments, list):
            _fail("invalid_attachments")
        if required and not text and not blocks and not attachments:
            _fail("no_text")
        if text is not None and len(text) > MAX_MESSAGE_TEXT_CHARS:
            _fail("msg_too_long")
        if blocks is not None:
            errors = _block_errors(blocks, MAX_MESSAGE_BLOCKS)
            if errors:
                _fail_with_messages("invalid_blocks", errors)
        return text, blocks, attachments

    def _bot_message(self, ts: str) -> dict[str, Any]:
        return {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": "",
            "ts": ts,
            "team": self.team_id,
            "bot_profile": {
                "id": self.bot_id,
                "app_id": self.app_id,
                "name": self.bot_name,
                "team_id": self.team_id,
                "deleted": False,
            },
        }

    def _find_message(self, channel: str, ts: str) -> dict[str, Any]:
        message = self._messages.get(channel, {}).get(ts)
        if message is None:
            _fail("message_not_found")
        return message

    def _owned_by_bot(self, message: dict[str, Any]) -> bool:
        return message.get("user") == self.bot_user_id or message.get("bot_id") == self.bot_id

    # ----------------------------------------------------------------- methods: misc

    def _api_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "args": params}

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": f"https://{self.team_domain}.slack.com/",
            "team": self.team,
            "user": self.bot_name,
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    # ----------------------------------------------------------------- methods: chat

    def _chat_post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _require(params, "channel")
        text, blocks, attachments = self._content(params)
        message = self._bot_message(self._next_ts())
        message["text"] = text or ""
        if blocks is not None:
            message["blocks"] = blocks
        if attachments:
            message["attachments"] = attachments
        if isinstance(params.get("metadata"), dict):
            message["metadata"] = params["metadata"]
        self._store_message(channel, message, _str_param(params, "thread_ts"))
        return {
            "ok": True,
            "channel": channel,
            "ts": message["ts"],
            "message": self._render(channel, message),
        }

    def _chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _require(params, "channel", "channel_not_found")
        ts = _require(params, "ts", "message_not_found")
        message = self._find_message(channel, ts)
        text, blocks, attachments = self._content(params)
        if not self._owned_by_bot(message):
            _fail("cant_update_message")
        stream = self._streams.get((channel, ts))
        if stream is not None and self._stream_state(stream) == "streaming":
            # Slack documents no error for this; the fake answers ``message_is_streaming``
            # (a streaming message changes only through chat.appendStream / chat.stopStream;
            # once stopped or expired it is an ordinary message again).
            _fail("message_is_streaming")
        if text is not None:
            message["text"] = text
        if blocks is not None:
            if blocks:
                message["blocks"] = blocks
            else:
                message.pop("blocks", None)
        if attachments is not None:
            if attachments:
                message["attachments"] = attachments
            else:
                message.pop("attachments", None)
        if isinstance(params.get("metadata"), dict):
            message["metadata"] = params["metadata"]
        message["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        return {
            "ok": True,
            "channel": channel,
            "ts": ts,
            "text": message["text"],
            "message": self._render(channel, message),
        }

    def _chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _require(params, "channel", "channel_not_found")
        ts = _require(params, "ts", "message_not_found")
        message = self._find_message(channel, ts)
        if not self._owned_by_bot(message):
            _fail("cant_delete_message")
        store = self._messages[channel]
        if message.get("thread_ts") == ts and len(self._thread(channel, ts)) > 1:
            store[ts] = {
                "type": "message",
                "subtype": "tombstone",
                "user": "USLACKBOT",
                "text": "This message was deleted.",
                "hidden": True,
                "ts": ts,
                "thread_ts": ts,
            }
        else:
            del store[ts]
        return {"ok": True, "channel": channel, "ts": ts}

    def _chat_post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _require(params, "channel")
        user = _require(params, "user")
        text, blocks, attachments = self._content(params)
        ts = self._next_ts()
        self.ephemerals.append(
            {
                "channel": channel,
                "user": user,
                "ts": ts,
                "thread_ts": _str_param(params, "thread_ts"),
                "text": text or "",
                "blocks": blocks,
                "attachments": attachments,
                "bot_id": self.bot_id,
            }
        )
        return {"ok": True, "message_ts": ts}

    def _chat_get_permalink(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _require(params, "channel", "channel_not_found")
        ts = _require(params, "message_ts", "message_not_found")
        link = f"https://{self.team_domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        message = self._messages.get(channel, {}).get(ts)
        if message is not None and message.get("thread_ts") not in (None, ts):
            link += f"?thread_ts={message['thread_ts']}&cid={channel}"
        return {"ok": True, "channel": channel, "permalink": link}

    # ----------------------------------------------------------------- methods: streaming

    def _stream_state(self, stream: _Stream) -> str:
        if stream.state == "streaming" and self._clock() - stream.started_at >= self.stream_ttl_s:
            stream.state = "expired"
        return stream.state

    @staticmethod
    def _stream_content(params: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
        """Validate ``markdown_text`` / ``chunks`` of a streaming call."""
        markdown = params.get("markdown_text")
        markdown = None if markdown is None else str(markdown)
        if markdown is not None and len(markdown) > MAX_STREAM_MARKDOWN_CHARS:
            _fail("msg_too_long")
        chunks = params.get("chunks")
        if chunks is None:
            return markdown, []
        errors = _chunk_errors(chunks)
        if errors:
            _fail_with_messages("invalid_chunks", errors)
        return markdown, list(chunks)

    def _stream_apply(
        self,
        stream: _Stream,
        message: dict[str, Any],
        markdown: str | None,
        chunks: list[dict[str, Any]],
    ) -> None:
        now = self._clock()
        pieces = [markdown] if markdown else []
        for chunk in chunks:
            kind = chunk["type"]
            if kind == "markdown_text":
                if chunk["text"]:
                    pieces.append(str(chunk["text"]))
            elif kind == "plan_update":
                stream.plan_title = str(chunk["title"])
            else:
                task = {k: v for k, v in chunk.items() if k != "type"}
                previous = stream.tasks.get(str(chunk["id"]))
                stream.tasks[str(chunk["id"])] = task if previous is None else {**previous, **task}
        for piece in pieces:
            message["text"] = str(message.get("text") or "") + piece
            stream.log.append((now, piece))

    def _streaming_message(
        self, params: dict[str, Any]
    ) -> tuple[str, str, dict[str, Any], _Stream]:
        channel = _require(params, "channel", "channel_not_found")
        ts = _require(params, "ts", "message_not_found")
        message = self._find_message(channel, ts)
        stream = self._streams.get((channel, ts))
        if stream is None or self._stream_state(stream) != "streaming":
            _fail("message_not_in_streaming_state")
        return channel, ts, message, stream

    def _chat_start_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _require(params, "channel", "channel_not_found")
        thread_ts = _require(params, "thread_ts", "message_not_found")
        if not self._messages.get(channel):
            _fail("channel_not_found")
        self._find_message(channel, thread_ts)
        recipient_user = _str_param(params, "recipient_user_id")
        recipient_team = _str_param(params, "recipient_team_id")
        if not channel.startswith("D"):
            if recipient_user is None:
                _fail("missing_recipient_user_id")
            if recipient_team is None:
                _fail("missing_recipient_team_id")
        if recipient_user is not None and recipient_user not in self.users:
            _fail("user_not_found")
        mode = _str_param(params, "task_display_mode")
        if mode is not None and mode not in TASK_DISPLAY_MODES:
            _fail_with_messages(
                "invalid_arguments", [f"task_display_mode must be one of {TASK_DISPLAY_MODES}"]
            )
        markdown, chunks = self._stream_content(params)
        message = self._bot_message(self._next_ts())
        stream = _Stream(started_at=self._clock(), task_display_mode=mode)
        self._stream_apply(stream, message, markdown, chunks)
        self._store_message(channel, message, thread_ts)
        self._streams[(channel, message["ts"])] = stream
        return {"ok": True, "channel": channel, "ts": message["ts"]}

    def _chat_append_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts, message, stream = self._streaming_message(params)
        markdown, chunks = self._stream_content(params)
        if markdown is None and not chunks:
            _fail_with_messages("invalid_arguments", ["markdown_text or chunks is required"])
        self._stream_apply(stream, message, markdown, chunks)
        return {"ok": True, "channel": channel, "ts": ts}

    def _chat_stop_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts, message, stream = self._streaming_message(params)
        markdown, chunks = self._stream_content(params)
        blocks = params.get("blocks")
        if isinstance(blocks, str):
            _fail("invalid_blocks_format")
        if blocks is not None:
            errors = _block_errors(blocks, MAX_MESSAGE_BLOCKS)
            if errors:
                _fail_with_messages("invalid_blocks", errors)
        self._stream_apply(stream, message, markdown, chunks)
        if blocks:
            message["blocks"] = blocks
        if isinstance(params.get("metadata"), dict):
            message["metadata"] = params["metadata"]
        stream.state = "stopped"
        return {"ok": True, "channel": channel, "ts": ts, "message": self._render(channel, message)}

    # ----------------------------------------------------------------- methods: conversations

    def _conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _require(params, "channel", "channel_not_found")
        ts = _require(params, "ts", "thread_not_found")
        if ts not in self._messages.get(channel, {}):
            _fail("thread_not_found")
        thread = self._thread(channel, ts)
        accept = _ts_window(params)
        root, replies = thread[:1], [m for m in thread[1:] if accept(m["ts"])]
        page, has_more, cursor = _paginate(root + replies, params, 1000)
        return {
            "ok": True,
            "messages": [self._render(channel, m) for m in page],
            "has_more": has_more,
            "response_metadata": {"next_cursor": cursor},
        }

    def _conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = _require(params, "channel", "channel_not_found")
        accept = _ts_window(params)
        top_level = [
            m
            for m in self._messages.get(channel, {}).values()
            if m.get("thread_ts") in (None, m["ts"]) and accept(m["ts"])
        ]
        top_level.sort(key=lambda m: _ts_key(m["ts"]), reverse=True)
        page, has_more, cursor = _paginate(top_level, params, 100)
        return {
            "ok": True,
            "messages": [self._render(channel, m) for m in page],
            "has_more": has_more,
            "pin_count": 0,
            "response_metadata": {"next_cursor": cursor},
        }

    # ----------------------------------------------------------------- methods: users

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(_require(params, "user", "user_not_found"))
        if user is None:
            _fail("user_not_found")
        return {"ok": True, "user": copy.deepcopy(user)}

    def _users_list(self, params: dict[str, Any]) -> dict[str, Any]:
        # Slack's cursor names where the previous page ended (ids in order), so people
        # added meanwhile shift no page. No `limit` (or 0): everyone at once, as Slack
        # tries to; more than 1000 a page is not given.
        limit = _int_param(params, "limit", 0)
        limit = min(limit, 1000) if limit > 0 else len(self.users)
        after = _decode_user_cursor(params.get("cursor"))
        ids = sorted(user_id for user_id in self.users if user_id > after)
        page, rest = ids[:limit], ids[limit:]
        return {
            "ok": True,
            "members": [copy.deepcopy(self.users[user_id]) for user_id in page],
            "cache_ts": int(time.time()),
            "response_metadata": {"next_cursor": _encode_user_cursor(page[-1]) if rest else ""},
        }

    def _users_lookup_by_email(self, params: dict[str, Any]) -> dict[str, Any]:
        email = _require(params, "email", "users_not_found")
        for user in self.users.values():
            if user["profile"].get("email") == email:
                return {"ok": True, "user": copy.deepcopy(user)}
        _fail("users_not_found")

    def _usergroups_users_list(self, params: dict[str, Any]) -> dict[str, Any]:
        usergroup = _require(params, "usergroup")
        if usergroup not in self.usergroups:
            _fail("no_such_subteam")
        return {"ok": True, "users": list(self.usergroups[usergroup])}

    # ----------------------------------------------------------------- methods: views

    def _check_view(self, view: Any, allowed_types: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(view, dict):
            _fail_with_messages("invalid_arguments", ["view must be an object"])
        errors: list[str] = []
        view_type = view.get("type")
        if view_type not in allowed_types:
            errors.append(f"must be one of {', '.join(allowed_types)} [json-pointer:/view/type]")
        blocks = view.get("blocks")
        if blocks is None:
            errors.append("missing required field: blocks [json-pointer:/view]")
        else:
            errors += [
                e.replace("[json-pointer:/blocks", "[json-pointer:/view/blocks")
                for e in _block_errors(blocks, MAX_VIEW_BLOCKS)
            ]
        if view_type == "modal":
            if view.get("title") is None:
                errors.append("missing required field: title [json-pointer:/view]")
            for name in ("title", "submit", "close"):
                if view.get(name) is not None:
                    errors += _text_object_errors(
                        view[name], f"/view/{name}", MAX_VIEW_TITLE_CHARS, plain_text_only=True
                    )
            has_input = isinstance(blocks, list) and any(
                isinstance(b, dict) and b.get("type") == "input" for b in blocks
            )
            if has_input and view.get("submit") is None:
                errors.append(
                    "submit is required when an input block is present [json-pointer:/view]"
                )
        if len(str(view.get("private_metadata") or "")) > MAX_PRIVATE_METADATA_CHARS:
            errors.append(
                f"must be less than {MAX_PRIVATE_METADATA_CHARS + 1} characters "
                "[json-pointer:/view/private_metadata]"
            )
        if len(str(view.get("callback_id") or "")) > MAX_CALLBACK_ID_CHARS:
            errors.append(
                f"must be less than {MAX_CALLBACK_ID_CHARS + 1} characters "
                "[json-pointer:/view/callback_id]"
            )
        if errors:
            _fail_with_messages("invalid_arguments", errors)
        return view

    def _build_view(
        self,
        view: dict[str, Any],
        *,
        view_id: str | None = None,
        root_view_id: str | None = None,
        previous_view_id: str | None = None,
    ) -> dict[str, Any]:
        view_id = view_id or self._next_id("V")
        built: dict[str, Any] = {
            "id": view_id,
            "team_id": self.team_id,
            "type": view["type"],
            "blocks": view.get("blocks", []),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "external_id": view.get("external_id", ""),
            "state": {"values": {}},
            "hash": f"1700000000.{next(self._ids):08d}",
            "title": view.get("title"),
            "close": view.get("close"),
            "submit": view.get("submit"),
            "clear_on_close": bool(view.get("clear_on_close", False)),
            "notify_on_close": bool(view.get("notify_on_close", False)),
            "previous_view_id": previous_view_id,
            "root_view_id": root_view_id or view_id,
            "app_id": self.app_id,
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }
        self.views[view_id] = built
        return built

    def _views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        _require(params, "trigger_id")
        view = self._check_view(params.get("view"), ("modal",))
        return {"ok": True, "view": copy.deepcopy(self._build_view(view))}

    def _views_push(self, params: dict[str, Any]) -> dict[str, Any]:
        _require(params, "trigger_id")
        view = self._check_view(params.get("view"), ("modal",))
        return {"ok": True, "view": copy.deepcopy(self._build_view(view))}

    def _views_publish(self, params: dict[str, Any]) -> dict[str, Any]:
        user_id = _require(params, "user_id")
        view = self._check_view(params.get("view"), ("home",))
        existing = self.home_views.get(user_id)
        expected_hash = _str_param(params, "hash")
        if existing is not None and expected_hash is not None and existing["hash"] != expected_hash:
            _fail("hash_conflict")
        built = self._build_view(view, view_id=existing["id"] if existing else None)
        self.home_views[user_id] = built
        return {"ok": True, "view": copy.deepcopy(built)}

    def _views_update(self, params: dict[str, Any]) -> dict[str, Any]:
        view_id = _str_param(params, "view_id")
        external_id = _str_param(params, "external_id")
        if view_id is None and external_id is None:
            _fail_with_messages("invalid_arguments", ["view_id or external_id is required"])
        existing = self.views.get(view_id) if view_id is not None else None
        if existing is None and external_id is not None:
            existing = next(
                (v for v in self.views.values() if v["external_id"] == external_id), None
            )
        if existing is None:
            _fail("not_found")
        expected_hash = _str_param(params, "hash")
        if expected_hash is not None and existing["hash"] != expected_hash:
            _fail("hash_conflict")
        view = self._check_view(params.get("view"), (existing["type"],))
        built = self._build_view(
            view,
            view_id=existing["id"],
            root_view_id=existing["root_view_id"],
            previous_view_id=existing["previous_view_id"],
        )
        for user_id, home in list(self.home_views.items()):
            if home["id"] == built["id"]:
                self.home_views[user_id] = built
        return {"ok": True, "view": copy.deepcopy(built)}

    # ----------------------------------------------------------------- methods: files

    def _files_get_upload_url_external(self, params: dict[str, Any]) -> dict[str, Any]:
        filename = _require(params, "filename")
        length = _int_param(params, "length", -1)
        if length < 0:
            _fail_with_messages("invalid_arguments", ["missing required field: length"])
        file_id = self._next_id("F")
        self._uploads[file_id] = _PendingUpload(file_id=file_id, filename=filename, length=length)
        assert self._root is not None
        return {"ok": True, "upload_url": f"{self._root}upload/v1/{file_id}", "file_id": file_id}

    def _files_complete_upload_external(self, params: dict[str, Any]) -> dict[str, Any]:
        files = params.get("files")
        if not isinstance(files, list) or not files:
            _fail_with_messages("invalid_arguments", ["files must be a non-empty JSON array"])
        channel = _str_param(params, "channel_id")
        channels = _str_param(params, "channels")
        if channel is None and channels is not None:
            channel = channels.split(",")[0]
        thread_ts = _str_param(params, "thread_ts")
        if thread_ts is not None and channel is None:
            _fail_with_messages("invalid_arguments", ["thread_ts requires channel_id"])
        comment = _str_param(params, "initial_comment")
        uploads: list[tuple[_PendingUpload, str | None]] = []
        for item in files:
            upload = self._uploads.get(str(item.get("id"))) if isinstance(item, dict) else None
            if upload is None or upload.content is None:
                _fail("file_not_found")
            uploads.append((upload, item.get("title")))
        objects: list[dict[str, Any]] = []
        for upload, title in uploads:
            del self._uploads[upload.file_id]
            self.files.append(
                UploadedFile(
                    id=upload.file_id,
                    filename=upload.filename,
                    title=title,
                    content=upload.content or b"",
                    channel=channel,
                    thread_ts=thread_ts,
                    initial_comment=comment,
                )
            )
            objects.append(self._file_object(upload, title))
        if channel is not None:
            message = {
                "type": "message",
                "user": self.bot_user_id,
                "text": comment or "",
                "files": copy.deepcopy(objects),
                "upload": True,
                "display_as_bot": False,
                "ts": self._next_ts(),
                "team": self.team_id,
            }
            self._store_message(channel, message, thread_ts)
        return {"ok": True, "files": objects}

    def _file_object(self, upload: _PendingUpload, title: str | None) -> dict[str, Any]:
        return self._shared_file_object(
            upload.file_id, upload.filename, upload.content or b"", user=self.bot_user_id,
            title=title,
        )  # fmt: skip

    def _shared_file_object(
        self, file_id: str, filename: str, content: bytes, *, user: str,
        title: str | None = None, mimetype: str | None = None, filetype: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        guessed_mimetype, guessed_filetype = _file_type(filename)
        # Served by this server (never the real files.slack.com), as Slack serves them.
        assert self._root is not None
        base = f"{self._root}files-pri/{self.team_id}-{file_id}"
        return {
            "id": file_id,
            "created": 1_700_000_000,
            "timestamp": 1_700_000_000,
            "name": filename,
            "title": title or filename,
            "mimetype": mimetype or guessed_mimetype,
            "filetype": filetype or guessed_filetype,
            "user": user,
            "user_team": self.team_id,
            "size": len(content),
            "mode": "hosted",
            "is_external": False,
            "is_public": False,
            "url_private": f"{base}/{filename}",
            "url_private_download": f"{base}/download/{filename}",
            "permalink": f"https://{self.team_domain}.slack.com/files/{user}/{file_id}/{filename}",
        }

    def add_file(
        self, filename: str, content: bytes, *, user: str = "UALICE",
        mimetype: str | None = None, filetype: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Store a file a person shared; return its file object, as in a message's ``files``.

        Its ``url_private`` / ``url_private_download`` are served by this fake, and only
        to a request carrying a valid bot token.

        Args:
            filename: The file's name (its type is guessed from it unless given).
            content: The bytes served for it.
            user: Who shared it.
            mimetype: Overrides the guessed ``mimetype``.
            filetype: Overrides the guessed ``filetype``.
        """
        file_id = self._next_id("F")
        self.shared_files[file_id] = (filename, content)
        return self._shared_file_object(
            file_id, filename, content, user=user, mimetype=mimetype, filetype=filetype
        )

    # ----------------------------------------------------------------- methods: assistant

    def _assistant_set_status(self, params: dict[str, Any]) -> dict[str, Any]:
        channel_id = _require(params, "channel_id")
        thread_ts = _require(params, "thread_ts")
        if "status" not in params:
            _fail_with_messages("invalid_arguments", ["missing required field: status"])
        self.assistant_statuses.append(
            AssistantStatus(
                channel_id=channel_id, thread_ts=thread_ts, status=str(params["status"])
            )
        )
        return {"ok": True}

    def _assistant_ok(self, params: dict[str, Any]) -> dict[str, Any]:
        _require(params, "channel_id")
        _require(params, "thread_ts")
        return {"ok": True}

    # ----------------------------------------------------------------- methods: reactions

    def _reaction_target(self, params: dict[str, Any]) -> tuple[str, str, str]:
        channel = _require(params, "channel", "channel_not_found")
        ts = _require(params, "timestamp", "bad_timestamp")
        name = _require(params, "name", "invalid_name").strip(":")
        return channel, ts, name

    def _reactions_add(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts, name = self._reaction_target(params)
        names = self.reactions.setdefault((channel, ts), [])
        if name in names:
            _fail("already_reacted")
        names.append(name)
        message = self._messages.get(channel, {}).get(ts)
        if message is not None:
            entries = message.setdefault("reactions", [])
            entries.append({"name": name, "users": [self.bot_user_id], "count": 1})
        return {"ok": True}

    def _reactions_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts, name = self._reaction_target(params)
        names = self.reactions.get((channel, ts), [])
        if name not in names:
            _fail("no_reaction")
        names.remove(name)
        message = self._messages.get(channel, {}).get(ts)
        if message is not None:
            message["reactions"] = [r for r in message.get("reactions", []) if r["name"] != name]
            if not message["reactions"]:
                del message["reactions"]
        return {"ok": True}
