"""manifest.yml: valid by Slack's own schema, and exactly the bot scopes Baton needs.

The schema is Slack's published JSON schema for app manifests (MIT licensed),
vendored in ``tests/slack/slack-manifest-schema/`` so the tests need nothing
outside the repository; when the team's ``shared/slack-manifest-schema/`` sits
beside the repository, a test checks that the vendored copy is the same.

Scope coverage works from what the code really does: every ``*.py`` file under
``bot/`` is parsed and its Slack Web API calls are collected (``client.chat_update``
and any other slack_sdk method, ``api_call("method.name")``, the SDK helpers
``files_upload_v2`` and ``chat_stream``, and Bolt's ``say`` / ``say_stream`` /
``set_status`` under ``bot/slack/``). Each call must be in ``METHOD_SCOPES`` and
have one of its scopes declared; each declared scope must be needed by a call, a
subscribed event, the slash command, an enabled feature or a file download. A file
download is a plain HTTP GET of a file object's private URL with the bot token, not a
Web API method: the scanner finds it by the fields it reads (``DOWNLOAD_FIELDS``).
"""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from slack_sdk.web.async_client import AsyncWebClient

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
MANIFEST_PATH = REPO / "manifest.yml"
BOT_DIR = REPO / "bot"
SLACK_DIR = BOT_DIR / "slack"
# tests/slack/test_manifest.py → parents[3] is the directory that holds the repo.
SCHEMA_DIR = HERE.parent / "slack-manifest-schema"
SHARED_SCHEMA_DIR = HERE.parents[3] / "shared" / "slack-manifest-schema"
SCHEMA_PATH = SCHEMA_DIR / "manifest.schema.1.0.0.json"
EXAMPLE_PATH = SCHEMA_DIR / "example.valid.json"

PLACEHOLDER_URL = "https://example.com/slack/events"

# --------------------------------------------------------------------------- tables

NONE: frozenset[str] = frozenset()
HISTORY = frozenset({"channels:history", "groups:history", "im:history", "mpim:history"})

# Web API method → bot scopes that satisfy it (any one of them; empty: no scope).
# From Slack's method reference (docs.slack.dev/reference/methods/...).
METHOD_SCOPES: dict[str, frozenset[str]] = {
    "auth.test": NONE,
    "chat.postMessage": frozenset({"chat:write"}),
    "chat.update": frozenset({"chat:write"}),
    "chat.postEphemeral": frozenset({"chat:write"}),
    "chat.delete": frozenset({"chat:write"}),
    "chat.getPermalink": NONE,
    # slack_sdk's chat_stream helper drives these three.
    "chat.startStream": frozenset({"chat:write"}),
    "chat.appendStream": frozenset({"chat:write"}),
    "chat.stopStream": frozenset({"chat:write"}),
    # Since 2026-03 setStatus takes chat:write (assistant:write still accepted, to be
    # dropped), so the status also works in channel threads.
    "assistant.threads.setStatus": frozenset({"chat:write", "assistant:write"}),
    "assistant.threads.setSuggestedPrompts": frozenset({"assistant:write"}),
    "assistant.threads.setTitle": frozenset({"assistant:write"}),
    "conversations.replies": HISTORY,
    "conversations.history": HISTORY,
    "conversations.info": frozenset({"channels:read", "groups:read", "im:read", "mpim:read"}),
    "conversations.open": frozenset({"channels:manage", "groups:write", "im:write", "mpim:write"}),
    "users.info": frozenset({"users:read"}),
    "users.list": frozenset({"users:read"}),
    "usergroups.users.list": frozenset({"usergroups:read"}),
    "views.open": NONE,
    "views.update": NONE,
    "views.push": NONE,
    "views.publish": NONE,
    # slack_sdk's files_upload_v2 helper drives these two.
    "files.getUploadURLExternal": frozenset({"files:write"}),
    "files.completeUploadExternal": frozenset({"files:write"}),
    "reactions.add": frozenset({"reactions:write"}),
    "reactions.remove": frozenset({"reactions:write"}),
}

# The methods Baton's Slack layer is built to call (DESIGN.md). Stands in for the
# scan while bot/ makes no Web API call at all, and is the reference sample below.
BATON_METHODS: tuple[str, ...] = (
    "auth.test",
    "chat.postMessage",
    "chat.update",
    "chat.postEphemeral",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
    "conversations.replies",
    "users.info",
    "usergroups.users.list",
    "views.open",
    "views.update",
    "views.publish",
    "files.getUploadURLExternal",
    "files.completeUploadExternal",
    "assistant.threads.setStatus",
    "reactions.add",
)

