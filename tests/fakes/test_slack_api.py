"""Tests of the fake Slack Web API, driven through the real ``AsyncWebClient``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_api import FakeSlackAPI, RecordedCall
from tests.fakes.slack_limits import SLACK_TIERS, TIER_PER_MINUTE, burst_capacity


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI() as server:
        yield server


@pytest.fixture
def client(fake: FakeSlackAPI) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=fake.url)


async def slack_error(call: Any) -> SlackApiError:
    """Await a client call expected to fail and return the SlackApiError."""
    with pytest.raises(SlackApiError) as info:
        await call
    return info.value


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


# --------------------------------------------------------------------------- lifecycle


async def test_url_format_and_context_manager() -> None:
    server = FakeSlackAPI()
    with pytest.raises(RuntimeError):
        _ = server.url
    async with server as fake:
        assert fake.url.startswith("http://127.0.0.1:")
        assert fake.url.endswith("/api/")
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
        assert (await client.auth_test())["ok"] is True
    await server.stop()  # idempotent


async def test_start_stop_explicit() -> None:
    fake = FakeSlackAPI()
    await fake.start()
    try:
        with pytest.raises(RuntimeError):
            await fake.start()
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
        assert (await client.api_test())["ok"] is True
    finally:
        await fake.stop()


# --------------------------------------------------------------------------- auth


async def test_auth_test(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    resp = await client.auth_test()
    assert resp["team_id"] == "T0001"
    assert resp["user_id"] == "UBOT"
    assert resp["bot_id"] == "BBOT"
    assert resp["url"].startswith("https://")
    assert resp["team"] and resp["user"]
    assert fake.calls == [
        RecordedCall(method="auth.test", params={}, token="xoxb-test", http_method="POST")
    ]


async def test_not_authed(fake: FakeSlackAPI) -> None:
    client = AsyncWebClient(base_url=fake.url)
    err = await slack_error(client.auth_test())
    assert err.response["error"] == "not_authed"
    assert err.response.status_code == 200
    assert fake.calls[0].token is None
    assert fake.calls[0].error == "not_authed"
    assert not fake.calls[0].ok


async def test_invalid_auth_bad_prefix(fake: FakeSlackAPI) -> None:
    client = AsyncWebClient(token="bogus-token", base_url=fake.url)
    err = await slack_error(client.chat_postMessage(channel="C1", text="hi"))
    assert err.response["error"] == "invalid_auth"
    assert fake.channel_messages("C1") == []


async def test_revoked_tokens() -> None:
    async with FakeSlackAPI(revoked_tokens={"xoxb-revoked"}) as fake:
        client = AsyncWebClient(token="xoxb-revoked", base_url=fake.url)
        err = await slack_error(client.auth_test())
        assert err.response["error"] == "invalid_auth"
        fake.revoke_token("xoxp-later")
        client = AsyncWebClient(token="xoxp-later", base_url=fake.url)
        assert (await slack_error(client.auth_test())).response["error"] == "invalid_auth"
        client = AsyncWebClient(token="xapp-fine", base_url=fake.url)
        assert (await client.auth_test())["ok"] is True


async def test_token_in_form_field(fake: FakeSlackAPI) -> None:
    client = AsyncWebClient(base_url=fake.url)
    resp = await client.api_call("auth.test", data={"token": "xoxb-form"})
    assert resp["ok"] is True
    assert fake.calls[0].token == "xoxb-form"
    assert "token" not in fake.calls[0].params


# --------------------------------------------------------------------------- messages


async def test_post_message_and_read_thread(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    parent = await client.chat_postMessage(channel="C1", text="parent")
    assert parent["channel"] == "C1"
    assert parent["message"]["text"] == "parent"
    assert parent["message"]["user"] == "UBOT"
    assert parent["message"]["bot_id"] == "BBOT"
    reply = await client.chat_postMessage(
        channel="C1", thread_ts=parent["ts"], text="reply", blocks=[section("*reply*")]
    )
    assert float(reply["ts"]) > float(parent["ts"])
    assert reply["message"]["thread_ts"] == parent["ts"]

    resp = await client.conversations_replies(channel="C1", ts=parent["ts"])
    messages = resp["messages"]
    assert [m["text"] for m in messages] == ["parent", "reply"]
    assert [m["ts"] for m in messages] == [parent["ts"], reply["ts"]]
    assert resp["has_more"] is False
    assert messages[0]["reply_count"] == 1
    assert messages[0]["thread_ts"] == parent["ts"]
    assert messages[1]["blocks"] == [section("*reply*")]
    assert messages[1]["user"] == "UBOT"

    # A reply ts resolves to the whole thread.
    again = await client.conversations_replies(channel="C1", ts=reply["ts"])
    assert [m["ts"] for m in again["messages"]] == [parent["ts"], reply["ts"]]


async def test_ts_format_is_unique_and_increasing(client: AsyncWebClient) -> None:
    stamps = [(await client.chat_postMessage(channel="C1", text=str(i)))["ts"] for i in range(3)]
    assert stamps[0] == "1700000000.000100"
    for ts in stamps:
        seconds, _, micros = ts.partition(".")
        assert seconds.isdigit() and len(micros) == 6
    assert len(set(stamps)) == 3
    assert sorted(stamps, key=float) == stamps


async def test_seeded_thread(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    root = fake.add_message("C9", "please do the thing", "U1", ts="1710000000.000100")
    fake.add_message("C9", "also this", "U2", thread_ts=root)
    posted = await client.chat_postMessage(channel="C9", thread_ts=root, text="on it")
    assert float(posted["ts"]) > 1710000000.0001

    resp = await client.conversations_replies(channel="C9", ts=root)
    assert [(m["user"], m["text"]) for m in resp["messages"]] == [
        ("U1", "please do the thing"),
        ("U2", "also this"),
        ("UBOT", "on it"),
    ]
    assert resp["messages"][0]["reply_users"] == ["U2", "UBOT"]
    assert "bot_id" not in resp["messages"][0]


async def test_replies_pagination_and_oldest(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    root = fake.add_message("C1", "root", "U1")
    replies = [fake.add_message("C1", f"r{i}", "U1", thread_ts=root) for i in range(5)]
    page1 = await client.conversations_replies(channel="C1", ts=root, limit=4)
    assert len(page1["messages"]) == 4 and page1["has_more"] is True
    cursor = page1["response_metadata"]["next_cursor"]
    page2 = await client.conversations_replies(channel="C1", ts=root, limit=4, cursor=cursor)
    assert [m["text"] for m in page2["messages"]] == ["r3", "r4"]
    assert page2["has_more"] is False

    newer = await client.conversations_replies(channel="C1", ts=root, oldest=replies[2])
    assert [m["text"] for m in newer["messages"]] == ["root", "r3", "r4"]


async def test_replies_unknown_thread(client: AsyncWebClient) -> None:
    err = await slack_error(client.conversations_replies(channel="C1", ts="1.000001"))
    assert err.response["error"] == "thread_not_found"


async def test_history_lists_top_level_newest_first(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    first = fake.add_message("C1", "one", "U1")
    fake.add_message("C1", "reply", "U1", thread_ts=first)
    fake.add_message("C1", "two", "U1")
    resp = await client.conversations_history(channel="C1")
    assert [m["text"] for m in resp["messages"]] == ["two", "one"]


async def test_post_message_requires_channel_and_content(client: AsyncWebClient) -> None:
    err = await slack_error(client.api_call("chat.postMessage", json={"text": "hi"}))
    assert err.response["error"] == "invalid_arguments"
    err = await slack_error(client.api_call("chat.postMessage", json={"channel": "C1"}))
    assert err.response["error"] == "no_text"
    err = await slack_error(
        client.api_call("chat.postMessage", json={"channel": "C1", "text": "", "blocks": []})
    )
    assert err.response["error"] == "no_text"
    attachments = [{"text": "x", "fallback": "x"}]
    ok = await client.chat_postMessage(channel="C1", attachments=attachments)
    assert ok["message"]["attachments"] == attachments


async def test_form_encoded_blocks_are_decoded(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    blocks = [section("from a form")]
    resp = await client.api_call(
        "chat.postMessage", data={"channel": "C1", "text": "t", "blocks": json.dumps(blocks)}
    )
    assert resp["message"]["blocks"] == blocks
    assert fake.calls_to("chat.postMessage")[0].params["blocks"] == blocks

    err = await slack_error(
        client.api_call("chat.postMessage", data={"channel": "C1", "blocks": "[not json"})
    )
    assert err.response["error"] == "invalid_blocks_format"


# --------------------------------------------------------------------------- limits


async def test_text_limit(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    assert (await client.chat_postMessage(channel="C1", text="x" * 40_000))["ok"]
    err = await slack_error(client.chat_postMessage(channel="C1", text="x" * 40_001))
    assert err.response["error"] == "msg_too_long"
    assert len(fake.channel_messages("C1")) == 1


async def test_block_count_limit(client: AsyncWebClient) -> None:
    assert (await client.chat_postMessage(channel="C1", text="t", blocks=[section("b")] * 50))["ok"]
    err = await slack_error(
        client.chat_postMessage(channel="C1", text="t", blocks=[section("b")] * 51)
    )
    assert err.response["error"] == "invalid_blocks"
    assert any("/blocks" in e for e in err.response["errors"])


async def test_section_text_limit(client: AsyncWebClient) -> None:
    ok = await client.chat_postMessage(channel="C1", text="t", blocks=[section("s" * 3000)])
    assert ok["ok"]
    err = await slack_error(
        client.chat_postMessage(channel="C1", text="t", blocks=[section("s" * 3001)])
    )
    assert err.response["error"] == "invalid_blocks"
    assert "/blocks/0/text/text" in err.response["errors"][0]
    assert err.response["response_metadata"]["messages"][0].startswith("[ERROR]")


async def test_markdown_and_header_limits(client: AsyncWebClient) -> None:
    markdown_ok = [{"type": "markdown", "text": "m" * 12_000}]
    assert (await client.chat_postMessage(channel="C1", text="t", blocks=markdown_ok))["ok"]
    too_long = [{"type": "markdown", "text": "m" * 12_001}]
    err = await slack_error(client.chat_postMessage(channel="C1", text="t", blocks=too_long))
    assert err.response["error"] == "invalid_blocks"
    cumulative = [{"type": "markdown", "text": "m" * 7_000}] * 2
    err = await slack_error(client.chat_postMessage(channel="C1", text="t", blocks=cumulative))
    assert err.response["error"] == "invalid_blocks"

    header_ok = [{"type": "header", "text": {"type": "plain_text", "text": "h" * 150}}]
    assert (await client.chat_postMessage(channel="C1", text="t", blocks=header_ok))["ok"]
    header_long = [{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}]
    err = await slack_error(client.chat_postMessage(channel="C1", text="t", blocks=header_long))
    assert err.response["error"] == "invalid_blocks"


async def test_other_block_checks(client: AsyncWebClient) -> None:
    bad: list[list[dict[str, Any]]] = [
        [section("")],
        [{"type": "section"}],
        [{"type": "header", "text": {"type": "mrkdwn", "text": "h"}}],
        [{"text": "no type"}],
        [{**section("a"), "block_id": "x"}, {**section("b"), "block_id": "x"}],
        [{"type": "context", "elements": []}],
    ]
    for blocks in bad:
        err = await slack_error(client.chat_postMessage(channel="C1", text="t", blocks=blocks))
        assert err.response["error"] == "invalid_blocks", blocks


# --------------------------------------------------------------------------- update/delete


async def test_update_delete_and_ephemeral(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C1", text="v1", blocks=[section("v1")])
    updated = await client.chat_update(channel="C1", ts=posted["ts"], text="v2")
    assert updated["ts"] == posted["ts"]
    assert updated["message"]["text"] == "v2"
    assert updated["message"]["blocks"] == [section("v1")]  # blocks kept when omitted
    await client.api_call(
        "chat.update", json={"channel": "C1", "ts": posted["ts"], "blocks": [section("v3")]}
    )
    stored = fake.get_message("C1", posted["ts"])
    assert stored is not None and stored["blocks"] == [section("v3")] and stored["text"] == "v2"
    assert stored["edited"]["user"] == "UBOT"

    err = await slack_error(
        client.chat_update(channel="C1", ts=posted["ts"], text="t", blocks=[section("x" * 3001)])
    )
    assert err.response["error"] == "invalid_blocks"
    err = await slack_error(client.chat_update(channel="C1", ts="1.000001", text="x"))
    assert err.response["error"] == "message_not_found"
    err = await slack_error(client.chat_update(channel="C1", ts=posted["ts"], text="x" * 40_001))
    assert err.response["error"] == "msg_too_long"
    user_ts = fake.add_message("C1", "mine", "U1")
    err = await slack_error(client.chat_update(channel="C1", ts=user_ts, text="x"))
    assert err.response["error"] == "cant_update_message"

    assert (await client.chat_delete(channel="C1", ts=posted["ts"]))["ok"]
    assert fake.get_message("C1", posted["ts"]) is None
    err = await slack_error(client.chat_delete(channel="C1", ts=posted["ts"]))
    assert err.response["error"] == "message_not_found"

    eph = await client.chat_postEphemeral(channel="C1", user="U1", text="psst")
    assert eph["message_ts"]
    assert fake.ephemerals[0]["user"] == "U1"
    assert fake.ephemerals[0]["text"] == "psst"
    assert fake.ephemerals[0]["ts"] == eph["message_ts"]
    err = await slack_error(client.api_call("chat.postEphemeral", json={"channel": "C1"}))
    assert err.response["error"] == "invalid_arguments"
    assert [m["text"] for m in fake.channel_messages("C1")] == ["mine"]


# --------------------------------------------------------------------------- users


async def test_users_info(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    fake.add_user("U1", "alice", real_name="Alice Liddell", display_name="ali")
    resp = await client.users_info(user="U1")
    user = resp["user"]
    assert user["id"] == "U1"
    assert user["name"] == "alice"
    assert user["real_name"] == "Alice Liddell"
    assert user["profile"]["display_name"] == "ali"
    assert user["profile"]["real_name"] == "Alice Liddell"
    assert fake.calls_to("users.info")[0].http_method == "GET"

    bot = await client.users_info(user="UBOT")
    assert bot["user"]["is_bot"] is True

    err = await slack_error(client.users_info(user="U404"))
    assert err.response["error"] == "user_not_found"


async def test_users_info_guests_and_other_teams(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    plain = (await client.users_info(user="UBOT"))["user"]
    assert plain["is_restricted"] is False
    assert plain["is_ultra_restricted"] is False
    assert plain["team_id"] == fake.team_id
    assert "enterprise_user" not in plain

    fake.add_user("U1", "guest", is_restricted=True)
    fake.add_user("U2", "single", is_ultra_restricted=True)
    fake.add_user("U3", "partner", team_id="T0099")
    fake.add_user("W4", "grid", team_id="T0002", enterprise_id="E1")

    guest = (await client.users_info(user="U1"))["user"]
    assert (guest["is_restricted"], guest["is_ultra_restricted"]) == (True, False)
    assert guest["team_id"] == fake.team_id
    single = (await client.users_info(user="U2"))["user"]
    assert (single["is_restricted"], single["is_ultra_restricted"]) == (False, True)
    partner = (await client.users_info(user="U3"))["user"]
    assert partner["team_id"] == "T0099"
    assert partner["profile"]["team"] == "T0099"
    assert "enterprise_user" not in partner
    grid = (await client.users_info(user="W4"))["user"]
    assert grid["team_id"] == "T0002"
    assert grid["enterprise_user"]["enterprise_id"] == "E1"
    assert grid["enterprise_user"]["id"] == "W4"
    assert grid["enterprise_user"]["teams"] == ["T0002"]


async def test_usergroups_users_list(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    fake.add_usergroup("S1", ["U1", "U2"])
    resp = await client.usergroups_users_list(usergroup="S1")
    assert resp["users"] == ["U1", "U2"]
    err = await slack_error(client.usergroups_users_list(usergroup="S404"))
    assert err.response["error"] == "no_such_subteam"


# --------------------------------------------------------------------------- views


async def test_views(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    modal = {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Baton"},
        "blocks": [section("hello")],
    }
    opened = await client.views_open(trigger_id="123.456", view=modal)
    view_id = opened["view"]["id"]
    assert view_id.startswith("V")
    assert opened["view"]["blocks"] == [section("hello")]

    modal2 = {**modal, "blocks": [section("updated")]}
    updated = await client.views_update(view_id=view_id, view=modal2)
    assert updated["view"]["id"] == view_id
    assert fake.views[view_id]["blocks"] == [section("updated")]
    err = await slack_error(client.views_update(view_id="V404", view=modal2))
    assert err.response["error"] == "not_found"

    home = {"type": "home", "blocks": [section("home")] * 100}
    published = await client.views_publish(user_id="U1", view=home)
    assert published["view"]["type"] == "home"
    assert fake.home_views["U1"]["id"] == published["view"]["id"]

    err = await slack_error(
        client.views_publish(user_id="U1", view={"type": "home", "blocks": [section("h")] * 101})
    )
    assert err.response["error"] == "invalid_arguments"
    too_many = {**modal, "blocks": [section("b")] * 101}
    err = await slack_error(client.views_open(trigger_id="1", view=too_many))
    assert err.response["error"] == "invalid_arguments"
    err = await slack_error(client.views_open(trigger_id="1", view=home))
    assert err.response["error"] == "invalid_arguments"
    long_title = {**modal, "title": {"type": "plain_text", "text": "t" * 25}}
    err = await slack_error(client.views_open(trigger_id="1", view=long_title))
    assert err.response["error"] == "invalid_arguments"


# --------------------------------------------------------------------------- files


async def test_files_upload_v2_end_to_end(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    root = fake.add_message("C1", "make a report", "U1")
    resp = await client.files_upload_v2(
        channel="C1",
        thread_ts=root,
        content="# Report\n\nAll good ✓",
        filename="x.md",
        title="Report",
        initial_comment="here you go",
    )
    assert resp["ok"] is True
    assert resp["file"]["id"] == fake.files[0].id
    assert resp["file"]["name"] == "x.md"

    uploaded = fake.files[0]
    assert uploaded.filename == "x.md"
    assert uploaded.title == "Report"
    assert uploaded.content == "# Report\n\nAll good ✓".encode()
    assert uploaded.text == "# Report\n\nAll good ✓"
    assert uploaded.channel == "C1"
    assert uploaded.thread_ts == root
    assert uploaded.initial_comment == "here you go"
    assert [c.method for c in fake.calls] == [
        "files.getUploadURLExternal",
        "files.completeUploadExternal",
    ]

    thread = fake.thread_messages("C1", root)
    assert thread[-1]["files"][0]["id"] == uploaded.id
    assert thread[-1]["text"] == "here you go"


async def test_complete_upload_unknown_file(client: AsyncWebClient) -> None:
    err = await slack_error(
        client.files_completeUploadExternal(files=[{"id": "F404", "title": "x"}], channel_id="C1")
    )
    assert err.response["error"] == "file_not_found"


# --------------------------------------------------------------------------- assistant, reactions


async def test_assistant_status_and_reactions(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    resp = await client.assistant_threads_setStatus(
        channel_id="D1", thread_ts="1700000000.000100", status="is thinking..."
    )
    assert resp["ok"] is True
    assert fake.assistant_status("D1", "1700000000.000100") == "is thinking..."
    assert fake.assistant_statuses[0].status == "is thinking..."

    ts = fake.add_message("C1", "hi", "U1")
    assert (await client.reactions_add(channel="C1", timestamp=ts, name="eyes"))["ok"]
    assert fake.reactions[("C1", ts)] == ["eyes"]
    stored = fake.get_message("C1", ts)
    assert stored is not None and stored["reactions"][0]["name"] == "eyes"
    err = await slack_error(client.reactions_add(channel="C1", timestamp=ts, name="eyes"))
    assert err.response["error"] == "already_reacted"
    # Messages the fake has never seen (e.g. from events) can be reacted to as well.
    assert (await client.reactions_add(channel="C1", timestamp="1.000001", name="ok"))["ok"]


async def test_unknown_method(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    err = await slack_error(client.api_call("nope.never"))
    assert err.response.status_code == 200
    assert err.response["error"] == "unknown_method"
    assert fake.calls_to("nope.never")[0].error == "unknown_method"


async def test_register_custom_handler(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    fake.register("conversations.info", lambda p: {"channel": {"id": p["channel"]}})
    resp = await client.conversations_info(channel="C7")
    assert resp["channel"]["id"] == "C7"
    fake.register("conversations.info", None)
    err = await slack_error(client.conversations_info(channel="C7"))
    assert err.response["error"] == "unknown_method"


# --------------------------------------------------------------------------- failure injection


async def test_fail_next_429_is_retried_by_rate_limit_handler(fake: FakeSlackAPI) -> None:
    fake.fail_next("chat.postMessage", retry_after=1)
    client = AsyncWebClient(
        token="xoxb-test",
        base_url=fake.url,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)],
    )
    resp = await client.chat_postMessage(channel="C1", text="eventually")
    assert resp["ok"] is True
    calls = fake.calls_to("chat.postMessage")
    assert [c.failed for c in calls] == [True, False]
    assert calls[0].status == 429 and calls[0].error == "ratelimited"
    assert calls[0].params["text"] == "eventually"
    assert [m["text"] for m in fake.channel_messages("C1")] == ["eventually"]


async def test_fail_next_429_without_retry_handler(
    fake: FakeSlackAPI, client: AsyncWebClient
) -> None:
    fake.fail_next("chat.update", retry_after=7, times=2)
    ts = (await client.chat_postMessage(channel="C1", text="v1"))["ts"]
    for _ in range(2):
        err = await slack_error(client.chat_update(channel="C1", ts=ts, text="v2"))
        assert err.response.status_code == 429
        assert err.response["error"] == "ratelimited"
        assert err.response.headers["Retry-After"] == "7"
    assert (await client.chat_update(channel="C1", ts=ts, text="v2"))["ok"]
    assert [c.failed for c in fake.calls_to("chat.update")] == [True, True, False]


async def test_fail_next_status_and_error(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    fake.fail_next("auth.test", status=500, retry_after=None)
    fake.fail_next("auth.test", error="team_access_not_granted")
    err = await slack_error(client.auth_test())
    assert err.response.status_code == 500
    assert "Retry-After" not in err.response.headers
    err = await slack_error(client.auth_test())
    assert err.response.status_code == 200
    assert err.response["error"] == "team_access_not_granted"
    assert (await client.auth_test())["ok"] is True
    assert [c.failed for c in fake.calls] == [True, True, False]


async def test_rate_limit_is_deterministic_with_injected_clock() -> None:
    now = [100.0]
    async with FakeSlackAPI(clock=lambda: now[0]) as fake:
        fake.rate_limit("chat.update", per_second=1, per_channel=True)
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
        ts = (await client.chat_postMessage(channel="C1", text="v"))["ts"]
        ts2 = (await client.chat_postMessage(channel="C2", text="v"))["ts"]
        assert (await client.chat_update(channel="C1", ts=ts, text="a"))["ok"]
        err = await slack_error(client.chat_update(channel="C1", ts=ts, text="b"))
        assert err.response.status_code == 429
        assert err.response.headers["Retry-After"] == "1"
        assert (await client.chat_update(channel="C2", ts=ts2, text="b"))["ok"]
        now[0] += 1.0
        assert (await client.chat_update(channel="C1", ts=ts, text="c"))["ok"]
        assert [c.failed for c in fake.calls_to("chat.update")] == [False, True, False, False]
        fake.rate_limit("chat.update", None)
        assert (await client.chat_update(channel="C1", ts=ts, text="d"))["ok"]


async def test_latency(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    fake.set_latency("auth.test", 0.2)
    started = time.monotonic()
    await client.auth_test()
    assert time.monotonic() - started >= 0.2
    fake.set_latency("auth.test", 0)
    started = time.monotonic()
    await client.auth_test()
    assert time.monotonic() - started < 0.2


async def test_latency_allows_timeouts(fake: FakeSlackAPI) -> None:
    fake.set_latency("*", 5)
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url, timeout=1)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(client.auth_test(), timeout=0.1)


# --------------------------------------------------------------------------- reset


async def test_calls_to_clear_calls_and_reset(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    fake.add_user("U1", "alice")
    await client.chat_postMessage(channel="C1", text="a")
    await client.auth_test()
    assert [c.method for c in fake.calls_to("chat.postMessage")] == ["chat.postMessage"]

    fake.clear_calls()
    assert fake.calls == []
    assert len(fake.channel_messages("C1")) == 1

    fake.fail_next("auth.test", error="boom")
    fake.reset()
    assert fake.calls == [] and fake.channel_messages("C1") == []
    assert "U1" not in fake.users and "UBOT" in fake.users
    assert (await client.auth_test())["ok"] is True
    assert (await client.chat_postMessage(channel="C1", text="a"))["ts"] == "1700000000.000100"


# --------------------------------------------------------------------------- chat streaming


class Clock:
    """A settable monotonic clock for the fake."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def clocked() -> AsyncIterator[tuple[FakeSlackAPI, Clock]]:
    clock = Clock()
    async with FakeSlackAPI(clock=clock, stream_ttl_s=60.0) as server:
        server.add_user("UALICE", "alice")
        yield server, clock


