"""Text for Slack: its limits, Markdown → mrkdwn, splitting, and the plan of an answer."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from markdown_to_mrkdwn import SlackMarkdownConverter

# Slack's limits, in characters unless the name says otherwise.
MESSAGE_TEXT_LIMIT = 40_000
MESSAGE_BLOCKS_LIMIT = 50
VIEW_BLOCKS_LIMIT = 100  # modals and App Home
SECTION_TEXT_LIMIT = 3_000
MARKDOWN_BLOCKS_LIMIT = 12_000  # all markdown blocks of one message together
HEADER_TEXT_LIMIT = 150
CONTEXT_ELEMENT_TEXT_LIMIT = 2_000
CONTEXT_ELEMENTS_LIMIT = 10
ACTIONS_ELEMENTS_LIMIT = 25
BUTTON_TEXT_LIMIT = 75
BUTTON_VALUE_LIMIT = 2_000
ACTION_ID_LIMIT = 255
BLOCK_ID_LIMIT = 255
MODAL_TITLE_LIMIT = 24
MODAL_BUTTON_LIMIT = 24  # submit and close
PRIVATE_METADATA_LIMIT = 3_000

# Slack reads `<!channel>`, `<!here>`, `<!subteam^…>`, `<@U…>` in a message's text as
# pings. The streamed Markdown becomes the message's text, so a zero-width space keeps
# each `<` that could open one (or that ends a chunk: the rest may come in the next)
# from being read so, and the message looks the same.
_PING = re.compile(r"<(?=[!@](?:[A-Za-z^]|$)|$)")

ZERO_WIDTH_SPACE = "\u200b"

# An answer that needs a file shows this much of its beginning in the thread.
ANSWER_PREVIEW_CHARS = 3_000
NO_ANSWER_TEXT = "(no answer text)"
ANSWER_FILENAME = "answer.md"

_FENCE = re.compile(r"^ {0,3}(`{3,})(.*)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerMessage:
    """One message to post: its fallback `text` and its blocks."""

    text: str
    blocks: list[dict]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerFile:
    """Text too long for messages, uploaded whole as a file."""

    filename: str
    title: str
    content: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerPlan:
    """How an answer reaches the thread: messages, and a file when it is too long for them."""

    messages: list[AnswerMessage]
    file: AnswerFile | None


def to_mrkdwn(markdown: str) -> str:
    """Convert standard Markdown to Slack mrkdwn (for `text` fallbacks and mrkdwn fields)."""
    # The converter keeps state between calls (open code blocks, tables): one per call.
    return SlackMarkdownConverter().convert(markdown)


def escape_mrkdwn(text: str) -> str:
    """Escape the three characters Slack reads as control sequences in mrkdwn.

    Without this a `<!channel>` in a model's answer or a log line would ping a channel.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mrkdwn_fallback(markdown: str) -> str:
    """Markdown as safe mrkdwn: escaped first, then converted."""
    return to_mrkdwn(escape_mrkdwn(markdown))


# --------------------------------------------------------------------- splitting


@dataclass(frozen=True, slots=True)
class _Fence:
    opening: str  # the opening line as written, without indentation: "```python"
    closing: str  # the run of backticks that closes it: "```"


def _fence_states(lines: list[str]) -> list[_Fence | None]:
    """For every line, the fence open just before it (None outside code)."""
    states: list[_Fence | None] = []
    current: _Fence | None = None
    for line in lines:
        states.append(current)
        match = _FENCE.match(line)
        if match is None:
            continue
        ticks, rest = match.groups()
        if current is None:
            if "`" not in rest:
                current = _Fence(opening=line.strip(), closing=ticks)
        elif not rest.strip() and len(ticks) >= len(current.closing):
            current = None
    return states


