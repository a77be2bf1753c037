"""Token counts of requests, offline and without tokenizer tables, calibrated by what
the provider reports.

OpenAI's o200k_base tokenizer would count exactly, but its tables cost a replica about
125 MB. The count here is an estimate from the text's character classes
(`estimate_tokens`), fitted to o200k_base on English, code, JSON, logs, some twenty
other languages, emoji and random strings: it counts typical text 5-35 % high, and
3,000-character samples of every kind were never more than about 10 % low (the
figures are in `estimate_tokens`). Counting high is the safe side: a request fitted
with this count fits. Providers tokenize differently anyway and add framing of their
own, so each model keeps a ratio of the `prompt_tokens` it reported to what was
counted here, and estimates are scaled by it, which takes out most of the margin.
"""

from __future__ import annotations

import json
import math
import string
import threading
from collections.abc import Sequence
from typing import Any

from bot.engine.messages import ChatMessage

# Chat framing the provider adds around each message, each tool call and the request.
MESSAGE_OVERHEAD = 4
CALL_OVERHEAD = 8
REQUEST_OVERHEAD = 3
# An image part, whatever its size. OpenAI bills an image at high detail as 85 tokens
# plus 170 per 512-pixel tile of the image scaled to fit 2048 pixels and then to 768 on
# its short side: a square screenshot comes to 4 tiles, 765 tokens. Wider images cost
# more (up to 1,445 for a long strip, 2x4 tiles), smaller or "low" ones less; providers
# differ again. One fixed figure keeps counting pure (no image decoding here), and the
# per-model calibration absorbs the difference once the provider reports its usage.
IMAGE_TOKENS = 765
# Ratios outside this range say more about a broken usage report than about tokens.
MIN_RATIO = 0.5
MAX_RATIO = 3.0
# An estimate found too low is corrected fast, one found too high slowly: counting
# low is what makes a request overflow.
_RISE = 0.7
_FALL = 0.2
# A stated window smaller than this is a misread or a lie, not a model's context.
MIN_WINDOW = 1_024

# The estimate's weights, fitted to o200k_base. Text is read as UTF-8 bytes, each byte
# sorted into a class: an ASCII letter (lower or upper case), digit, space, line break,
# punctuation or other control character, or the first byte of a longer character,
# whose length and range say its script roughly.
_WORD = 1.0  # a run of ASCII letters, split where a lower-case letter meets an upper-case one
_LONG_WORD = 0.3  # each letter past five a word, on average over the text
_UPPER = 0.5  # each upper-case letter: identifiers and random strings split more
_DIGIT = 1 / 3  # a run of digits is split in threes...
_DIGITS = 2 / 3  # ...so n digits are at most (n + 2) / 3 tokens
_SPACE_DIGIT = 1.0  # a space before a digit is a token of its own
_PUNCTUATION = 0.5  # each ASCII punctuation character
_REPEATED = -3.75  # each 8 of one punctuation character in a row ("--------"): 0.25 left
_CONTROL = 0.75  # each tab or other control character
_LINE = 2.4  # each run of line breaks, with what starts the next line
_LINE_BREAK = 1 / 16  # each line break: a run of 16 is one token
_SPACES = 1 / 32  # each two spaces in a row: 64 spaces are one token
_TWO_BYTES = 0.42  # U+0080-07FF: accented Latin, Greek, Cyrillic, Hebrew, Arabic
_INDIC = 0.5  # U+0800-1FFF: Indic scripts, Thai, Georgian, Khmer
_SYMBOL = 0.75  # U+2000-2FFF and U+E000-FFFF: punctuation, symbols, full-width forms
_CJK = 0.93  # U+3000-D7FF: CJK ideographs, kana, Hangul
_FOUR_BYTES = 2.5  # U+10000 and up: emoji, rarer ideographs
# The weights' own error reaches 8 % low on English prose (punctuation-heavy text, like
# regular expressions): the sum is taken this much higher.
_MARGIN = 1.05
_REPEATS = tuple((c * 8).encode() for c in "-=*#_~./+<>")
# Long texts are estimated in pieces, so the copies made of each stay small.
_PIECE_CHARS = 1 << 18