def recipient() -> dict[str, str]:
    return {"recipient_user_id": "UALICE", "recipient_team_id": "T0001"}


async def test_stream_start_append_stop(clocked: tuple[FakeSlackAPI, Clock]) -> None:
    fake, clock = clocked
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
    parent = fake.add_message("C1", "question", "UALICE")
    resp = await client.chat_startStream(
        channel="C1", thread_ts=parent, markdown_text="Hello", task_display_mode="plan",
        **recipient(),
    )  # fmt: skip
    assert resp["ok"] is True and resp["channel"] == "C1"
    ts = resp["ts"]
    assert fake.stream_state("C1", ts) == "streaming"
    call = fake.calls_to("chat.startStream")[0]
    assert call.params["markdown_text"] == "Hello"  # sent as a JSON body

    clock.now += 1.5
    await client.chat_appendStream(
        channel="C1",
        ts=ts,
        markdown_text=", wor",
        chunks=[
            {"type": "markdown_text", "text": "ld"},
            {"type": "task_update", "id": "t1", "title": "Search", "status": "in_progress"},
            {"type": "task_update", "id": "t2", "title": "Read", "status": "pending"},
            {"type": "plan_update", "title": "The plan"},
        ],
    )
    clock.now += 1.0
    await client.chat_appendStream(
        channel="C1",
        ts=ts,
        chunks=[
            {"type": "task_update", "id": "t1", "title": "Search", "status": "complete",
             "output": "3 hits", "sources": [{"type": "url", "url": "https://x", "text": "x"}]},
        ],
    )  # fmt: skip
    stop = await client.chat_stopStream(channel="C1", ts=ts, markdown_text="!")
    assert stop["ok"] is True
    assert fake.stream_state("C1", ts) == "stopped"

    message = fake.get_message("C1", ts)
    assert message is not None
    assert message["text"] == "Hello, world!"
    assert message["bot_id"] == "BBOT" and message["thread_ts"] == parent
    thread = (await client.conversations_replies(channel="C1", ts=parent))["messages"]
    assert [m["ts"] for m in thread] == [parent, ts]
    assert thread[0]["reply_count"] == 1

    tasks = fake.stream_tasks("C1", ts)
    assert [t["id"] for t in tasks] == ["t1", "t2"]
    assert tasks[0]["status"] == "complete" and tasks[0]["output"] == "3 hits"
    assert tasks[1]["status"] == "pending"
    assert fake.stream_log("C1", ts) == [
        (1000.0, "Hello"),
        (1001.5, ", wor"),
        (1001.5, "ld"),
        (1002.5, "!"),
    ]

    err = await slack_error(client.chat_appendStream(channel="C1", ts=ts, markdown_text="more"))
    assert err.response["error"] == "message_not_in_streaming_state"
    err = await slack_error(client.chat_stopStream(channel="C1", ts=ts))
    assert err.response["error"] == "message_not_in_streaming_state"
    # A stopped stream is an ordinary message again.
    assert (await client.chat_update(channel="C1", ts=ts, text="edited"))["ok"]


