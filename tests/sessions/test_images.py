"""Images of a turn reach the model once; the session keeps only the text naming them."""

from __future__ import annotations

import base64

from sqlalchemy import text

from bot.app import Baton
from bot.engine import Done
from bot.engine.messages import ImagePart
from bot.sessions.compaction import render
from bot.store import SessionKey
from tests.fakes.openai_api import FakeOpenAI, Reply

THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.000")
DATA = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x07" * 4_000).decode()
IMAGE = ImagePart(name="chart.png", media_type="image/png", data=DATA)
ASKED = "what does it show?\n\n[image: chart.png, image/png, 4 KB]"


async def stored_contents(baton: Baton) -> list[str]:
    async with baton.database.engine.connect() as connection:
        rows = await connection.execute(text("SELECT content FROM messages ORDER BY seq"))
        return [row[0] or "" for row in rows]


async def test_a_turn_sends_its_images_and_stores_only_their_names(
    baton: Baton, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(Reply(text="Sales went up."), Reply(text="Up, as I said."))
    events = [e async for e in baton.conversations.run_turn(THREAD, ASKED, images=[IMAGE])]
    assert isinstance(events[-1], Done) and events[-1].final_text == "Sales went up."
    assert fake_llm.requests[0].image_urls == [IMAGE.data_url]

    contents = await stored_contents(baton)
    assert contents[0] == ASKED
    assert not any(DATA[:40] in content or "base64" in content for content in contents)

    [e async for e in baton.conversations.run_turn(THREAD, "and again?")]
    later = fake_llm.requests[1]
    assert later.image_urls == []
    assert later.messages[1] == {"role": "user", "content": ASKED}
    history = await baton.conversations.history(THREAD)
    assert history[0].images == ()
    assert "[image: chart.png" in render(history[0])  # what a summary would see


async def test_an_agent_run_directly_gets_the_images(baton: Baton, fake_llm: FakeOpenAI) -> None:
    fake_llm.script(Reply(text="A bar chart."))
    outcome = await baton.conversations.run_agent(THREAD, "explore", ASKED, images=[IMAGE])
    assert outcome.state == "completed" and outcome.text == "A bar chart."
    assert fake_llm.requests[0].image_urls == [IMAGE.data_url]
    contents = await stored_contents(baton)
    assert contents[0] == f"@explore {ASKED}"
    assert not any("base64" in content for content in contents)
