"""`POST /hooks/<name>`: a delivery to a webhook of baton.yaml, verified, taken once, and
its run started.

A sender signs each delivery with the webhook's secret (the variable its `secret_env`
names), HMAC-SHA256 over the exact bytes received, in one of two forms:

- Baton's: `X-Baton-Timestamp: <unix seconds>` and `X-Baton-Signature: sha256=<hex>`,
  the HMAC of `<timestamp>.<body>` (as Stripe and Slack sign). The timestamp is signed,
  and a delivery more than 5 minutes from Baton's clock, either way, is refused: a
  captured delivery sent again later fails, with its old timestamp or a new one.
- GitHub's: `X-Hub-Signature-256: sha256=<hex>`, the HMAC of the body (a repository's
  or an organisation's webhook, content type `application/json`). GitHub's SHA-1
  `X-Hub-Signature` is refused.

Each delivery names itself in `X-Baton-Delivery` or GitHub's `X-GitHub-Delivery` (1 to
128 letters, digits, `.`, `_`, `:` and `-`) and is taken once, by whichever replica gets
it first. The id is not signed, so the signature is taken once too: the same signed body
sent again under a new id is a replay as well (a sender that sends one body twice on
purpose uses Baton's form, whose timestamp makes each signature new). When the run
cannot start (Slack refuses the announcement, the database fails), both are released:
the same delivery sent again is taken.

The answers, checked in this order (a caller whose signature does not hold learns only
whether the webhook exists):

| status | result (metric) | why |
|---|---|---|
| 404 | `not_found` | no webhook of that name |
| 413 | `too_large` | a body over 1 MiB |
| 401 | `bad_signature` | not signed, a signature in neither form, or a wrong one |
| 400 | `bad_timestamp` | Baton's timestamp is not a number of seconds |
| 401 | `stale` | Baton's timestamp is more than 5 minutes away |
| 400 | `bad_delivery` | no delivery id, or one with other characters |
| 415 | `bad_content_type` | not `application/json` |
| 400 | `bad_json` | not JSON, or not an object |
| 200 | `pong` | GitHub's `ping` event: nothing runs |
| 409 | `replay` | that delivery id, or that signature, was taken already |
| 503 | `not_started` | Baton began shutting down |
| 502 | `not_started` | Slack refused the run's first message, or the database failed |
| 202 | `started` | a run starts |

On a 502 or 503 nothing is kept claimed: the same delivery sent again is taken.

Each answer is counted in `baton_webhook_deliveries_total{webhook, result}`, `webhook`
being the name in baton.yaml, or `unknown` (never the caller's path); what the server
refuses before Baton sees it (a header over 8 KiB, a path no route matches, a 503 while
draining) is not.

The run is the webhook's owner's (their access, limits and budget apply), in its
channel, in the thread of a new message that names the webhook and the delivery, never
the payload's text; the prompt is the webhook's template with the payload's fields
marked as data (`bot.triggers.template`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Any

from bot import metrics
from bot.errors import BatonError
from bot.store import EventLedger
from bot.triggers.book import TriggerBook
from bot.triggers.clock import SYSTEM_CLOCK, Clock
from bot.triggers.definitions import WebhookConfig
from bot.triggers.launch import Launch, Launcher, trigger_key
from bot.triggers.template import render

logger = logging.getLogger(__name__)

MAX_DELIVERY_BYTES = 1024 * 1024
"""The largest body taken (aiohttp's `client_max_size` refuses a larger one unread)."""

TIMESTAMP_WINDOW_S = 300
"""How far Baton's timestamp may be from Baton's clock, either way."""

UNKNOWN = "unknown"
"""The metric's `webhook` label for a name baton.yaml does not list."""

_DELIVERY_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


class HookRefused(BatonError):
    """A delivery Baton did not act on: the HTTP `status` to answer, and the `result`
    the metric counts it as."""

    def __init__(self, message: str, *, status: int, result: str) -> None:
        super().__init__(message)
        self.status = status
        self.result = result


@dataclass(frozen=True, slots=True)
class HookAnswer:
    """The HTTP answer to a delivery: its status and a line of text saying why."""

    status: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HookDelivery:
    """A delivery whose signature holds.

    Attributes:
        id: Its delivery id (`X-Baton-Delivery` or `X-GitHub-Delivery`).
        event: GitHub's `X-GitHub-Event`, or "" when none was sent.
        signature: The HMAC that signed it (hex): a replay under a new id repeats it.
        payload: The JSON object of its body.
    """

    id: str
    event: str
    signature: str
    payload: dict[str, Any]


def verify_hook_delivery(
    headers: Mapping[str, str], body: bytes, secret: str, *, now: float
) -> HookDelivery:
    """Check a delivery's size, signature, timestamp, id and body, in that order.

    Args:
        headers: The request's headers (any case).
        body: The exact bytes received; the signature covers them.
        secret: The webhook's secret; must not be empty.
        now: Baton's clock (unix seconds), for the window of Baton's timestamp.

    Raises:
        HookRefused: With the HTTP status to answer and the metric's result.
        ValueError: `secret` is empty (a configuration mistake, not the sender's).
    """
    if not secret:
        raise ValueError("a webhook secret is required")
    if len(body) > MAX_DELIVERY_BYTES:
        raise HookRefused(
            f"the delivery is over the {MAX_DELIVERY_BYTES} byte limit",
            status=413,
            result="too_large",
        )
    lowered = {name.lower(): value for name, value in headers.items()}
    key = secret.encode()
    baton_signature = lowered.get("x-baton-signature")
    if baton_signature is not None:
        timestamp = lowered.get("x-baton-timestamp")
        if timestamp is None:
            raise _unsigned("X-Baton-Signature needs X-Baton-Timestamp, which it signs")
        # Header text that is not UTF-8 arrives as surrogate escapes: its bytes as sent.
        signed = timestamp.encode("utf-8", "surrogateescape") + b"." + body
        signature = _check_signature(baton_signature, key, signed, "X-Baton-Signature")
        _check_timestamp(timestamp, now)
        delivery_id = lowered.get("x-baton-delivery", lowered.get("x-github-delivery"))
    elif (github_signature := lowered.get("x-hub-signature-256")) is not None:
        signature = _check_signature(github_signature, key, body, "X-Hub-Signature-256")
        delivery_id = lowered.get("x-github-delivery", lowered.get("x-baton-delivery"))
    elif "x-hub-signature" in lowered:
        raise _unsigned(
            "SHA-1 signatures (X-Hub-Signature) are refused: sign with HMAC-SHA256 "
            "(X-Hub-Signature-256, which GitHub sends too)"
        )
    else:
        raise _unsigned(
            "the delivery is not signed (X-Baton-Signature with X-Baton-Timestamp, or "
            "X-Hub-Signature-256)"
        )
    if delivery_id is None or not _DELIVERY_ID.fullmatch(delivery_id):
        raise HookRefused(
            "X-Baton-Delivery (or X-GitHub-Delivery) is missing or malformed: 1 to 128 "
            "letters, digits, '.', '_', ':' or '-'",
            status=400,
            result="bad_delivery",
        )
    if _media_type(lowered.get("content-type", "")) != "application/json":
        raise HookRefused(
            f"delivery {delivery_id}: the content type is not application/json",
            status=415,
            result="bad_content_type",
        )
    try:
        payload = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        # Undecodable bytes are a ValueError, as is an integer of too many digits;
        # deeply nested JSON is a RecursionError.
        raise HookRefused(
            f"delivery {delivery_id}: the body is not JSON", status=400, result="bad_json"
        ) from None
    if not isinstance(payload, dict):
        raise HookRefused(
            f"delivery {delivery_id}: the payload is not a JSON object",
            status=400,
            result="bad_json",
        )
    event = lowered.get("x-github-event", "")
    return HookDelivery(id=delivery_id, event=event, signature=signature, payload=payload)


def _unsigned(message: str) -> HookRefused:
    return HookRefused(message, status=401, result="bad_signature")


def _check_signature(header: str, key: bytes, signed: bytes, name: str) -> str:
    """The HMAC-SHA256 of `signed` (hex) when `header` is `sha256=` and that HMAC;
    raises `HookRefused` otherwise."""
    algorithm, equals, given = header.strip().partition("=")
    if not equals or algorithm.lower() != "sha256":
        raise _unsigned(f"{name} is not of the form sha256=<hex HMAC-SHA256>")
    expected = hmac.new(key, signed, hashlib.sha256).hexdigest()
    given = given.strip().lower()
    # compare_digest takes ASCII text only; a malformed one is simply not it.
    if not _HEX_SHA256.fullmatch(given) or not hmac.compare_digest(expected, given):
        raise _unsigned(f"the signature does not match ({name})")
    return expected


def _check_timestamp(timestamp: str, now: float) -> None:
    if not _TIMESTAMP.fullmatch(timestamp):
        raise HookRefused(
            "X-Baton-Timestamp is not a time in unix seconds", status=400, result="bad_timestamp"
        )
    skew = int(timestamp) - now
    if abs(skew) > TIMESTAMP_WINDOW_S:
        when = "ahead of" if skew > 0 else "behind"
        raise HookRefused(
            f"X-Baton-Timestamp is {abs(skew):.0f} s {when} Baton's clock, over the "
            f"{TIMESTAMP_WINDOW_S} s allowed (a replay, or a clock that is wrong)",
            status=401,
            result="stale",
        )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _media_type(content_type: str) -> str:
    message = Message()
    message["content-type"] = content_type
    return message.get_content_type()


class HookReceiver:
    """Verifies, deduplicates and starts the runs of webhook deliveries."""

    def __init__(
        self,
        *,
        book: TriggerBook,
        ledger: EventLedger,
        launcher: Launcher,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.book = book
        self.ledger = ledger
        self.launcher = launcher
        self.clock = clock

    async def handle(self, name: str, headers: Mapping[str, str], body: bytes) -> HookAnswer:
        """Verify, claim and start the run of one delivery to webhook `name`; the HTTP
        answer to give (502 when the run could not start: nothing is kept claimed)."""
        # Read together, with no await between: a reload swaps both at once.
        hook = self.book.triggers.webhook(name)
        secret = self.book.secret(name)
        label = hook.name if hook is not None else UNKNOWN
        try:
            if hook is None or not secret:
                raise _not_found()
            delivery = verify_hook_delivery(headers, body, secret, now=self.clock.now().timestamp())
            if delivery.event == "ping":
                metrics.record_webhook_delivery(label, "pong")
                return HookAnswer(status=200, text="pong")
            answer = await self._start(hook, delivery)
        except HookRefused as refused:
            # %r: a caller's path is logged as text, its line breaks escaped.
            logger.info("refused a delivery to webhook %r: %s", name[:64], refused)
            metrics.record_webhook_delivery(label, refused.result)
            return HookAnswer(status=refused.status, text=str(refused))
        except Exception:
            metrics.record_webhook_delivery(label, "not_started")
            raise
        metrics.record_webhook_delivery(label, "started")
        return answer

    def too_large(self, name: str) -> HookAnswer:
        """The answer to a delivery whose body the server would not read (over 1 MiB):
        404 for a webhook that is not listed, else 413."""
        hook = self.book.triggers.webhook(name)
        label = hook.name if hook is not None else UNKNOWN
        refused = (
            _not_found()
            if hook is None
            else HookRefused(
                f"the delivery is over the {MAX_DELIVERY_BYTES} byte limit",
                status=413,
                result="too_large",
            )
        )
        logger.info("refused a delivery to webhook %r: %s", name[:64], refused)
        metrics.record_webhook_delivery(label, refused.result)
        return HookAnswer(status=refused.status, text=str(refused))

    async def _start(self, hook: WebhookConfig, delivery: HookDelivery) -> HookAnswer:
        """Claim the delivery (its id, then its signature) and start its run; what was
        claimed is released when the run does not start."""
        if not self.launcher.turns.accepting:
            raise _shutting_down()
        launch = Launch(
            trigger=trigger_key("webhook", hook.name),
            channel_id=hook.channel,
            owner=hook.owner,
            prompt=render(hook.prompt, delivery.payload),
            agent=hook.agent,
            # Names and ids only: the payload's text never reaches the channel as
            # Baton's words (no `<!channel>`, no links it chose).
            announcement=(
                f"🪝 Webhook *{hook.name}* — delivery `{delivery.id}` — run for <@{hook.owner}>"
            ),
        )
        # The id is not signed: the same signed body under another id is a replay too.
        keys = {
            f"webhook:{hook.name}:{delivery.id}": f"delivery {delivery.id} was received already",
            f"webhook:{hook.name}:signature:{delivery.signature}": (
                f"delivery {delivery.id} repeats the signature of a delivery received already"
            ),
        }
        claimed: list[str] = []
        try:
            for key, replay in keys.items():
                if not await self.ledger.claim(key):
                    raise HookRefused(replay, status=409, result="replay")
                claimed.append(key)
            stored = await self.launcher.launch(launch)
        except HookRefused:
            await self._release(claimed)
            raise
        except Exception:
            logger.exception("could not start the run of webhook %s", hook.name)
            await self._release(claimed)
            raise HookRefused(
                f"Baton could not start the run of delivery {delivery.id}; send it again",
                status=502,
                result="not_started",
            ) from None
        if stored.message is None:
            # Intake refused it: Baton began shutting down after the check above.
            await self._release(claimed)
            raise _shutting_down()
        logger.info(
            "webhook %s: delivery %s starts a run in %s", hook.name, delivery.id, hook.channel
        )
        return HookAnswer(status=202, text="a run starts")

    async def _release(self, claims: list[str]) -> None:
        """Forget `claims`, so the delivery sent again is taken; never raises."""
        for claim in claims:
            try:
                await self.ledger.release(claim)
            except Exception:
                logger.exception("could not release the claim %s", claim)


def _not_found() -> HookRefused:
    return HookRefused("no webhook of that name", status=404, result="not_found")


def _shutting_down() -> HookRefused:
    return HookRefused(
        "Baton is shutting down; send the delivery again", status=503, result="not_started"
    )