async def test_stream_errors_for_unknown_targets(clocked: tuple[FakeSlackAPI, Clock]) -> None:
    fake, _ = clocked
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
    err = await slack_error(client.chat_startStream(channel="C9", thread_ts="1.000001"))
    assert err.response["error"] == "channel_not_found"
    fake.add_message("C1", "question", "UALICE")
    err = await slack_error(
        client.chat_startStream(channel="C1", thread_ts="1.000001", **recipient())
    )
    assert err.response["error"] == "message_not_found"
    err = await slack_error(
        client.chat_appendStream(channel="C1", ts="1.000001", markdown_text="x")
    )
    assert err.response["error"] == "message_not_found"
    posted = (await client.chat_postMessage(channel="C1", text="plain"))["ts"]
    err = await slack_error(client.chat_appendStream(channel="C1", ts=posted, markdown_text="x"))
    assert err.response["error"] == "message_not_in_streaming_state"
    err = await slack_error(client.chat_stopStream(channel="C1", ts=posted))
    assert err.response["error"] == "message_not_in_streaming_state"
    assert fake.stream_state("C1", posted) is None
    assert fake.stream_tasks("C1", posted) == [] and fake.stream_log("C1", posted) == []


async def test_stream_recipient_required_in_channels_not_dms(
    clocked: tuple[FakeSlackAPI, Clock],
) -> None:
    fake, _ = clocked
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
    parent = fake.add_message("C1", "question", "UALICE")
    err = await slack_error(client.chat_startStream(channel="C1", thread_ts=parent))
    assert err.response["error"] == "missing_recipient_user_id"
    err = await slack_error(
        client.chat_startStream(channel="C1", thread_ts=parent, recipient_user_id="UALICE")
    )
    assert err.response["error"] == "missing_recipient_team_id"
    err = await slack_error(
        client.chat_startStream(
            channel="C1", thread_ts=parent, recipient_user_id="UNOBODY", recipient_team_id="T0001"
        )
    )
    assert err.response["error"] == "user_not_found"
    assert fake.thread_messages("C1", parent)[1:] == []

    dm_parent = fake.add_message("D1", "question", "UALICE")
    resp = await client.chat_startStream(channel="D1", thread_ts=dm_parent, markdown_text="hi")
    assert fake.stream_state("D1", resp["ts"]) == "streaming"


