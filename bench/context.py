"""Long threads within the context window: tokens sent per turn, and compactions.

Run: `.venv/bin/python -m bench.context [--turns N] [--window TOKENS]`.
A thread of N turns, each reading a 30,000-character file, against a fake provider
that refuses requests past the window. Per turn it prints what the request would
hold unfitted (the whole history and the turn, in o200k tokens, as the provider
counts them; Baton itself only estimates them), the largest request actually sent,
and whether history was folded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from bot.app import build_baton
from bot.engine import Compacted, Done
from bot.sessions.compaction import SUMMARY_PROMPT
from bot.store import SessionKey
from tests.conftest import make_settings
from tests.fakes.openai_api import (
    ErrorReply,
    FakeOpenAI,
    RecordedRequest,
    Reply,
    ToolCallSpec,
    o200k_tokens,
)
from tests.fakes.openai_api import Usage as FakeUsage

THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.000")


def tokens_of(messages: list[dict[str, object]], tools: object) -> int:
    """What the provider counts: the JSON of the messages and of the tools."""
    return o200k_tokens(json.dumps(messages) + json.dumps(tools or []))


async def measure(turns: int, window: int) -> None:
    sent: list[int] = []
    refused = 0

    def respond(request: RecordedRequest) -> Reply | ErrorReply:
        nonlocal refused
        tokens = tokens_of(request.messages, request.body.get("tools"))
        if tokens > window:
            refused += 1
            return ErrorReply(
                status=400,
                message=f"This model's maximum context length is {window} tokens. However, "
                f"your messages resulted in {tokens} tokens.",
            )
        usage = FakeUsage(prompt_tokens=tokens, completion_tokens=20)
        if request.messages[0]["content"] == SUMMARY_PROMPT:
            return Reply(text="Summary: the files were read and described.", usage=usage)
        sent.append(tokens)
        if request.messages[-1]["role"] == "user":
            return Reply(tool_calls=[ToolCallSpec("read_file", {"path": "log.txt"})], usage=usage)
        return Reply(text="The log shows the nightly jobs ran.", usage=usage)

    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        async with FakeOpenAI() as fake:
            fake.responder = respond
            settings = make_settings(root, fake.url, context_window=window)
            line = "worker took the nightly report job, checked the input and wrote the summary"
            (settings.workspace / "log.txt").write_text("\n".join([line] * 400))
            baton = await build_baton(settings)
            unfitted: list[dict[str, object]] = []
            compactions = 0
            failed = 0
            print(f"{'turn':>4} {'before':>9} {'after':>7}  folded")
            try:
                for turn in range(1, turns + 1):
                    sent.clear()
                    text = f"Read the log ({turn})."
                    events = [e async for e in baton.conversations.run_turn(THREAD, text)]
                    folded = sum(e.folded for e in events if isinstance(e, Compacted))
                    compactions += sum(1 for e in events if isinstance(e, Compacted) and e.folded)
                    done = events[-1]
                    failed += isinstance(done, Done) and done.stop_reason != "completed"
                    # Unfitted: every message of the thread so far, as if nothing were cut.
                    unfitted.append({"role": "user", "content": text})
                    output = (settings.workspace / "log.txt").read_text()
                    unfitted += [
                        {"role": "assistant", "tool_calls": [{"name": "read_file"}]},
                        {"role": "tool", "content": output},
                    ]
                    before = tokens_of(unfitted, fake.requests[0].body.get("tools"))
                    unfitted.append({"role": "assistant", "content": "The log shows..."})
                    note = f"{folded} messages" if folded else ""
                    print(f"{turn:>4} {before:>9,} {max(sent, default=0):>7,}  {note}")
            finally:
                await baton.close()
    print(
        f"window {window:,} tokens · {compactions} compactions · {refused} requests refused · "
        f"{failed} turns failed"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--window", type=int, default=16_000)
    args = parser.parse_args()
    asyncio.run(measure(args.turns, args.window))


if __name__ == "__main__":
    main()