# Events API event → bot scope it needs (None: no scope).
EVENT_SCOPES: dict[str, str | None] = {
    "app_mention": "app_mentions:read",
    "message.im": "im:history",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.mpim": "mpim:history",
    "app_home_opened": None,
    "user_change": "users:read",
    "team_join": "users:read",
    "assistant_thread_started": "assistant:write",
    "assistant_thread_context_changed": "assistant:write",
}

# Enabling Slack's agent / assistant feature adds assistant:write to the app.
FEATURE_SCOPES: dict[str, str] = {
    "agent_view": "assistant:write",
    "assistant_view": "assistant:write",
}

# A file object's private URLs: fetching one with the bot token needs files:read
# (docs.slack.dev/messaging/working-with-files). Code in bot/ that reads these fields
# downloads files.
DOWNLOAD_FIELDS: frozenset[str] = frozenset({"url_private", "url_private_download"})
DOWNLOAD_SCOPES: frozenset[str] = frozenset({"files:read"})
# Fields of a Slack object that only a scope reveals: a user's profile email needs
# users:read.email (docs.slack.dev/reference/scopes/users.read.email). Code in bot/ that
# reads such a field needs its scope.
FIELD_SCOPES: dict[str, frozenset[str]] = {
    **dict.fromkeys(DOWNLOAD_FIELDS, DOWNLOAD_SCOPES),
    "email": frozenset({"users:read.email"}),
}

REQUIRED_EVENTS = {
    "app_mention",
    "message.im",
    "message.channels",
    "message.groups",
    "app_home_opened",
    "user_change",
    "team_join",
}

# slack_sdk helpers that are not one Web API method each.
SDK_HELPERS: dict[str, tuple[str, ...]] = {
    "files_upload_v2": ("files.getUploadURLExternal", "files.completeUploadExternal"),
    "chat_stream": ("chat.startStream", "chat.appendStream", "chat.stopStream"),
}
# Bolt listener utilities (only bot/slack imports Bolt).
BOLT_HELPERS: dict[str, tuple[str, ...]] = {
    "say": ("chat.postMessage",),
    "say_stream": SDK_HELPERS["chat_stream"],
    "set_status": ("assistant.threads.setStatus",),
}
# Every Web API wrapper of slack_sdk's client: chat_postMessage, files_getUploadURLExternal …
SDK_METHODS: frozenset[str] = frozenset(
    name
    for name in dir(AsyncWebClient)
    if not name.startswith("_")
    and name not in {"api_call", "logger", "BASE_URL"}
    and callable(getattr(AsyncWebClient, name))
)

# --------------------------------------------------------------------------- scanner

COMPUTED = "<api_call with a computed method name>"


@dataclass(frozen=True)
class Call:
    method: str  # Web API method, e.g. "chat.update"
    where: str  # "path:line"


# The design reads files attached to messages (DESIGN.md, "Slack surface").
BATON_DOWNLOADS: tuple[Call, ...] = (
    Call("download url_private_download", "DESIGN.md"),
    Call("download email", "DESIGN.md"),  # a commit's Co-authored-by: who asked
)


def _api_method_of(sdk_name: str) -> tuple[str, ...]:
    if sdk_name in SDK_HELPERS:
        return SDK_HELPERS[sdk_name]
    # slack_sdk names its wrappers after the method: dots → underscores, case kept.
    return (sdk_name.replace("_", "."),)


def _str_arg(node: ast.Call) -> str | None:
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    for kw in node.keywords:
        if (
            kw.arg == "api_method"
            and isinstance(kw.value, ast.Constant)
            and isinstance(kw.value.value, str)
        ):
            return kw.value.value
    return None