async def test_stream_chunk_and_size_validation(clocked: tuple[FakeSlackAPI, Clock]) -> None:
    fake, _ = clocked
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
    parent = fake.add_message("D1", "question", "UALICE")
    bad_chunks: list[list[dict[str, Any]]] = [
        [{"type": "video", "url": "x"}],
        [{"type": "markdown_text"}],
        [{"type": "task_update", "id": "t1", "title": "T"}],
        [{"type": "task_update", "id": "t1", "title": "T", "status": "done"}],
        [{"type": "plan_update"}],
    ]
    for chunks in bad_chunks:
        err = await slack_error(
            client.api_call(
                "chat.startStream", json={"channel": "D1", "thread_ts": parent, "chunks": chunks}
            )
        )
        assert err.response["error"] == "invalid_chunks", chunks
    err = await slack_error(
        client.chat_startStream(channel="D1", thread_ts=parent, markdown_text="x" * 12_001)
    )
    assert err.response["error"] == "msg_too_long"
    err = await slack_error(
        client.chat_startStream(channel="D1", thread_ts=parent, task_display_mode="grid")
    )
    assert err.response["error"] == "invalid_arguments"
    assert fake.thread_messages("D1", parent)[1:] == []

    ts = (await client.chat_startStream(channel="D1", thread_ts=parent))["ts"]
    err = await slack_error(
        client.api_call(
            "chat.appendStream", json={"channel": "D1", "ts": ts, "chunks": [{"type": "x"}]}
        )
    )
    assert err.response["error"] == "invalid_chunks"
    err = await slack_error(
        client.chat_appendStream(channel="D1", ts=ts, markdown_text="y" * 12_001)
    )
    assert err.response["error"] == "msg_too_long"
    assert fake.stream_log("D1", ts) == []


