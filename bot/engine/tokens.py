"""Token counts of requests, offline, calibrated by what the provider reports.

The count uses OpenAI's o200k_base encoding (compiled into the bpe-openai wheel, so
nothing is downloaded). Other providers tokenize differently and add framing of
their own, so each model keeps a ratio of the `prompt_tokens` it reported to what
was counted here, and estimates are scaled by it.
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from collections.abc import Sequence
from typing import Any

from bot.engine.messages import ChatMessage

ENCODING = "o200k_base"
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
# bpe-openai refuses single inputs of a million characters and more; long texts are
# counted in pieces (a piece boundary costs at most a token or two).
_PIECE_CHARS = 200_000
# Ratios outside this range say more about a broken usage report than about tokens.
MIN_RATIO = 0.5
MAX_RATIO = 3.0
# An estimate found too low is corrected fast, one found too high slowly: counting
# low is what makes a request overflow.
_RISE = 0.7
_FALL = 0.2
# A stated window smaller than this is a misread or a lie, not a model's context.
MIN_WINDOW = 1_024


@functools.cache
def _encoding() -> Any:
    with warnings.catch_warnings():
        # bpe-openai reads its tables with importlib.resources.open_binary, which
        # Python 3.11 calls deprecated, as it is imported; nothing to act on here.
        warnings.simplefilter("ignore", DeprecationWarning)
        # Imported here, not with the module: importing it builds every table (most of
        # a second of CPU), which commands that count no tokens need not wait for.
        import bpe_openai

        return bpe_openai.get_encoding(ENCODING)


def load_encoding() -> None:
    """Import the tokenizer and build its tables now (most of a second of CPU), at
    start-up and off the event loop, rather than in the first request of the first run."""
    _encoding()


@functools.lru_cache(maxsize=8192)
def _count_text(text: str) -> int:
    encoding = _encoding()
    return sum(
        len(encoding.encode_ordinary(text[start : start + _PIECE_CHARS]))
        for start in range(0, len(text), _PIECE_CHARS)
    )


def reply_reserve(context_window: int) -> int:
    """Tokens of the window kept free for the model's answer."""
    return min(16_384, context_window // 8)


class TokenCounter:
    """Counts messages and tool schemas in o200k tokens; keeps a per-model calibration."""

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
