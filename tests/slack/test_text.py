"""Text for Slack: splitting, answer plans, mrkdwn, formatting and mentions."""

from __future__ import annotations

import random
import re

import pytest

from bot.describe import format_duration, format_tokens
from bot.sessions.run import parse_direct_agent
from bot.slack.text import (
    MARKDOWN_BLOCKS_LIMIT,
    MESSAGE_TEXT_LIMIT,
    AnswerPlan,
    escape_mrkdwn,
    fit_text,
    format_age,
    mention_free,
    mrkdwn_fallback,
    plan_answer,
    split_text,
    to_mrkdwn,
)

FENCE_LINE = re.compile(r"^ {0,3}`{3,}")
WORDS = (
    "agent task thread the a of run tool result Slack answer read_file grep config "
    "session **bold** _italic_ [link](https://example.com/a?b=1) `code` 42 — é 日本"
).split()


def content(text: str) -> str:
    """The text without fence lines and without any whitespace."""
    kept = [line for line in text.split("\n") if not FENCE_LINE.match(line)]
    return re.sub(r"\s+", "", "".join(kept))


def fence_lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if FENCE_LINE.match(line)]


def is_subsequence(needles: list[str], haystack: list[str]) -> bool:
    remaining = iter(haystack)
    return all(any(needle == item for item in remaining) for needle in needles)


def random_markdown(rng: random.Random, target: int) -> str:
    """Paragraphs, lists, headings, fenced code and very long lines, about `target` long."""
    parts: list[str] = []
    size = 0
    while size < target:
        roll = rng.random()
        if roll < 0.4:
            part = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 120)))
        elif roll < 0.55:
            part = "\n".join(
                f"- {' '.join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))}"
                for _ in range(rng.randint(1, 8))
            )
        elif roll < 0.65:
            part = f"{'#' * rng.randint(1, 3)} {rng.choice(WORDS)} {rng.choice(WORDS)}"
        elif roll < 0.85:
            info = rng.choice(["", "python", "bash", "json"])
            body = "\n".join(
                "    " * rng.randint(0, 2)
                + " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 15)))
                for _ in range(rng.randint(1, 60))
            )
            part = f"```{info}\n{body}\n```"
        elif roll < 0.93:
            part = "x" * rng.randint(50, 5_000)  # one long word
        else:
            part = rng.choice(["", "   ", "\n"])  # extra blank lines
        parts.append(part)
        size += len(part) + 2
    return "\n\n".join(parts)


def assert_split_is_faithful(text: str, chunks: list[str], limit: int) -> None:
    assert all(0 < len(chunk) <= limit for chunk in chunks), [len(c) for c in chunks]
    assert all(chunk.strip() for chunk in chunks)
    assert content("\n".join(chunks)) == content(text)
    assert is_subsequence(fence_lines(text), fence_lines("\n".join(chunks)))
    if len(fence_lines(text)) % 2 == 0:  # balanced input: every chunk renders on its own
        assert all(len(fence_lines(chunk)) % 2 == 0 for chunk in chunks)


# ---------------------------------------------------------------------- split_text


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("limit", [60, 250, 1_000, 3_000, 12_000])
def test_split_text_keeps_every_character_within_the_limit(seed: int, limit: int) -> None:
    rng = random.Random(seed * 1_000 + limit)
    text = random_markdown(rng, rng.choice([200, 2_000, 20_000]))
    assert_split_is_faithful(text, split_text(text, limit), limit)


def test_split_text_of_a_60k_answer() -> None:
    text = random_markdown(random.Random(60), 60_000)
    assert len(text) >= 60_000
    chunks = split_text(text, MARKDOWN_BLOCKS_LIMIT)
    assert len(chunks) >= 5
    assert_split_is_faithful(text, chunks, MARKDOWN_BLOCKS_LIMIT)


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("", 10, []),
        (" \n\n \n", 10, []),
        ("short", 10, ["short"]),
        ("\n\nshort\n\n", 10, ["short"]),
        ("aaaa bbbb\n\ncccc dddd", 12, ["aaaa bbbb", "cccc dddd"]),
        ("one\ntwo\nthree", 8, ["one\ntwo", "three"]),
        ("alpha beta gamma delta", 11, ["alpha beta", "gamma delta"]),
        ("x" * 25, 10, ["x" * 10, "x" * 10, "x" * 5]),
        ("a" * 8 + "\n" + "b" * 8, 10, ["a" * 8, "b" * 8]),
    ],
)
def test_split_text_cases(text: str, limit: int, expected: list[str]) -> None:
    assert split_text(text, limit) == expected