async def test_stream_expires_after_ttl(clocked: tuple[FakeSlackAPI, Clock]) -> None:
    fake, clock = clocked
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
    assert fake.stream_ttl_s == 60.0
    parent = fake.add_message("D1", "question", "UALICE")
    ts = (await client.chat_startStream(channel="D1", thread_ts=parent, markdown_text="a"))["ts"]
    clock.now += 59.9
    await client.chat_appendStream(channel="D1", ts=ts, markdown_text="b")
    clock.now += 0.1
    assert fake.stream_state("D1", ts) == "expired"
    err = await slack_error(client.chat_appendStream(channel="D1", ts=ts, markdown_text="c"))
    assert err.response["error"] == "message_not_in_streaming_state"
    err = await slack_error(client.chat_stopStream(channel="D1", ts=ts, markdown_text="c"))
    assert err.response["error"] == "message_not_in_streaming_state"
    message = fake.get_message("D1", ts)
    assert message is not None and message["text"] == "ab"
    assert (await client.chat_update(channel="D1", ts=ts, text="final"))["ok"]


async def test_expire_stream_now(clocked: tuple[FakeSlackAPI, Clock]) -> None:
    fake, _ = clocked
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
    parent = fake.add_message("D1", "question", "UALICE")
    ts = (await client.chat_startStream(channel="D1", thread_ts=parent, markdown_text="a"))["ts"]
    fake.expire_stream("D1", ts)
    assert fake.stream_state("D1", ts) == "expired"
    err = await slack_error(client.chat_appendStream(channel="D1", ts=ts, markdown_text="b"))
    assert err.response["error"] == "message_not_in_streaming_state"
    with pytest.raises(KeyError):
        fake.expire_stream("D1", parent)
    # Expiring a stopped stream leaves it stopped.
    ts2 = (await client.chat_startStream(channel="D1", thread_ts=parent))["ts"]
    await client.chat_stopStream(channel="D1", ts=ts2)
    fake.expire_stream("D1", ts2)
    assert fake.stream_state("D1", ts2) == "stopped"