def scan_source(source: str, name: str = "<sample>", *, bolt: bool = False) -> list[Call]:
    """Web API methods that ``source`` calls, in source order.

    ``bolt``: also count Bolt's listener utilities (``say``, ``set_status`` …).
    """
    found: list[tuple[tuple[int, int], str]] = []
    for node in ast.walk(ast.parse(source, filename=name)):
        methods: tuple[str, ...] = ()
        if isinstance(node, ast.Attribute) and node.attr in SDK_METHODS:
            # client.chat_update(...), also a bare reference such as send = client.chat_update
            methods = _api_method_of(node.attr)
        elif isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if fname == "api_call":
                methods = (_str_arg(node) or COMPUTED,)
            elif bolt and fname in BOLT_HELPERS:
                methods = BOLT_HELPERS[fname]
        if methods:
            position = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
            found += [(position, method) for method in methods]
    found.sort(key=lambda item: item[0])
    return [Call(method, f"{name}:{line}") for (line, _), method in found]


def scan_downloads(source: str, name: str = "<sample>") -> list[Call]:
    """Where ``source`` names a file object's private URL field (a file download)."""
    return sorted(
        (
            Call(f"download {node.value}", f"{name}:{node.lineno}")
            for node in ast.walk(ast.parse(source, filename=name))
            if isinstance(node, ast.Constant) and node.value in FIELD_SCOPES
        ),
        key=lambda call: int(call.where.rsplit(":", 1)[1]),
    )


def download_needs(downloads: Iterable[Call]) -> list[Need]:
    return [Need(f"{d.method} ({d.where})", FIELD_SCOPES[d.method.split()[-1]]) for d in downloads]


def scan_download_tree(root: Path) -> list[Call]:
    calls: list[Call] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        calls += scan_downloads(path.read_text(encoding="utf-8"), rel)
    return calls


def scan_tree(root: Path) -> list[Call]:
    calls: list[Call] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        calls += scan_source(
            path.read_text(encoding="utf-8"), rel, bolt=path.is_relative_to(SLACK_DIR)
        )
    return calls


# --------------------------------------------------------------------------- scope logic


@dataclass(frozen=True)
class Need:
    origin: str  # what needs it: "chat.update (bot/slack/x.py:3)", "event app_mention" …
    scopes: frozenset[str]  # any one of these


def method_needs(calls: Iterable[Call]) -> tuple[list[Need], list[str]]:
    """Needs of the calls, and one problem line per method missing from METHOD_SCOPES."""
    needs: list[Need] = []
    unknown: list[str] = []
    for call in calls:
        if call.method == COMPUTED:
            unknown.append(
                f"{COMPUTED} ({call.where}): pass the method name as a string literal so"
                " its scopes can be checked"
            )
        elif call.method not in METHOD_SCOPES:
            unknown.append(
                f"{call.method} ({call.where}) is not in METHOD_SCOPES: add it with the bot"
                " scopes Slack's method reference lists for it"
            )
        elif METHOD_SCOPES[call.method]:
            needs.append(Need(f"{call.method} ({call.where})", METHOD_SCOPES[call.method]))
    return needs, unknown


def manifest_needs(manifest: Mapping[str, Any]) -> tuple[list[Need], list[str]]:
    """Needs of the subscribed events, the slash commands and the enabled features."""
    needs: list[Need] = []
    problems: list[str] = []
    events = manifest.get("settings", {}).get("event_subscriptions", {}).get("bot_events", [])
    for event in events:
        if event not in EVENT_SCOPES:
            problems.append(f"event {event} is not in EVENT_SCOPES: add it with its scope")
        elif EVENT_SCOPES[event]:
            needs.append(Need(f"event {event}", frozenset({EVENT_SCOPES[event]})))
    features = manifest.get("features", {})
    if features.get("slash_commands"):
        needs.append(Need("slash commands", frozenset({"commands"})))
    for feature, scope in FEATURE_SCOPES.items():
        if feature in features:
            needs.append(Need(f"feature {feature}", frozenset({scope})))
    return needs, problems


def missing_scopes(declared: Iterable[str], needs: Iterable[Need]) -> list[str]:
    """One line per need that no declared scope satisfies."""
    declared = set(declared)
    return [
        f"{need.origin} needs one of {sorted(need.scopes)}; manifest.yml declares none"
        for need in needs
        if not need.scopes & declared
    ]


def extra_scopes(declared: Iterable[str], needs: Iterable[Need]) -> list[str]:
    """The "no more" rule: one line per declared scope that no need would miss."""
    declared, needs = set(declared), list(needs)
    return [
        f"{scope} is declared but nothing needs it (no call in bot/, event, command,"
        " feature or file download): remove it from manifest.yml"
        for scope in sorted(declared)
        if all(need.scopes & (declared - {scope}) for need in needs)
    ]


