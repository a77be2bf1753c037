"""Fitting a request into the model's context window.

`fit` is pure: it takes the messages of one request and a budget in counted tokens,
and gives back what to send. In order, it

1. trims large old tool outputs to their head and tail, largest (then oldest) first;
2. drops the oldest messages, a note standing where they were;
3. cuts what is always kept (the newest turn first) when that alone is too long.

The system prompt, the current user message, the newest turn (the last assistant
message and what followed it), a summary of folded history and the previous answer
are never dropped. An assistant message with tool calls is dropped together with
its results, so no request holds a call without its result.

Between trimming and dropping, the engine may fold older history into a summary
written by the model: a `Compactor` does that, and `fold_point` says how much.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from bot.engine.messages import ChatMessage, Usage, is_summary
from bot.engine.tokens import REQUEST_OVERHEAD, TokenCounter

# Old tool outputs longer than this are trimmed when the request does not fit...
TRIM_MIN_CHARS = 3_000
# ...to this many characters of their head and tail.
TRIM_KEEP_CHARS = 1_500
# A message cut to fit keeps at least this much.
MIN_KEEP_TOKENS = 32
# Tokens set aside for the notes that stand for dropped messages.
_NOTE_ALLOWANCE = 48


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """Folded history, as the model summarised it, and what writing it cost."""

    text: str
    usage: Usage = field(default_factory=Usage)


class Compactor(Protocol):
    """Folds the oldest part of a stored history into a summary, and keeps it."""

    async def compact(self, messages: Sequence[ChatMessage]) -> Summary:
        """Summarise `messages` (a prefix of the history the run started from)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Fitted:
    """The messages to send, their counted tokens, and what fitting did to them."""

    messages: list[ChatMessage]
    tokens: int
    budget: int
    trimmed: int = 0
    dropped: int = 0
    cut: int = 0
    # Tokens the newest turn would give up to fit (it keeps at least half the budget).
    newest_shrink: int = 0

    @property
    def fits(self) -> bool:
        return self.tokens <= self.budget


def cut_text(text: str, keep_chars: int) -> str:
    """`text` cut to about `keep_chars` characters: its head and tail, and a note between."""
    if len(text) <= keep_chars:
        return text
    head = keep_chars * 2 // 3
    tail = keep_chars - head
    left_out = len(text) - head - tail
    note = f"[… {left_out:,} characters left out to fit the context …]"
    if not tail:
        return f"{text[:head]}\n{note}"
    return f"{text[:head]}\n{note}\n{text[len(text) - tail :]}"


def left_out_note(count: int) -> ChatMessage:
    noun = "message was" if count == 1 else "messages were"
    return ChatMessage(
        role="user", content=f"[{count} earlier {noun} left out here to fit the context.]"
    )


def newest_turn_start(messages: Sequence[ChatMessage], prompt_index: int) -> int:
    """Where the newest turn begins: the last assistant message after the prompt, or the prompt."""
    for index in range(len(messages) - 1, prompt_index, -1):
        if messages[index].role == "assistant":
            return index
    return prompt_index