async def test_update_while_streaming_is_refused(clocked: tuple[FakeSlackAPI, Clock]) -> None:
    fake, _ = clocked
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
    parent = fake.add_message("C1", "question", "UALICE")
    ts = (
        await client.chat_startStream(
            channel="C1", thread_ts=parent, markdown_text="partial", **recipient()
        )
    )["ts"]
    err = await slack_error(client.chat_update(channel="C1", ts=ts, text="replaced"))
    assert err.response["error"] == "message_is_streaming"
    message = fake.get_message("C1", ts)
    assert message is not None and message["text"] == "partial"


def feedback_block(**overrides: Any) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "feedback_buttons",
        "action_id": "feedback",
        "positive_button": {"text": {"type": "plain_text", "text": "Good"}, "value": "up"},
        "negative_button": {"text": {"type": "plain_text", "text": "Bad"}, "value": "down"},
    }
    button.update(overrides)
    return {"type": "context_actions", "elements": [button]}


async def test_stop_with_feedback_blocks(clocked: tuple[FakeSlackAPI, Clock]) -> None:
    fake, _ = clocked
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
    parent = fake.add_message("C1", "question", "UALICE")
    ts = (await client.chat_startStream(channel="C1", thread_ts=parent, **recipient()))["ts"]
    await client.chat_appendStream(channel="C1", ts=ts, markdown_text="answer")

    bad_blocks: list[dict[str, Any]] = [
        feedback_block(action_id=None),
        feedback_block(negative_button=None),
        feedback_block(positive_button={"text": {"type": "mrkdwn", "text": "x"}, "value": "u"}),
        feedback_block(positive_button={"text": {"type": "plain_text", "text": "x"}}),
        {"type": "context_actions", "elements": [{"type": "button"}]},
        {"type": "context_actions", "elements": []},
        {"type": "context_actions", "elements": feedback_block()["elements"] * 6},
        {"type": "context_actions", "elements": [{"type": "icon_button", "icon": "trash"}]},
    ]
    for block in bad_blocks:
        err = await slack_error(client.chat_stopStream(channel="C1", ts=ts, blocks=[block]))
        assert err.response["error"] == "invalid_blocks", block
    assert fake.stream_state("C1", ts) == "streaming"

    icon = {"type": "icon_button", "icon": "trash", "text": {"type": "plain_text", "text": "Del"}}
    blocks = [
        section("sources"),
        {"type": "context_actions", "elements": [*feedback_block()["elements"], icon]},
    ]
    await client.chat_stopStream(
        channel="C1", ts=ts, blocks=blocks, metadata={"event_type": "run", "event_payload": {}}
    )
    message = fake.get_message("C1", ts)
    assert message is not None
    assert message["blocks"] == blocks and message["text"] == "answer"
    assert message["metadata"]["event_type"] == "run"
    replies = (await client.conversations_replies(channel="C1", ts=parent))["messages"]
    assert replies[1]["blocks"] == blocks
    # Existing validation still applies to the same blocks through chat.postMessage.
    assert (await client.chat_postMessage(channel="C1", text="t", blocks=blocks))["ok"]
    err = await slack_error(
        client.chat_postMessage(channel="C1", text="t", blocks=[feedback_block(action_id="")])
    )
    assert err.response["error"] == "invalid_blocks"