def scope_problems(declared: Iterable[str], needs: Iterable[Need]) -> list[str]:
    declared, needs = list(declared), list(needs)
    return missing_scopes(declared, needs) + extra_scopes(declared, needs)


def bot_scopes(manifest: Mapping[str, Any]) -> list[str]:
    return list(manifest["oauth_config"]["scopes"]["bot"])


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    data = yaml.safe_load(MANIFEST_PATH.read_text(encoding="utf-8"))
    assert isinstance(data, dict), "manifest.yml must hold a mapping"
    return data


@pytest.fixture(scope="module")
def validator() -> Any:
    if not SCHEMA_PATH.is_file():
        pytest.fail(
            f"Slack's manifest schema is missing: expected the vendored copy at {SCHEMA_PATH}."
        )
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _errors(validator: Any, instance: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    ]


# --------------------------------------------------------------------------- schema


def test_the_vendored_schema_matches_the_shared_one() -> None:
    shared = SHARED_SCHEMA_DIR / SCHEMA_PATH.name
    if not shared.is_file():
        # Only the team's workspace has shared/ beside the repository; a plain clone
        # relies on the vendored copy alone.
        return
    assert json.loads(shared.read_text(encoding="utf-8")) == json.loads(
        SCHEMA_PATH.read_text(encoding="utf-8")
    ), "tests/slack/slack-manifest-schema/ is out of date: copy it again from shared/"


def test_manifest_is_valid_by_slacks_schema(validator: Any, manifest: dict[str, Any]) -> None:
    errors = _errors(validator, manifest)
    assert not errors, "manifest.yml breaks Slack's schema:\n" + "\n".join(errors)


def test_the_validator_accepts_slacks_own_example(validator: Any) -> None:
    if not EXAMPLE_PATH.is_file():
        pytest.fail(f"Slack's example manifest is missing: expected {EXAMPLE_PATH}")
    example = json.loads(EXAMPLE_PATH.read_text(encoding="utf-8"))
    assert _errors(validator, example) == []


@pytest.mark.parametrize(
    ("label", "breakage"),
    [
        ("unknown top-level key", lambda m: m.update(unknown_key=True)),
        ("scope that is not a string", lambda m: m["oauth_config"]["scopes"]["bot"].append(42)),
        (
            "slash command without /",
            lambda m: m["features"]["slash_commands"][0].update(command="tasks"),
        ),
        ("no display name", lambda m: m.pop("display_information")),
        (
            "interactivity without is_enabled",
            lambda m: m["settings"]["interactivity"].pop("is_enabled"),
        ),
    ],
)
def test_the_validator_rejects_a_broken_manifest(
    validator: Any, manifest: dict[str, Any], label: str, breakage: Any
) -> None:
    broken = copy.deepcopy(manifest)
    breakage(broken)
    assert _errors(validator, broken), f"a manifest with {label} passed validation"


# --------------------------------------------------------------------------- content


def test_manifest_has_what_baton_serves(manifest: dict[str, Any]) -> None:
    features = manifest["features"]
    settings = manifest["settings"]

    assert manifest["display_information"]["name"] == "Baton"
    assert features["bot_user"] == {"display_name": "baton", "always_online": True}
    assert features["app_home"] == {
        "home_tab_enabled": True,
        "messages_tab_enabled": True,  # DMs to the bot
        "messages_tab_read_only_enabled": False,
    }

    commands = {c["command"]: c for c in features["slash_commands"]}
    assert set(commands) == {"/tasks"}
    tasks = commands["/tasks"]
    assert tasks["usage_hint"] == "[task-id | schedule | schedules]"
    assert tasks["should_escape"] is False
    assert tasks["description"]

    events = settings["event_subscriptions"]["bot_events"]
    assert REQUIRED_EVENTS <= set(events), f"missing events: {REQUIRED_EVENTS - set(events)}"
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["socket_mode_enabled"] is True
    assert settings["org_deploy_enabled"] is False
    assert settings["token_rotation_enabled"] is False


def test_every_http_url_is_the_one_placeholder_docs_say_to_replace(
    manifest: dict[str, Any],
) -> None:
    # HTTP mode serves events, commands and interactivity on POST /slack/events.
    urls = [
        manifest["settings"]["event_subscriptions"]["request_url"],
        manifest["settings"]["interactivity"]["request_url"],
        *(c["url"] for c in manifest["features"]["slash_commands"]),
    ]
    assert urls == [PLACEHOLDER_URL] * 3
    guide = (REPO / "docs" / "slack-app.md").read_text(encoding="utf-8")
    assert PLACEHOLDER_URL in guide and "https://YOUR-HOST/slack/events" in guide