class _Splitter:
    """One split of one text; see `split_text`."""

    def __init__(self, text: str, limit: int) -> None:
        self.text = text
        self.limit = limit
        self.lines = text.split("\n")
        self.starts: list[int] = []
        offset = 0
        for line in self.lines:
            self.starts.append(offset)
            offset += len(line) + 1
        self.states = [self._usable(state) for state in _fence_states(self.lines)]

    def _usable(self, fence: _Fence | None) -> _Fence | None:
        # A fence whose reopening and closing would eat half a chunk is not
        # repeated; otherwise a tiny limit could never make progress.
        if fence is None or len(fence.opening) + len(fence.closing) + 2 > self.limit // 2:
            return None
        return fence

    def split(self) -> list[str]:
        chunks: list[str] = []
        pos = self._skip_blank_lines(0)
        while pos < len(self.text):
            fence = self.states[self._line_of(pos)]
            prefix = f"{fence.opening}\n" if fence else ""
            end = self._rstripped_end(pos, len(self.text))
            if len(prefix) + end - pos <= self.limit:
                chunks.append(prefix + self.text[pos:end])
                break
            end, closing, following = self._cut(pos, len(prefix))
            if end > pos:
                suffix = f"\n{closing.closing}" if closing else ""
                chunks.append(prefix + self.text[pos:end] + suffix)
            pos = following
        return chunks

    def _cut(self, pos: int, prefix_len: int) -> tuple[int, _Fence | None, int]:
        """Where the chunk starting at `pos` ends.

        Returns the end of its body, the fence to close after the body (None when
        the cut falls outside code) and the start of the next chunk.
        """
        room = self.limit - prefix_len
        return (
            self._cut_at_line(pos, room)
            or self._cut_at_space(pos, room)
            or self._cut_hard(pos, room)
        )

    def _cut_at_line(self, pos: int, room: int) -> tuple[int, _Fence | None, int] | None:
        # Preference: 0 = blank line outside code, 1 = line end outside code,
        # 2 = line end inside code; a cut filling half a chunk beats a better kind.
        half = pos + room // 2
        filled: dict[int, tuple[int, int]] = {}
        any_fill: dict[int, tuple[int, int]] = {}
        first = self._line_of(pos)
        for index in range(self._line_of(min(pos + room + 1, len(self.text))), first, -1):
            end = self._rstripped_end(pos, self.starts[index] - 1)
            if end <= pos:
                break
            fence = self.states[index]
            if end - pos + self._closing_len(fence) > room:
                continue
            if fence is not None:
                kind = 2
            elif not self.lines[index].strip() or not self.lines[index - 1].strip():
                kind = 0
            else:
                kind = 1
            any_fill.setdefault(kind, (index, end))
            if end >= half:
                filled.setdefault(kind, (index, end))
                if kind == 0:
                    break
        for found in (filled, any_fill):
            for kind in (0, 1, 2):
                if kind in found:
                    index, end = found[kind]
                    return end, self.states[index], self._skip_blank_lines(index)
        return None

    def _cut_at_space(self, pos: int, room: int) -> tuple[int, _Fence | None, int] | None:
        # A space in the first half would leave a stub; the long word after it is
        # cut anyway, so cut it at the end of the chunk instead.
        space = self.text.rfind(" ", pos + room // 2, pos + room + 1)
        while space != -1:
            end = self._rstripped_end(pos, space)
            if end <= pos:
                return None
            fence = self._fence_at(space + 1)
            if end - pos + self._closing_len(fence) <= room:
                return end, fence, self._resume(space)
            space = self.text.rfind(" ", pos + room // 2, space)
        return None

    def _cut_hard(self, pos: int, room: int) -> tuple[int, _Fence | None, int]:
        cut = pos + room
        while cut > pos + 1 and cut - pos + self._closing_len(self._fence_at(cut)) > room:
            cut -= 1
        return self._rstripped_end(pos, cut), self._fence_at(cut), self._resume(cut)

    def _fence_at(self, cut: int) -> _Fence | None:
        """The fence open at a cut inside a line (the one before that line)."""
        return self.states[self._line_of(cut - 1)]

    @staticmethod
    def _closing_len(fence: _Fence | None) -> int:
        return len(fence.closing) + 1 if fence else 0

    def _line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset) - 1

    def _skip_blank_lines(self, index: int) -> int:
        """Offset of the first line from `index` on that is not blank outside code."""
        while (
            index < len(self.lines) and self.states[index] is None and not self.lines[index].strip()
        ):
            index += 1
        return self.starts[index] if index < len(self.lines) else len(self.text)

    def _resume(self, offset: int) -> int:
        """Where the next chunk starts after a cut inside a line."""
        while offset < len(self.text) and self.text[offset] in " \t":
            offset += 1
        if offset < len(self.text) and self.text[offset] == "\n":
            return self._skip_blank_lines(self._line_of(offset) + 1)
        return offset

    def _rstripped_end(self, start: int, end: int) -> int:
        while end > start and self.text[end - 1].isspace():
            end -= 1
        return end


def split_text(text: str, limit: int) -> list[str]:
    """Split text into chunks of at most `limit` characters.

    Cuts fall, by preference, at blank lines, then at line ends, then at spaces; a
    single line longer than the limit is the only thing ever cut mid-word. A cut
    that fills at least half a chunk beats a better kind of cut that fills less, so
    chunks do not shrink to stubs; a cut inside a fenced code block is avoided when
    a cut outside one fills at least half a chunk. When a chunk must end inside a
    fence, the fence is closed at its end and reopened (same info string) at the
    start of the next, counted within the limit. Only whitespace at the cuts is
    dropped; empty or blank text gives no chunks.

    Args:
        text: The text to split (Markdown or mrkdwn).
        limit: The largest chunk, in characters.

    Returns:
        The chunks, in order.

    Raises:
        ValueError: If `limit` is below 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    return _Splitter(text, limit).split()


# ----------------------------------------------------------------------- answers


def fit_text(text: str, limit: int = MESSAGE_TEXT_LIMIT) -> str:
    """Text for a message's `text` field: whole, or its beginning with a note saying so.

    Only for fallback text whose full content is also in the blocks or a file.
    """
    if len(text) <= limit:
        return text
    note = f"\n\n_… {len(text):,} characters in all; the message shows the rest._"
    room = limit - len(note)
    head = split_text(text, room)[0]
    if len(head) < room // 2:  # a clean cut would show too little: cut mid-word
        head = text[:room]
    return head + note


def defuse_pings(text: str) -> str:
    """`text` with a zero-width space after every `<` that could start a Slack ping
    (`<!channel>`, `<!here>`, `<!subteam^…>`, `<@U…>`), or that ends the text (the
    next piece of a stream could complete it). It reads the same; nobody is pinged
    by what a model wrote."""
    return _PING.sub("<" + ZERO_WIDTH_SPACE, text)


def _markdown_message(markdown: str, *, marker: str = "") -> AnswerMessage:
    return AnswerMessage(
        text=fit_text(marker + mrkdwn_fallback(markdown)),
        blocks=[{"type": "markdown", "text": defuse_pings(markdown)}],
    )


def plan_answer(markdown: str, *, max_messages: int = 3) -> AnswerPlan:
    """Plan how a run's final answer reaches the thread, never cutting it silently.

    Up to 12,000 characters go in one message; longer answers in up to
    `max_messages` messages of one markdown block each; longer still, the whole
    answer goes in a file and one message shows its beginning and says so.

    Args:
        markdown: The answer, in standard Markdown.
        max_messages: The most messages an answer may take before it becomes a file.

    Returns:
        The messages to post in order, and the file to upload after them, if any.

    Raises:
        ValueError: If `max_messages` is below 1.
    """
    if max_messages < 1:
        raise ValueError(f"max_messages must be at least 1, not {max_messages}")
    if not markdown.strip():
        return AnswerPlan(messages=[_markdown_message(NO_ANSWER_TEXT)], file=None)
    if len(markdown) <= MARKDOWN_BLOCKS_LIMIT:
        return AnswerPlan(messages=[_markdown_message(markdown)], file=None)
    chunks = split_text(markdown, MARKDOWN_BLOCKS_LIMIT)
    if len(chunks) <= max_messages:
        messages = [
            _markdown_message(
                chunk, marker=f"(continued {number}/{len(chunks)})\n" if number > 1 else ""
            )
            for number, chunk in enumerate(chunks, start=1)
        ]
        return AnswerPlan(messages=messages, file=None)
    preview = split_text(markdown, ANSWER_PREVIEW_CHARS)[0]
    note = (
        f"_… the full answer ({len(markdown):,} characters) is in the attached file "
        f"{ANSWER_FILENAME}._"
    )
    message = AnswerMessage(
        text=fit_text(f"{mrkdwn_fallback(preview)}\n\n{note}"),
        blocks=[{"type": "markdown", "text": defuse_pings(f"{preview}\n\n{note}")}],
    )
    return AnswerPlan(
        messages=[message],
        file=AnswerFile(filename=ANSWER_FILENAME, title="Full answer", content=markdown),
    )


# -------------------------------------------------------------------- formatting


def format_age(seconds: float) -> str:
    """How long ago something happened: "just now", "3 min ago", "2 h ago", "5 d ago"."""
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86_400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86_400)} d ago"


# ---------------------------------------------------------------------- mentions


def mention_free(text: str, bot_user_id: str) -> str:
    """Remove every mention of the bot (`<@ID>` or `<@ID|name>`) and the space after it.

    Args:
        text: A message's text as Slack sends it.
        bot_user_id: The bot's own user id; other users' mentions are kept.

    Returns:
        The text without the bot's mentions, stripped.
    """
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>[ \t]*", "", text)
    return text.strip()
