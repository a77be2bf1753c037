"""Token counts, calibration, and fitting a request into a budget (pure functions)."""

from __future__ import annotations

import re

import pytest

from bot.engine.context import (
    TRIM_KEEP_CHARS,
    cut_text,
    fit,
    fold_point,
    newest_turn_start,
)
from bot.engine.messages import ChatMessage, ToolCall, is_summary, summary_message
from bot.engine.tokens import MAX_RATIO, MIN_RATIO, TokenCounter, reply_reserve

COUNTER = TokenCounter()
LEFT_OUT = re.compile(r"\[… ([\d,]+) characters left out to fit the context …\]")


def system() -> ChatMessage:
    return ChatMessage(role="system", content="You are a test.")


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def answer(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def call(call_id: str) -> ChatMessage:
    return ChatMessage(
        role="assistant",
        tool_calls=(ToolCall(id=call_id, name="read_file", arguments='{"path": "a"}'),),
    )


def output(call_id: str, text: str) -> ChatMessage:
    return ChatMessage(role="tool", content=text, tool_call_id=call_id, name="read_file")


def big(n: int, seed: str = "line") -> str:
    return "\n".join(f"{seed} {i}: some output of a tool, with words" for i in range(n))


def assert_paired(messages: list[ChatMessage]) -> None:
    """Every tool call has its result right after it, and every result its call."""
    pending: set[str] = set()
    for message in messages:
        if message.role == "tool":
            assert message.tool_call_id in pending, "a result without its call"
            pending.discard(message.tool_call_id)
            continue
        assert not pending, "a call without its result"
        pending = {c.id for c in message.tool_calls}
    assert not pending


# ----------------------------------------------------------------------------- counting


def test_counts_are_estimated_tokens_plus_framing() -> None:
    assert COUNTER.text("hello world") == 2  # as o200k counts it
    assert COUNTER.text("") == 0
    assert COUNTER.message(user("hello world")) == 2 + 4
    with_call = call("c1")
    assert COUNTER.message(with_call) > COUNTER.message(answer(""))
    assert COUNTER.messages([user("hello world")]) == 6 + 3


def test_long_texts_and_special_token_strings_are_counted() -> None:
    text = "word " * 300_000  # counted in pieces (a 1.5 MB text is not copied whole)
    assert 300_000 <= COUNTER.text(text) < 330_000  # o200k: 300,000; estimates count high
    assert COUNTER.text("<|endoftext|>") > 1  # plain text here, never a special token


def test_tool_schemas_count() -> None:
    schema = {"type": "function", "function": {"name": "read_file", "parameters": {}}}
    assert COUNTER.tools([]) == 0
    assert COUNTER.tools([schema]) > 5


def test_the_answer_reserve() -> None:
    assert reply_reserve(128_000) == 16_000
    assert reply_reserve(1_000_000) == 16_384
    assert reply_reserve(16_000) == 2_000


# ----------------------------------------------------------------------------- calibration


def test_calibration_starts_at_one_and_learns_per_model() -> None:
    counter = TokenCounter()
    assert counter.ratio("m") == 1.0
    counter.calibrate("m", estimated=1_000, reported=1_500)
    assert 1.3 < counter.ratio("m") < 1.5  # a low count is corrected fast
    assert counter.ratio("other") == 1.0
    for _ in range(30):
        counter.calibrate("m", estimated=1_000, reported=1_500)
    assert counter.ratio("m") == pytest.approx(1.5, abs=0.01)
    assert counter.scaled("m", 1_000) == 1_500
    assert counter.budget("m", 1_500) == 1_000


def test_calibration_falls_slowly_and_is_clamped() -> None:
    counter = TokenCounter()
    counter.calibrate("m", estimated=1_000, reported=800)
    assert 0.9 < counter.ratio("m") < 1.0
    for _ in range(100):
        counter.calibrate("m", estimated=100, reported=10_000)
    assert counter.ratio("m") == pytest.approx(MAX_RATIO)
    for _ in range(200):
        counter.calibrate("m", estimated=10_000, reported=10)
    assert counter.ratio("m") == pytest.approx(MIN_RATIO, abs=0.01)


def test_no_reported_usage_teaches_nothing() -> None:
    counter = TokenCounter()
    counter.calibrate("m", estimated=1_000, reported=0)
    assert counter.ratio("m") == 1.0
    counter.distrust("m")
    assert counter.ratio("m") == 1.25


# ----------------------------------------------------------------------------- fitting


def test_cut_text_keeps_head_and_tail_and_says_how_much_went() -> None:
    text = "H" * 1_000 + "m" * 24_310 + "T" * 500
    cut = cut_text(text, 1_500)
    assert cut.startswith("H" * 1_000) and cut.endswith("T" * 500)
    assert "[… 24,310 characters left out to fit the context …]" in cut
    assert cut_text("short", 100) == "short"


def test_a_request_that_fits_is_left_alone() -> None:
    messages = [system(), user("hi"), answer("hello"), user("again")]
    fitted = fit(messages, budget=1_000, counter=COUNTER, prompt_index=3)
    assert fitted.messages == messages and fitted.fits
    assert (fitted.trimmed, fitted.dropped, fitted.cut) == (0, 0, 0)


def thread(turns: int, output_lines: int = 400) -> list[ChatMessage]:
    messages = [system()]
    for turn in range(turns):
        messages += [
            user(f"question {turn}"),
            call(f"c{turn}"),
            output(f"c{turn}", big(output_lines, f"t{turn}")),
            answer(f"answer {turn}"),
        ]
    return messages


def test_old_tool_outputs_are_trimmed_first_largest_first() -> None:
    history = thread(4)
    history[6] = output("c1", big(800, "t1"))  # the largest
    messages = [*history, user("now")]
    whole = COUNTER.messages(messages)
    budget = whole - 5_000
    fitted = fit(messages, budget=budget, counter=COUNTER, prompt_index=len(messages) - 1)
    assert fitted.fits and fitted.dropped == 0
    assert fitted.trimmed == 1
    trimmed = fitted.messages[6]
    assert trimmed.content is not None and LEFT_OUT.search(trimmed.content)
    assert trimmed.content.startswith("t1 0:") and trimmed.content.endswith(big(800, "t1")[-500:])
    assert len(trimmed.content) < TRIM_KEEP_CHARS + 100
    assert all(m == o for m, o in zip(fitted.messages, messages, strict=True) if m is not trimmed)
    assert fitted.tokens == COUNTER.messages(fitted.messages)


def test_without_drop_only_trimming_happens() -> None:
    messages = [*thread(10, output_lines=10), user("now")]
    fitted = fit(messages, budget=100, counter=COUNTER, prompt_index=len(messages) - 1, drop=False)
    assert not fitted.fits and fitted.dropped == 0
    assert fitted.messages == messages  # outputs too small to trim


def test_the_oldest_messages_are_dropped_with_a_note_keeping_pairs() -> None:
    messages = [*thread(30, output_lines=10), user("now")]
    budget = COUNTER.messages(messages) // 3
    fitted = fit(messages, budget=budget, counter=COUNTER, prompt_index=len(messages) - 1)
    assert fitted.fits and fitted.dropped > 0
    kept = fitted.messages
    assert kept[0] == messages[0]  # the system prompt
    assert kept[1].role == "user" and "left out here to fit the context" in (kept[1].content or "")
    assert str(fitted.dropped) in (kept[1].content or "")
    assert kept[-1] == user("now")
    assert kept[-2] == answer("answer 29")  # the previous answer
    assert_paired(kept)
    assert len(kept) == len(messages) - fitted.dropped + 1


def test_the_previous_answer_survives_an_oversized_turn() -> None:
    history = [system(), user("What is the plan?"), answer("The plan: build, test, ship.")]
    prompt = user("read the log")
    run = [call("c1"), output("c1", big(3_000)), output("c2", big(3_000))]
    run[0] = ChatMessage(
        role="assistant",
        tool_calls=(
            ToolCall(id="c1", name="read_file", arguments="{}"),
            ToolCall(id="c2", name="read_file", arguments="{}"),
        ),
    )
    messages = [*history, prompt, *run]
    fitted = fit(messages, budget=2_000, counter=COUNTER, prompt_index=3)
    assert fitted.fits and fitted.cut == 2
    kept = fitted.messages
    assert answer("The plan: build, test, ship.") in kept
    assert prompt in kept and kept[0] == system()
    assert [m.role for m in kept[-3:]] == ["assistant", "tool", "tool"]
    assert all(LEFT_OUT.search(m.content or "") for m in kept[-2:])
    assert_paired(kept)


def test_within_a_run_older_steps_go_and_the_newest_turn_stays() -> None:
    messages = [system(), user("task")]
    for step in range(20):
        messages += [call(f"c{step}"), output(f"c{step}", big(30, f"s{step}"))]
    budget = COUNTER.messages(messages) // 4
    fitted = fit(messages, budget=budget, counter=COUNTER, prompt_index=1)
    assert fitted.fits
    kept = fitted.messages
    assert kept[:2] == messages[:2]
    assert kept[-2:] == messages[-2:]
    assert "left out here" in (kept[2].content or "")
    assert_paired(kept)


def test_the_newest_tool_output_is_cut_to_fit() -> None:
    messages = [system(), user("go"), call("c1"), output("c1", big(5_000))]
    fitted = fit(messages, budget=1_000, counter=COUNTER, prompt_index=1)
    assert fitted.fits and fitted.cut == 1
    content = fitted.messages[-1].content or ""
    assert content.startswith("line 0:") and LEFT_OUT.search(content)
    assert fitted.tokens > 700  # cut to fit, not emptied


def test_a_summary_is_kept_while_older_messages_go() -> None:
    messages = [system(), summary_message("We fixed the build."), *thread(20)[1:], user("now")]
    budget = COUNTER.messages(messages) // 5
    fitted = fit(messages, budget=budget, counter=COUNTER, prompt_index=len(messages) - 1)
    assert fitted.fits
    assert is_summary(fitted.messages[1])


def test_newest_turn_start() -> None:
    messages = [system(), user("go"), call("c1"), output("c1", "x"), call("c2"), output("c2", "y")]
    assert newest_turn_start(messages, 1) == 4
    assert newest_turn_start(messages[:2], 1) == 1


# ----------------------------------------------------------------------------- folding


def test_fold_point_keeps_the_newest_exchanges_within_the_budget() -> None:
    history = thread(10, output_lines=20)[1:]
    point = fold_point(history, counter=COUNTER, keep_tokens=1_000)
    assert 0 < point < len(history)
    assert history[point].role == "user"
    assert sum(COUNTER.message(m) for m in history[point:]) <= 1_000
    assert_paired(history[point:])


def test_fold_point_keeps_at_least_the_last_exchange() -> None:
    history = thread(3, output_lines=200)[1:]
    assert fold_point(history, counter=COUNTER, keep_tokens=10) == 8
    # One exchange only, or nothing but a summary before it: nothing to fold.
    assert fold_point(history[:4], counter=COUNTER, keep_tokens=10) == 0
    assert fold_point([summary_message("s"), *history[8:]], counter=COUNTER, keep_tokens=1) == 0