def test_scopes_are_listed_once(manifest: dict[str, Any]) -> None:
    scopes = bot_scopes(manifest)
    assert len(scopes) == len(set(scopes)), "a bot scope is listed twice"
    assert "user" not in manifest["oauth_config"]["scopes"], "Baton uses no user token"


# --------------------------------------------------------------------------- scope coverage


def test_every_web_api_call_in_bot_is_known_and_has_its_scope(manifest: dict[str, Any]) -> None:
    needs, problems = method_needs(scan_tree(BOT_DIR))
    needs += download_needs(scan_download_tree(BOT_DIR))
    problems += missing_scopes(bot_scopes(manifest), needs)
    assert not problems, "\n".join(problems)


def test_manifest_declares_no_scope_that_nothing_needs(manifest: dict[str, Any]) -> None:
    calls = scan_tree(BOT_DIR)
    if not calls:
        # bot/ makes no Web API call yet (the Slack layer is not written): judge the
        # manifest against the methods the design says it calls.
        calls = [Call(m, "BATON_METHODS") for m in BATON_METHODS]
    needs, problems = method_needs(calls)
    needs += download_needs(scan_download_tree(BOT_DIR) or BATON_DOWNLOADS)
    event_needs, event_problems = manifest_needs(manifest)
    problems += event_problems + scope_problems(bot_scopes(manifest), needs + event_needs)
    assert not problems, "\n".join(problems)


def test_the_design_methods_need_exactly_the_declared_scopes(manifest: dict[str, Any]) -> None:
    # When bot/ calls exactly the methods of the design, the manifest is complete and minimal.
    needs, unknown = method_needs(Call(m, "BATON_METHODS") for m in BATON_METHODS)
    needs += download_needs(BATON_DOWNLOADS)
    assert unknown == []
    event_needs, event_problems = manifest_needs(manifest)
    assert event_problems == []
    assert scope_problems(bot_scopes(manifest), needs + event_needs) == []


# --------------------------------------------------------------------------- the scanner itself

SAMPLE = """
from slack_sdk.web.async_client import AsyncWebClient


async def post(client: AsyncWebClient, channel: str, ts: str) -> None:
    me = await client.auth_test()
    await client.chat_postMessage(channel=channel, thread_ts=ts, text="hi")
    await client.chat_update(channel=channel, ts=ts, text="edited")
    await client.api_call("chat.postEphemeral", json={"channel": channel})
    await client.api_call(api_method="conversations.replies", params={"ts": ts})
    await client.users_info(user=me["user_id"])
    await client.usergroups_users_list(usergroup="S1")
    await client.views_open(trigger_id="t", view={})
    await client.views_update(view_id="V1", view={})
    await client.views_publish(user_id="U1", view={})
    await client.files_upload_v2(channel=channel, content="long", filename="answer.md")
    streamer = await client.chat_stream(channel=channel, thread_ts=ts)
    await client.assistant_threads_setStatus(channel_id=channel, thread_ts=ts, status="x")
    send = client.chat_update  # a bare reference counts too
    # client.reactions_add(...) in a comment does not count
    text = "client.search_messages( in a string does not count"
    view = {}
    view.update(blocks=[])  # not a Slack method
    await say("not a Bolt listener here")
    await client.reactions_add(channel=channel, timestamp=ts, name="eyes")
    url = {}.get("url_private_download")  # a file download: not a Web API call
    email = {}.get("email")  # a profile's email: a field only users:read.email shows


def say(text: str) -> None:
    print(text)
"""

SAMPLE_METHODS = {
    "auth.test",
    "chat.postMessage",
    "chat.update",
    "chat.postEphemeral",
    "conversations.replies",
    "users.info",
    "usergroups.users.list",
    "views.open",
    "views.update",
    "views.publish",
    "files.getUploadURLExternal",
    "files.completeUploadExternal",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
    "assistant.threads.setStatus",
    "reactions.add",
}