def _byte_class(byte: int) -> bytes:
    """The class of one byte of UTF-8 text (see the weights above)."""
    if byte < 0x80:
        char = chr(byte)
        if char in string.ascii_lowercase:
            return b"a"
        if char in string.ascii_uppercase:
            return b"A"
        if char in string.digits:
            return b"0"
        if char in string.punctuation:
            return b"."
        return {" ": b" ", "\n": b"\n", "\r": b"\n"}.get(char, b"\t")
    if byte < 0xC0:
        return b"c"  # a continuation byte: no character of its own
    if byte < 0xE0:
        return b"2"
    if byte < 0xE2:
        return b"i"
    if byte == 0xE2 or 0xEE <= byte < 0xF0:
        return b"p"
    return b"C" if byte < 0xEE else b"4"


_CLASSES = b"".join(_byte_class(byte) for byte in range(256))


def _marking(*kinds: bytes) -> bytes:
    """A table for `bytes.translate` that turns every byte of the classes `kinds` into
    b"x", and every other byte into b" "."""
    return bytes(ord("x") if _CLASSES[b : b + 1] in kinds else ord(" ") for b in range(256))


_LETTERS = _marking(b"a", b"A")
_DIGIT_MARKS = _marking(b"0")
_LINE_MARKS = _marking(b"\n")


def _runs(raw: bytes, marking: bytes) -> int:
    """How many runs of the marked classes `raw` holds."""
    marked = raw.translate(marking)
    return marked.count(b" x") + marked.startswith(b"x")


def estimate_tokens(text: str) -> int:
    """About how many o200k_base tokens `text` is, counting high rather than low.

    A weighted sum of counts of the text's character classes (the weights above), at
    about 25 MB a second. Measured on 3,000-character samples against o200k_base
    (estimate / exact, the lowest and the medians): English prose 0.94 / 1.10-1.16;
    Python, JavaScript, C and JSON 0.93 / 1.14-1.35; Chinese, Japanese and Korean
    1.07 / 1.09-1.36; Cyrillic, Greek, Arabic, Hebrew, Vietnamese, Indic scripts and
    Thai 0.90 / 1.06-1.61; emoji 1.04 / 1.06-1.18; logs, URLs, numbers, base64, hex
    and UUIDs 1.02 / 1.04-1.20. A word repeated without spaces counts 0.94-2.6 times
    (o200k merges some repeats, not others). Only text of rare characters (random code
    points) counts far low, about 0.4: o200k has no tokens for them and spends one
    or more a byte.
    """
    if not text:
        return 0
    total = sum(
        _estimate(text[start : start + _PIECE_CHARS]) for start in range(0, len(text), _PIECE_CHARS)
    )
    return max(1, round(total * _MARGIN))


def _estimate(text: str) -> float:
    raw = text.encode("utf-8", "surrogatepass")
    classes = raw.translate(_CLASSES)
    count = classes.count
    words = _runs(raw, _LETTERS) + count(b"aA")
    letters = count(b"a") + count(b"A")
    return (
        _WORD * words
        + _LONG_WORD * max(0, letters - 5 * words)
        + _UPPER * count(b"A")
        + _DIGIT * count(b"0")
        + _DIGITS * _runs(raw, _DIGIT_MARKS)
        + _SPACE_DIGIT * count(b" 0")
        + _PUNCTUATION * count(b".")
        + _REPEATED * sum(raw.count(repeat) for repeat in _REPEATS)
        + _CONTROL * count(b"\t")
        + _LINE * _runs(raw, _LINE_MARKS)
        + _LINE_BREAK * count(b"\n")
        + _SPACES * count(b"  ")
        + _TWO_BYTES * count(b"2")
        + _INDIC * count(b"i")
        + _SYMBOL * count(b"p")
        + _CJK * count(b"C")
        + _FOUR_BYTES * count(b"4")
    )


