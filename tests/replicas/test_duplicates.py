"""Duplicate deliveries across replicas: Slack's retries, and one message arriving both
as app_mention and as message.channels, at two different replicas, start one run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.fakes.openai_api import Reply
from tests.replicas.harness import cluster, text_of
from tests.slack.harness import BOT


async def test_one_event_delivered_to_both_replicas_runs_once(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        a, b = await c.start(2)
        c.llm.responder = lambda request: Reply(text="The one and only answer.", delay=0.5)
        mention = c.mention_event("what is up?")
        ts = mention["ts"]
        message = {**mention, "type": "message", "channel_type": "channel"}
        # Slack's first delivery and its retry (same event_id) go to different replicas,
        # at the same moment, and the message also comes as message.channels, twice.
        statuses = await asyncio.gather(
            c.send_event(a, mention, event_id="EvDup"),
            c.send_event(b, mention, event_id="EvDup", retry=1),
            c.send_event(b, message, event_id="EvDupMsg"),
            c.send_event(a, message, event_id="EvDupMsg", retry=1),
        )
        assert statuses == [200, 200, 200, 200], c.logs()
        await c.until(
            lambda: "The one and only answer." in c.thread_text("C1", ts),
            what="the answer posted",
        )
        await c.quiet()  # a second run would have shown itself
        assert len(c.llm.requests) == 1, c.logs()
        answers = [
            m for m in c.thread("C1", ts)
            if m.get("user") == BOT and "The one and only answer." in text_of(m)
        ]  # fmt: skip
        assert len(answers) == 1, text_of(c.thread("C1", ts))
        progress = [m for m in c.thread("C1", ts) if "✓ Done" in text_of(m)]
        assert len(progress) == 1, text_of(c.thread("C1", ts))