def test_scanner_finds_every_call_form_and_nothing_else() -> None:
    calls = scan_source(SAMPLE)
    assert {c.method for c in calls} == SAMPLE_METHODS
    assert SAMPLE_METHODS == set(BATON_METHODS)
    bare = [c for c in calls if c.where == "<sample>:19"]
    assert [c.method for c in bare] == ["chat.update"]


def test_scanner_sees_bolt_utilities_only_where_bolt_is_used() -> None:
    source = (
        "async def on_mention(say, say_stream, set_status, context):\n"
        "    await set_status('is working…')\n"
        "    await say(text='hi', thread_ts='1.2')\n"
        "    streamer = await say_stream()\n"
        "    await context.say('again')\n"
    )
    found = [c.method for c in scan_source(source, bolt=True)]
    assert sorted(found) == sorted(
        [
            "assistant.threads.setStatus",
            "chat.postMessage",
            "chat.startStream",
            "chat.appendStream",
            "chat.stopStream",
            "chat.postMessage",
        ]
    )
    assert scan_source(source) == []


def test_a_sample_calling_the_design_methods_passes_the_manifest(
    manifest: dict[str, Any],
) -> None:
    needs, unknown = method_needs(scan_source(SAMPLE))
    needs += download_needs(scan_downloads(SAMPLE))
    event_needs, _ = manifest_needs(manifest)
    assert unknown == []
    assert scope_problems(bot_scopes(manifest), needs + event_needs) == []


def test_an_unknown_method_or_a_missing_scope_is_reported(manifest: dict[str, Any]) -> None:
    source = (
        "await client.search_messages(query='x')\n"
        "await client.conversations_info(channel='C1')\n"
        "await client.api_call(method_name)\n"
    )
    needs, unknown = method_needs(scan_source(source, "bot/slack/x.py"))
    assert unknown == [
        "search.messages (bot/slack/x.py:1) is not in METHOD_SCOPES: add it with the bot"
        " scopes Slack's method reference lists for it",
        f"{COMPUTED} (bot/slack/x.py:3): pass the method name as a string literal so its"
        " scopes can be checked",
    ]
    problems = scope_problems(bot_scopes(manifest), needs)
    assert (
        "conversations.info (bot/slack/x.py:2) needs one of ['channels:read', 'groups:read',"
        " 'im:read', 'mpim:read']; manifest.yml declares none"
    ) in problems


def test_an_extra_scope_is_reported(manifest: dict[str, Any]) -> None:
    needs, _ = method_needs(Call(m, "BATON_METHODS") for m in BATON_METHODS)
    needs += download_needs(BATON_DOWNLOADS)
    event_needs, _ = manifest_needs(manifest)
    problems = scope_problems(
        [*bot_scopes(manifest), "im:write", "pins:write"], needs + event_needs
    )
    assert [p.split(" ", 1)[0] for p in problems] == ["im:write", "pins:write"]


def test_an_unknown_event_is_reported(manifest: dict[str, Any]) -> None:
    changed = copy.deepcopy(manifest)
    changed["settings"]["event_subscriptions"]["bot_events"].append("reaction_added")
    _, problems = manifest_needs(changed)
    assert problems == ["event reaction_added is not in EVENT_SCOPES: add it with its scope"]


def test_a_file_download_needs_files_read_and_only_it_does(manifest: dict[str, Any]) -> None:
    source = (
        "url = file.get('url_private_download') or file.get('url_private')\n"
        "name = file.get('name')  # url_private is not read here\n"
    )
    downloads = scan_downloads(source, "bot/slack/x.py")
    assert downloads == [
        Call("download url_private_download", "bot/slack/x.py:1"),
        Call("download url_private", "bot/slack/x.py:1"),
    ]
    needs, _ = method_needs(Call(m, "BATON_METHODS") for m in BATON_METHODS)
    event_needs, _ = manifest_needs(manifest)
    declared = bot_scopes(manifest)
    # Without the download, files:read is extra; without files:read, the download misses it.
    assert scope_problems(declared, needs + event_needs)[0].startswith("files:read is declared")
    without = [s for s in declared if s != "files:read"]
    assert missing_scopes(without, download_needs(downloads)) == [
        "download url_private_download (bot/slack/x.py:1) needs one of ['files:read'];"
        " manifest.yml declares none",
        "download url_private (bot/slack/x.py:1) needs one of ['files:read'];"
        " manifest.yml declares none",
    ]
    assert scan_download_tree(BOT_DIR), "bot/ reads attached files: the scan should find it"