class _Counts:
    """Counts of texts counted lately, kept by a hash of each text and its length, not
    by the texts: a cache holding them would hold every tool output of every thread."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._counts: dict[int, int] = {}
        self._lock = threading.Lock()  # counting may run on worker threads too

    def __call__(self, text: str) -> int:
        key = hash((hash(text), len(text)))  # a str keeps its own hash: cheap once made
        with self._lock:
            found = self._counts.get(key)
        if found is not None:
            return found
        counted = estimate_tokens(text)
        with self._lock:
            if len(self._counts) >= self._size:
                del self._counts[next(iter(self._counts))]  # the oldest
            self._counts[key] = counted
        return counted


# About 100 bytes an entry.
_count_text = _Counts(8_192)


def reply_reserve(context_window: int) -> int:
    """Tokens of the window kept free for the model's answer."""
    return min(16_384, context_window // 8)


class TokenCounter:
    """Counts messages and tool schemas in estimated o200k tokens (`estimate_tokens`);
    keeps a per-model calibration."""

    def __init__(self) -> None:
        self._ratios: dict[str, float] = {}
        # Windows providers stated when they refused a request (smaller than configured).
        self._windows: dict[str, int] = {}

    def text(self, text: str | None) -> int:
        """Tokens of a text; a list of content parts is counted as `content` does."""
        if not text:
            return 0
        if not isinstance(text, str):
            return self.content(text)
        return _count_text(text)

    def content(self, content: object) -> int:
        """A message content as Chat Completions takes it: a string, or a list of parts
        (text counted, each image a fixed `IMAGE_TOKENS`, never its data URL)."""
        if isinstance(content, str):
            return self.text(content)
        tokens = 0
        for part in content if isinstance(content, list | tuple) else ():
            if not isinstance(part, dict):
                continue
            if part.get("type") == "image_url":
                tokens += IMAGE_TOKENS
            elif isinstance(part.get("text"), str):
                tokens += self.text(part["text"])
        return tokens

    def message(self, message: ChatMessage) -> int:
        tokens = MESSAGE_OVERHEAD + self.text(message.content) + self.text(message.name)
        tokens += IMAGE_TOKENS * len(message.images)
        for call in message.tool_calls:
            tokens += CALL_OVERHEAD + self.text(call.name) + self.text(call.arguments)
        return tokens

    def messages(self, messages: Sequence[ChatMessage]) -> int:
        return REQUEST_OVERHEAD + sum(self.message(m) for m in messages)

    def tools(self, schemas: Sequence[dict[str, Any]]) -> int:
        return self.text(json.dumps(list(schemas))) if schemas else 0

    def ratio(self, model: str) -> float:
        """Reported over counted tokens for `model`, 1.0 until it has reported any."""
        return self._ratios.get(model, 1.0)

    def calibrate(self, model: str, *, estimated: int, reported: int) -> None:
        """Learn from one request: `estimated` counted here, `reported` by the provider."""
        if estimated <= 0 or reported <= 0:
            return  # a provider that reports no usage teaches nothing
        observed = min(MAX_RATIO, max(MIN_RATIO, reported / estimated))
        current = self.ratio(model)
        weight = _RISE if observed > current else _FALL
        self._ratios[model] = current + weight * (observed - current)

    def distrust(self, model: str, factor: float = 1.25) -> None:
        """The provider found a request longer than counted: count `model` higher."""
        self._ratios[model] = min(MAX_RATIO, self.ratio(model) * factor)

    def learn_window(self, model: str, tokens: int) -> None:
        """The provider said `model` takes at most `tokens`: later requests keep to it."""
        if tokens < MIN_WINDOW:
            return
        self._windows[model] = min(tokens, self._windows.get(model, tokens))

    def window(self, model: str, configured: int | None) -> int | None:
        """The context window to fit `model`'s requests in: the configured or a learned one."""
        learned = self._windows.get(model)
        if learned is None or (configured is not None and configured <= learned):
            return configured
        return learned

    def scaled(self, model: str, tokens: int) -> int:
        """`tokens` counted here, as the provider of `model` is expected to count them."""
        return math.ceil(tokens * self.ratio(model))

    def budget(self, model: str, tokens: int) -> int:
        """How many tokens counted here fit in `tokens` of the provider's."""
        return math.floor(tokens / self.ratio(model))
