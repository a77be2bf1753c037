"""The token estimate against o200k_base's exact count, on the texts Baton sends.

The exact count is the fake provider's (tests/fakes/openai_api.py, bpe-openai): what
a real OpenAI model reports as `prompt_tokens`. The estimate may count high (the
provider's figure calibrates it down), never low by more than `LOWEST` allows.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.engine.tokens import TokenCounter, estimate_tokens
from bot.tools import Workspace, build_workspace_tools
from tests.fakes.openai_api import o200k_tokens

# Estimate / exact: at most 10 % low, whatever the text.
LOWEST = 0.9

ENGLISH = (
    "A thread can live for weeks. Every request to the model is fitted to its context "
    "window: old tool outputs are trimmed first, then older turns are folded into a "
    "summary the model writes, and only then are the oldest messages left out. If the "
    "provider still answers that the request is too long, Baton learns the window it "
    "names, folds and retries once, so a thread never becomes unusable. Meanwhile the "
    "person who asked sees what happens in the progress message, in plain words."
)
CHINESE = (  # with its full-width punctuation, as Chinese is written
    "一个对话线程可以持续好几个星期。每次请求模型之前，都会把内容压缩到上下文窗口之内："  # noqa: RUF001
    "先裁剪旧的工具输出，再把较早的轮次折叠成模型写的摘要，最后才丢弃最早的消息。"  # noqa: RUF001
    "如果服务商仍然回答请求太长，机器人会记住它给出的窗口大小，折叠后再试一次。"  # noqa: RUF001
)
JAPANESE = (
    "スレッドは何週間も続くことがあります。モデルへのリクエストは毎回コンテキストウィンドウに"
    "収まるように調整されます。まず古いツールの出力を短くし、次に古いやり取りを要約にまとめ、"
    "最後の手段として最も古いメッセージを省きます。"
)
KOREAN = (
    "스레드는 몇 주 동안 이어질 수 있습니다. 모델에 보내는 모든 요청은 컨텍스트 창에 맞게 "
    "조정됩니다. 먼저 오래된 도구 출력을 줄이고, 그다음 이전 대화를 요약으로 접으며, "
    "마지막으로 가장 오래된 메시지를 뺍니다."
)
EMOJI = (
    "Deploy is done 🎉🚀 thanks team 🙏 — the dashboards look good ✅ but the alert on "
    "checkout is still firing 🔥🔥 can someone look? 👀 I'm out until Monday 🏖️ "
    "👍🏽 👨‍👩‍👧 🇫🇷 ❤️ 😂😂😂 🤔"
)
LOG = "\n".join(
    f"2025-03-{day:02d}T04:{day:02d}:17.{day * 7919 % 999999:06d}Z INFO [worker-{day % 16}] "
    f"request id=9f{day * 104729:x} path=/api/v1/items/{day * 37} status=200 took=3.{day}ms"
    for day in range(1, 29)
)
SOURCE = Path(__file__).resolve().parents[2] / "bot" / "engine" / "context.py"


def tool_schemas(root: Path) -> str:
    """Baton's own tools as a request sends them."""
    return json.dumps(build_workspace_tools(Workspace(root)).schemas())


# (what, the text, the most it may count high)
CASES: list[tuple[str, Callable[[Path], str], float]] = [
    ("English prose", lambda _: ENGLISH, 1.3),
    ("English, 40 paragraphs", lambda _: "\n\n".join([ENGLISH] * 40), 1.3),
    ("Python source", lambda _: SOURCE.read_text(), 1.5),
    ("tool schemas (JSON)", tool_schemas, 1.5),
    ("a log", lambda _: LOG, 1.5),
    ("Chinese", lambda _: CHINESE, 1.5),
    ("Japanese", lambda _: JAPANESE, 1.5),
    ("Korean", lambda _: KOREAN, 1.5),
    ("emoji in a Slack message", lambda _: EMOJI, 1.5),
    ("a word repeated", lambda _: "hello " * 5_000, 1.2),
    ("a word repeated without spaces", lambda _: "hello" * 5_000, 2.0),
    ("two letters repeated", lambda _: "ha" * 5_000, 2.0),
    ("a separator line", lambda _: "=" * 80, 4.0),
]


@pytest.mark.parametrize(("what", "text", "highest"), CASES, ids=[c[0] for c in CASES])
def test_the_estimate_is_near_the_exact_count_and_never_far_below(
    what: str, text: Callable[[Path], str], highest: float, tmp_path: Path
) -> None:
    sample = text(tmp_path)
    exact = o200k_tokens(sample)
    estimate = estimate_tokens(sample)
    assert LOWEST * exact <= estimate <= highest * exact, (what, estimate, exact)


def test_empty_and_tiny_texts() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens(" ") == 1
    assert estimate_tokens("hello world") == o200k_tokens("hello world") == 2


def test_long_texts_are_estimated_in_pieces_alike() -> None:
    # The estimate takes long texts in pieces of 2**18 characters: counted in pieces of
    # 1,000 instead, a text comes to within about a token a piece of its whole count.
    whole = "\n".join([ENGLISH, CHINESE, EMOJI] * 900)
    assert len(whole) > 2 * 2**18
    parts = sum(estimate_tokens(whole[i : i + 1000]) for i in range(0, len(whole), 1000))
    assert abs(estimate_tokens(whole) - parts) <= len(whole) // 1000


def test_the_counter_caches_counts_without_keeping_the_texts() -> None:
    counter = TokenCounter()
    text = ENGLISH * 3
    references = sys.getrefcount(text)
    assert counter.text(text) == estimate_tokens(text)
    assert sys.getrefcount(text) == references  # a tool output is not held by the cache
    assert counter.text("".join(text)) == counter.text(text)  # an equal text, another object
    assert counter.text("lone surrogate \udc80") > 0  # what a lenient decoder can leave