def test_split_text_prefers_paragraph_boundaries() -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 18 + "end." for i in range(12)]
    chunks = split_text("\n\n".join(paragraphs), 300)
    for chunk in chunks:
        assert chunk.startswith("Paragraph ")
        assert chunk.endswith("end.")
    assert sum(chunk.count("Paragraph ") for chunk in chunks) == 12


def test_split_text_keeps_a_code_block_whole_when_it_fits() -> None:
    code = "```python\n" + "\n".join(f"print({i})" for i in range(40)) + "\n```"
    text = "Intro paragraph.\n\n" + code + "\n\nOutro paragraph."
    chunks = split_text(text, len(code) + 20)
    assert any(code in chunk for chunk in chunks)
    assert all(len(fence_lines(chunk)) in (0, 2) for chunk in chunks)


def test_split_text_closes_and_reopens_a_long_code_block() -> None:
    lines = [f"line_{i} = compute({i})" for i in range(200)]
    text = "Here is the code:\n\n```python\n" + "\n".join(lines) + "\n```\n\nDone."
    chunks = split_text(text, 500)
    assert len(chunks) > 5
    for chunk in chunks[1:-1]:
        assert chunk.startswith("```python\n")
        assert chunk.endswith("\n```")
    assert_split_is_faithful(text, chunks, 500)
    shown = [line for chunk in chunks for line in chunk.split("\n") if line.startswith("line_")]
    assert shown == lines


def test_split_text_rejects_a_limit_below_one() -> None:
    with pytest.raises(ValueError, match="limit"):
        split_text("text", 0)


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_split_text_makes_progress_with_tiny_limits(limit: int) -> None:
    # Too small to repeat fences: the fence lines themselves are cut, nothing is added.
    text = "```python\nabc def\n```\n\nsome words here"
    chunks = split_text(text, limit)
    assert all(0 < len(chunk) <= limit for chunk in chunks)
    assert re.sub(r"\s+", "", "".join(chunks)) == re.sub(r"\s+", "", text)


# --------------------------------------------------------------------- plan_answer


def assert_plan_within_limits(plan: AnswerPlan) -> None:
    for message in plan.messages:
        assert 0 < len(message.text) <= MESSAGE_TEXT_LIMIT
        markdown = [block["text"] for block in message.blocks if block["type"] == "markdown"]
        assert sum(len(text) for text in markdown) <= MARKDOWN_BLOCKS_LIMIT
        assert len(message.blocks) <= 50


def answer_of(length: int, seed: int = 1) -> str:
    text = random_markdown(random.Random(seed), length)
    return text[:length]


@pytest.mark.parametrize("markdown", ["", "   \n\t "])
def test_plan_answer_of_nothing(markdown: str) -> None:
    plan = plan_answer(markdown)
    assert plan.file is None
    assert len(plan.messages) == 1
    assert plan.messages[0].text == "(no answer text)"
    assert_plan_within_limits(plan)


@pytest.mark.parametrize("length", [1, 10_000, MARKDOWN_BLOCKS_LIMIT])
def test_plan_answer_up_to_12k_is_one_markdown_message(length: int) -> None:
    markdown = answer_of(length).rstrip() or "x"
    plan = plan_answer(markdown)
    assert plan.file is None
    assert [message.blocks for message in plan.messages] == [
        [{"type": "markdown", "text": markdown}]
    ]
    assert_plan_within_limits(plan)


def test_plan_answer_of_30k_is_three_messages() -> None:
    markdown = answer_of(30_000)
    plan = plan_answer(markdown)
    assert plan.file is None
    assert len(plan.messages) == 3
    assert_plan_within_limits(plan)
    joined = "\n".join(message.blocks[0]["text"] for message in plan.messages)
    assert content(joined) == content(markdown)
    assert not plan.messages[0].text.startswith("(continued")
    assert plan.messages[1].text.startswith("(continued 2/3)")
    assert plan.messages[2].text.startswith("(continued 3/3)")
    assert all("(continued" not in message.blocks[0]["text"] for message in plan.messages)


def test_plan_answer_of_60k_is_a_file_and_one_message() -> None:
    markdown = answer_of(61_234)
    plan = plan_answer(markdown)
    assert plan.file is not None
    assert plan.file.content == markdown
    assert plan.file.filename == "answer.md"
    assert plan.file.title == "Full answer"
    assert len(plan.messages) == 1
    assert_plan_within_limits(plan)
    shown = plan.messages[0].blocks[0]["text"]
    assert len(shown) < 3_200
    assert "(61,234 characters)" in shown
    assert "answer.md" in shown
    preview = shown.rsplit("\n\n", 1)[0]
    assert content(markdown).startswith(content(preview))


def test_plan_answer_uses_a_file_beyond_max_messages() -> None:
    markdown = answer_of(30_000)
    plan = plan_answer(markdown, max_messages=2)
    assert plan.file is not None
    assert plan.file.content == markdown
    assert len(plan.messages) == 1


