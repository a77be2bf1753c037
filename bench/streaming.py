"""Streamed answers: how soon the model's first words are visible in Slack.

Run: `.venv/bin/python -m bench.streaming [--runs N] [--words W] [--seconds S]`.

The fake model streams a W-word answer over S seconds (8-character chunks, evenly
spaced); the fake Slack notes when each piece of a streamed message arrived. For
each run this prints how long after the model sent its first words they were
visible in the thread (the goal is under 1.5 s), how long after the model's last
words the whole answer was, and how many Slack calls the stream took.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from bot.slack.rate_budget import RateBudget
from tests.fakes.openai_api import RecordedRequest, Reply
from tests.slack.harness import BOT, start_harness

CHUNK = 8


async def measure(runs: int, words: int, seconds: float) -> None:
    answer = " ".join(f"word{n:03d}" for n in range(words))
    chunks = -(-len(answer) // CHUNK)
    delay = seconds / chunks
    first: list[float] = []
    whole: list[float] = []
    pieces: list[int] = []
    calls: Counter[str] = Counter()
    sent: list[float] = []

    def respond(request: RecordedRequest) -> Reply:
        # The fake sends the first chunk as soon as the responder returns.
        sent.append(time.monotonic())
        return Reply(text=answer, chunk_delay=delay)

    with tempfile.TemporaryDirectory() as directory:
        async for harness in start_harness(Path(directory), rate_budget=RateBudget()):
            harness.llm.responder = respond
            await harness.mention("warm-up")
            await harness.settle()
            harness.slack.clear_calls()
            for n in range(runs):
                ts = await harness.mention(f"question {n:04d}")
                await harness.settle()
                started = sent[-1]  # one model call per run
                streamed = [
                    m["ts"]
                    for m in harness.thread("C1", ts)
                    if m.get("user") == BOT and harness.slack.stream_state("C1", m["ts"])
                ]
                log = harness.slack.stream_log("C1", streamed[0])
                seen_first = next(at for at, text in log if text.strip())
                first.append(seen_first - started)
                # The model's last words left it `seconds` after its first.
                whole.append(log[-1][0] - (started + chunks * delay))
                pieces.append(len(log))
            calls = Counter(c.method for c in harness.slack.calls)
    print(f"{runs} runs, a {words}-word answer streamed by the model over {seconds:.1f} s")
    print(
        f"first words visible after  p50 {statistics.median(first) * 1000:7.1f} ms"
        f"   max {max(first) * 1000:7.1f} ms   (goal: under 1,500 ms)"
    )
    print(
        f"whole answer visible after the model's last words  p50 "
        f"{statistics.median(whole) * 1000:7.1f} ms   max {max(whole) * 1000:7.1f} ms"
    )
    print(f"stream pieces per answer  p50 {statistics.median(pieces):.0f}")
    for method in ("chat.startStream", "chat.appendStream", "chat.stopStream", "chat.update"):
        print(f"  {method:20} {calls[method] / runs:6.2f} per run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--words", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    asyncio.run(measure(args.runs, args.words, args.seconds))


if __name__ == "__main__":
    main()