def fit(
    messages: Sequence[ChatMessage],
    *,
    budget: int,
    counter: TokenCounter,
    prompt_index: int,
    drop: bool = True,
) -> Fitted:
    """Fit `messages` into `budget` counted tokens; `prompt_index` is the current user message.

    With `drop=False` only old tool outputs are trimmed (the engine folds history
    before it drops any). Past what it can do, the result says it does not fit.
    """
    work = list(messages)
    sizes = [counter.message(m) for m in work]
    total = REQUEST_OVERHEAD + sum(sizes)
    if total <= budget:
        return Fitted(messages=work, tokens=total, budget=budget)
    newest = newest_turn_start(work, prompt_index)

    trimmed = 0
    old_outputs = [
        i
        for i, m in enumerate(work[:newest])
        if m.role == "tool" and len(m.content or "") > TRIM_MIN_CHARS
    ]
    for i in sorted(old_outputs, key=lambda i: (-sizes[i], i)):
        if total <= budget:
            break
        work[i] = replace(work[i], content=cut_text(work[i].content or "", TRIM_KEEP_CHARS))
        size = counter.message(work[i])
        total += size - sizes[i]
        sizes[i] = size
        trimmed += 1
    newest_tokens = sum(sizes[newest:])
    newest_shrink = max(0, newest_tokens - budget // 2)
    if total <= budget or not drop:
        return Fitted(
            messages=work,
            tokens=total,
            budget=budget,
            trimmed=trimmed,
            newest_shrink=newest_shrink,
        )

    # An oversized newest turn gives up its bulk before older messages go for it: at
    # most half of the budget, so the previous exchange stays with it.
    cut = 0
    if newest_shrink:
        items: list[tuple[int | None, ChatMessage]] = list(enumerate(work))
        outputs = [i for i in range(newest, len(work)) if work[i].role == "tool"]
        outputs.sort(key=lambda i: -sizes[i])
        target = total - min(newest_shrink, total - budget)
        total, cut = _shrink(items, outputs, total, target, counter)
        work = [m for _, m in items]
        sizes = [counter.message(m) for m in work]

    kept = [True] * len(work)
    dropped = 0
    pinned = _pinned(work, prompt_index, newest)
    for unit in _units(work, newest):
        if total + _NOTE_ALLOWANCE <= budget:
            break
        if any(i in pinned for i in unit):
            continue
        for i in unit:
            kept[i] = False
            total -= sizes[i]
            dropped += 1

    result: list[tuple[int | None, ChatMessage]] = []
    gap = 0
    for i, message in enumerate(work):
        if not kept[i]:
            gap += 1
            continue
        if gap:
            result.append((None, left_out_note(gap)))
            gap = 0
        result.append((i, message))
    total = counter.messages([m for _, m in result])
    if total > budget:
        total, more = _cut_kept(result, total, budget, counter, newest)
        cut = max(cut, more)
    return Fitted(
        messages=[m for _, m in result],
        tokens=total,
        budget=budget,
        trimmed=trimmed,
        dropped=dropped,
        cut=cut,
    )


def fold_point(history: Sequence[ChatMessage], *, counter: TokenCounter, keep_tokens: int) -> int:
    """How many leading messages of `history` to fold into a summary; 0 when none.

    The cut falls before a user message, so tool calls stay with their results; what
    is kept is the newest part within `keep_tokens`, and at least the last exchange
    (the previous answer stays word for word).
    """
    starts = [i for i, m in enumerate(history) if m.role == "user" and not is_summary(m)]
    if not starts:
        return 0
    point = starts[-1]
    suffix = sum(counter.message(m) for m in history[point:])
    for start in reversed(starts[:-1]):
        suffix += sum(counter.message(m) for m in history[start:point])
        if suffix > keep_tokens:
            break
        point = start
    if not any(not is_summary(m) for m in history[:point]):
        return 0  # nothing but an earlier summary to fold
    return point


def _pinned(work: Sequence[ChatMessage], prompt_index: int, newest: int) -> set[int]:
    pinned = {prompt_index, *range(newest, len(work))}
    pinned |= {i for i, m in enumerate(work) if m.role == "system" or is_summary(m)}
    previous_answer = next(
        (
            i
            for i in range(prompt_index - 1, -1, -1)
            if work[i].role == "assistant" and work[i].content and not work[i].tool_calls
        ),
        None,
    )
    if previous_answer is not None:
        pinned.add(previous_answer)
    return pinned


def _units(work: Sequence[ChatMessage], end: int) -> list[list[int]]:
    """Indices before `end` grouped so that a tool call and its results go together."""
    units: list[list[int]] = []
    i = 0
    while i < end:
        unit = [i]
        if work[i].role == "assistant" and work[i].tool_calls:
            while i + 1 < end and work[i + 1].role == "tool":
                i += 1
                unit.append(i)
        units.append(unit)
        i += 1
    return units


def _cut_kept(
    result: list[tuple[int | None, ChatMessage]],
    total: int,
    budget: int,
    counter: TokenCounter,
    newest: int,
) -> tuple[int, int]:
    """Cut kept messages until the request fits: newest tool outputs first, largest first.

    Changes `result` in place; returns the new total and how many messages were cut.
    The system prompt and the notes are left whole.
    """

    def order(position: int) -> tuple[int, int]:
        index, message = result[position]
        newest_output = index is not None and index >= newest and message.role == "tool"
        return (0 if newest_output else 1, -counter.text(message.content))

    candidates = [
        p
        for p, (index, message) in enumerate(result)
        if index is not None and message.role != "system" and message.content
    ]
    return _shrink(result, sorted(candidates, key=order), total, budget, counter)


def _shrink(
    items: list[tuple[int | None, ChatMessage]],
    positions: list[int],
    total: int,
    target: int,
    counter: TokenCounter,
) -> tuple[int, int]:
    """Cut the messages at `positions`, in that order, until `total` is down to `target`.

    Changes `items` in place; returns the new total and how many messages were cut.
    """
    cut: set[int] = set()
    for _ in range(3):  # token density varies along a text: a second pass mops up
        for position in positions:
            over = total - target
            if over <= 0:
                return total, len(cut)
            index, message = items[position]
            content = message.content or ""
            tokens = counter.text(content)
            if not tokens:
                continue
            keep = max(MIN_KEEP_TOKENS, tokens - over - 24)
            if keep >= tokens:
                continue
            shorter = replace(message, content=cut_text(content, len(content) * keep // tokens))
            total += counter.message(shorter) - counter.message(message)
            items[position] = (index, shorter)
            cut.add(position)
    return total, len(cut)