async def test_reset_forgets_streams(clocked: tuple[FakeSlackAPI, Clock]) -> None:
    fake, _ = clocked
    client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
    parent = fake.add_message("D1", "question", "UALICE")
    ts = (await client.chat_startStream(channel="D1", thread_ts=parent))["ts"]
    fake.reset()
    assert fake.stream_state("D1", ts) is None
    assert fake.stream_ttl_s == 60.0


# --------------------------------------------------------------------------- Slack's rate limits


async def test_slack_limits_are_off_by_default(fake: FakeSlackAPI, client: AsyncWebClient) -> None:
    assert fake.slack_limits_enforced is False
    ts = (await client.chat_postMessage(channel="C1", text="v"))["ts"]
    for i in range(20):
        assert (await client.chat_update(channel="C1", ts=ts, text=f"v{i}"))["ok"]
        assert (await client.chat_postMessage(channel="C1", text=f"m{i}"))["ok"]
    assert fake.rate_limited_calls() == []


async def test_tier_limit_answers_429_exactly_past_the_bucket() -> None:
    clock = Clock()
    async with FakeSlackAPI(clock=clock, enforce_slack_limits=True) as fake:
        assert fake.slack_limits_enforced is True
        assert SLACK_TIERS["chat.update"] == 3 and SLACK_TIERS["usergroups.users.list"] == 2
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
        ts = (await client.chat_postMessage(channel="C1", text="v"))["ts"]
        burst = burst_capacity(TIER_PER_MINUTE[3])
        assert burst == 8
        for i in range(burst):
            assert (await client.chat_update(channel="C1", ts=ts, text=f"v{i}"))["ok"]
        err = await slack_error(client.chat_update(channel="C1", ts=ts, text="too many"))
        assert err.response.status_code == 429
        assert err.response["error"] == "ratelimited"
        assert err.response.headers["Retry-After"] == "2"  # 1 token at 50/min takes 1.2 s
        message = fake.get_message("C1", ts)
        assert message is not None and message["text"] == f"v{burst - 1}"  # no effect
        refused = fake.rate_limited_calls()
        assert [c.method for c in refused] == ["chat.update"]
        assert refused[0].failed and refused[0].status == 429
        assert refused[0].params["text"] == "too many"

        clock.now += 1.1
        err = await slack_error(client.chat_update(channel="C1", ts=ts, text="still"))
        assert err.response.headers["Retry-After"] == "1"
        clock.now += 0.1
        assert (await client.chat_update(channel="C1", ts=ts, text="later"))["ok"]
        # Other methods have their own buckets.
        assert (await client.conversations_replies(channel="C1", ts=ts))["ok"]

        # Tier 2: a burst of 3, then one every 3 s.
        fake.add_usergroup("S1", ["U1"])
        for _ in range(3):
            assert (await client.usergroups_users_list(usergroup="S1"))["ok"]
        err = await slack_error(client.usergroups_users_list(usergroup="S1"))
        assert err.response.headers["Retry-After"] == "3"
        assert len(fake.rate_limited_calls()) == 3


