"""Pure history helpers: repairing cut-short runs and fitting long histories."""

from __future__ import annotations

from bot.engine.messages import (
    HISTORY_CUT_NOTE,
    INTERRUPTED_TOOL_RESULT,
    ChatMessage,
    ToolCall,
    Usage,
    fit_history,
    repair_history,
)


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str, *calls: ToolCall) -> ChatMessage:
    return ChatMessage(role="assistant", content=text, tool_calls=calls)


def result(call_id: str) -> ChatMessage:
    return ChatMessage(role="tool", content="ok", tool_call_id=call_id, name="bash")


CALL = ToolCall(id="c1", name="bash", arguments="{}")


def test_repair_fills_missing_results_and_drops_orphans() -> None:
    history = [user("go"), assistant("", CALL), result("zzz"), user("next")]
    repaired = repair_history(history)
    assert [m.role for m in repaired] == ["user", "assistant", "tool", "user"]
    assert repaired[2].tool_call_id == "c1" and repaired[2].content == INTERRUPTED_TOOL_RESULT


def test_repair_keeps_a_sound_history_as_it_is() -> None:
    history = [user("go"), assistant("", CALL), result("c1"), assistant("done")]
    assert repair_history(history) == history


def test_fit_history_keeps_short_histories_whole() -> None:
    history = [user("a" * 10), assistant("b" * 10)]
    assert fit_history(history, 100) == history


def test_fit_history_cuts_before_a_user_message_and_says_so() -> None:
    history = [
        user("a" * 100), assistant("", CALL), result("c1"), assistant("b" * 100),
        user("c" * 10), assistant("d" * 10),
    ]  # fmt: skip
    fitted = fit_history(history, 50)
    assert fitted[0].content == HISTORY_CUT_NOTE
    assert fitted[1:] == history[4:]
    # A tool call is never separated from its result.
    assert all(m.role != "tool" for m in fitted)


def test_usage_adds_up() -> None:
    total = Usage(prompt_tokens=3, completion_tokens=4, requests=1) + Usage(
        prompt_tokens=10, completion_tokens=1, requests=1
    )
    assert (total.prompt_tokens, total.completion_tokens, total.requests) == (13, 5, 2)
    assert total.total_tokens == 18
