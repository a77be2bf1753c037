"""Pure history helpers: repairing cut-short runs, marking summaries."""

from __future__ import annotations

from bot.engine.messages import (
    INTERRUPTED_TOOL_RESULT,
    ChatMessage,
    ToolCall,
    Usage,
    is_summary,
    repair_history,
    summary_message,
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


def test_a_summary_is_a_marked_user_message() -> None:
    message = summary_message("We talked about the build.")
    assert message.role == "user" and is_summary(message)
    assert message.content is not None and message.content.endswith("We talked about the build.")
    assert not is_summary(user("We talked about the build."))


def test_usage_adds_up() -> None:
    total = Usage(prompt_tokens=3, completion_tokens=4, requests=1) + Usage(
        prompt_tokens=10, completion_tokens=1, requests=1
    )
    assert (total.prompt_tokens, total.completion_tokens, total.requests) == (13, 5, 2)
    assert total.total_tokens == 18