def test_plan_answer_rejects_zero_messages() -> None:
    with pytest.raises(ValueError, match="max_messages"):
        plan_answer("hi", max_messages=0)


def test_plan_answer_fallback_is_safe_mrkdwn() -> None:
    plan = plan_answer("**Done.** Tell <!channel> about [it](https://example.com).")
    assert plan.messages[0].text == (
        "*Done.* Tell &lt;!channel&gt; about <https://example.com|it>."
    )


def test_plan_answer_fallback_text_is_fitted_when_conversion_grows_it() -> None:
    markdown = "<<<<<<<<<< " * 1_000  # 11,000 characters; escaped, 41,000
    plan = plan_answer(markdown)
    assert len(plan.messages) == 1
    assert_plan_within_limits(plan)
    assert "characters in all" in plan.messages[0].text


# ------------------------------------------------------------------------ mrkdwn


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold**", "*bold*"),
        ("*italic*", "_italic_"),
        ("[Baton](https://example.com/x)", "<https://example.com/x|Baton>"),
        ("# Heading", "*Heading*"),
        ("### Smaller heading", "*Smaller heading*"),
        ("~~gone~~", "~gone~"),
        ("- item", "• item"),
        ("```python\nx = **1**\n```", "```python\nx = **1**\n```"),
    ],
)
def test_to_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


def test_escape_mrkdwn_and_fallback() -> None:
    assert escape_mrkdwn("a < b && c > d") == "a &lt; b &amp;&amp; c &gt; d"
    assert mrkdwn_fallback("<@U123> **hi**") == "&lt;@U123&gt; *hi*"


def test_fit_text() -> None:
    assert fit_text("short", 100) == "short"
    long = "word " * 20_000
    fitted = fit_text(long)
    assert len(fitted) <= MESSAGE_TEXT_LIMIT
    assert fitted.endswith("the message shows the rest._")


# -------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("prompt", "completion", "expected"),
    [(0, 0, "0 in / 0 out tokens"), (1_234, 56, "1,234 in / 56 out tokens")],
)
def test_format_tokens(prompt: int, completion: int, expected: str) -> None:
    assert format_tokens(prompt, completion) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-1, "0.0 s"),
        (0, "0.0 s"),
        (4.23, "4.2 s"),
        (59.9, "59.9 s"),
        (59.97, "1 min 00 s"),
        (185, "3 min 05 s"),
        (3_599.4, "59 min 59 s"),
        (3_725, "1 h 02 min"),
        (90_000, "25 h 00 min"),
    ],
)
def test_format_duration(seconds: float, expected: str) -> None:
    assert format_duration(seconds) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "just now"),
        (0, "just now"),
        (59, "just now"),
        (60, "1 min ago"),
        (185, "3 min ago"),
        (7_300, "2 h ago"),
        (86_400 * 5 + 10, "5 d ago"),
    ],
)
def test_format_age(seconds: float, expected: str) -> None:
    assert format_age(seconds) == expected


# ---------------------------------------------------------------------- mentions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<@UBOT> hello", "hello"),
        ("<@UBOT|baton>   hello", "hello"),
        ("  <@UBOT>\n@explore look", "@explore look"),
        ("hey <@UBOT> look here", "hey look here"),
        ("ask <@UOTHER> and <@UBOT>", "ask <@UOTHER> and"),
        ("<@UBOT><@UBOT> twice", "twice"),
        ("no mention", "no mention"),
        ("<@UBOTX> similar id", "<@UBOTX> similar id"),
    ],
)
def test_mention_free(text: str, expected: str) -> None:
    assert mention_free(text, "UBOT") == expected


def test_mention_free_without_a_bot_id_only_strips() -> None:
    assert mention_free("  <@U1> hi ", "") == "<@U1> hi"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@explore find the loader", ("explore", "find the loader")),
        ("@general-purpose   do it  ", ("general-purpose", "do it")),
        ("@explore\nmulti\nline", ("explore", "multi\nline")),
        ("@explore", ("explore", "")),
        ("  @a1 x", ("a1", "x")),
        # Claude Code agent names may hold dots and underscores.
        ("@powershell-5.1-expert fix it", ("powershell-5.1-expert", "fix it")),
        ("@data_scientist look", ("data_scientist", "look")),
        ("@.hidden look", None),
        ("@../etc look", None),
        ("@a/b look", None),
        ("@Explore find", None),
        ("@-bad find", None),
        ("@explore, find", None),
        ("@", None),
        ("<@U123> find", None),
        ("find @explore", None),
        ("", None),
    ],
)
def test_parse_direct_agent(text: str, expected: tuple[str, str] | None) -> None:
    assert parse_direct_agent(text) == expected