async def test_per_channel_message_limit() -> None:
    clock = Clock()
    async with FakeSlackAPI(clock=clock) as fake:
        fake.enforce_slack_limits()
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
        for i in range(3):
            assert (await client.chat_postMessage(channel="C1", text=f"m{i}"))["ok"]
        err = await slack_error(client.chat_postMessage(channel="C1", text="flood"))
        assert err.response.status_code == 429
        assert err.response.headers["Retry-After"] == "1"
        assert [m["text"] for m in fake.channel_messages("C1")] == ["m0", "m1", "m2"]
        # Another channel has its own bucket; streams started in C1 share C1's.
        parent = fake.add_message("D1", "question", "UALICE")
        assert (await client.chat_postMessage(channel="D1", text="elsewhere"))["ok"]
        err = await slack_error(
            client.api_call("chat.startStream", json={"channel": "C1", "thread_ts": "1.0"})
        )
        assert err.response.status_code == 429
        clock.now += 1.0
        assert (await client.chat_postMessage(channel="C1", text="m3"))["ok"]
        assert (await client.chat_startStream(channel="D1", thread_ts=parent))["ok"]
        assert [c.method for c in fake.rate_limited_calls()] == [
            "chat.postMessage",
            "chat.startStream",
        ]


async def test_post_message_workspace_limit_and_switching_off() -> None:
    clock = Clock()
    async with FakeSlackAPI(clock=clock, enforce_slack_limits=True) as fake:
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
        burst = burst_capacity(300)
        for i in range(burst):
            assert (await client.chat_postMessage(channel=f"C{i}", text="hi"))["ok"]
        err = await slack_error(client.chat_postMessage(channel="CNEW", text="hi"))
        assert err.response.headers["Retry-After"] == "1"
        fake.enforce_slack_limits(False)
        assert (await client.chat_postMessage(channel="CNEW", text="hi"))["ok"]
        fake.enforce_slack_limits(True)  # starts from full buckets
        assert (await client.chat_postMessage(channel="CNEW", text="again"))["ok"]
        fake.enforce_slack_limits(False)
        fake.reset()  # back to the constructor's setting
        assert fake.slack_limits_enforced is True


async def test_rate_limited_calls_include_rate_limit_but_not_fail_next() -> None:
    clock = Clock()
    async with FakeSlackAPI(clock=clock) as fake:
        client = AsyncWebClient(token="xoxb-test", base_url=fake.url)
        fake.rate_limit("auth.test", per_second=1)
        fake.fail_next("api.test", retry_after=1)
        assert (await client.auth_test())["ok"]
        err = await slack_error(client.auth_test())
        assert err.response.status_code == 429
        await slack_error(client.api_test())
        assert [c.method for c in fake.rate_limited_calls()] == ["auth.test"]
        assert [c.method for c in fake.calls if c.failed] == ["auth.test", "api.test"]
