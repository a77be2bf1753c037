"""The hook chain consulted before every tool call, and the approval contract."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from bot.tools.base import Tool, ToolArguments

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolInvocation:
    """A tool call about to run: the tool, its validated arguments and the raw JSON."""

    call_id: str
    tool: Tool
    arguments: ToolArguments
    raw_arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HookDecision:
    """What a hook says of a call: allow it, deny it (with why), or ask a person."""

    action: Literal["allow", "deny", "ask"]
    reason: str = ""
    risk: str | None = None
    # For "ask": sets of people (user and group ids) who alone may decide; a decider
    # must belong to every set. Empty: whoever may decide any request.
    approver_sets: tuple[tuple[str, ...], ...] = ()

    @classmethod
    def allow(cls, reason: str = "") -> HookDecision:
        return cls(action="allow", reason=reason)

    @classmethod
    def deny(cls, reason: str) -> HookDecision:
        return cls(action="deny", reason=reason)

    @classmethod
    def ask(
        cls,
        reason: str,
        risk: str | None = None,
        approver_sets: tuple[tuple[str, ...], ...] = (),
    ) -> HookDecision:
        return cls(action="ask", reason=reason, risk=risk, approver_sets=approver_sets)


class Hook(Protocol):
    """A check run before a tool call; `None` means it has no opinion."""

    async def __call__(self, invocation: ToolInvocation) -> HookDecision | None: ...


async def decide(hooks: Sequence[Hook], invocation: ToolInvocation) -> HookDecision:
    """Combine the hooks' verdicts: any deny wins, then the first ask, else allow.

    The first ask gives the reason; the approver sets of every ask apply together
    (the strictest wins). A hook that raises denies the call: a broken check must
    never let a call through.
    """
    first_ask: HookDecision | None = None
    approver_sets: list[tuple[str, ...]] = []
    for hook in hooks:
        try:
            decision = await hook(invocation)
        except Exception as exc:
            logger.exception("permission hook %r failed", hook)
            return HookDecision.deny(f"a permission check failed ({exc}); the call was refused")
        if decision is None or decision.action == "allow":
            continue
        if decision.action == "deny":
            return decision
        if first_ask is None:
            first_ask = decision
        approver_sets += [s for s in decision.approver_sets if s not in approver_sets]
    if first_ask is None:
        return HookDecision.allow()
    return replace(first_ask, approver_sets=tuple(approver_sets))


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequest:
    """What a person is asked to decide; `agent` and `task_id` say who is asking."""

    call_id: str
    tool_name: str
    arguments: str
    reason: str
    risk: str | None
    agent: str = "main"
    task_id: str | None = None
    # Who alone may decide (see `HookDecision.approver_sets`); empty: the usual deciders.
    approver_sets: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecision:
    """A person's answer (or its absence); `message` tells the model what happened."""

    approved: bool
    message: str
    # What became of the request (approved, denied, expired, cancelled), as traces show
    # it; None: what `approved` says.
    state: str | None = None

    @property
    def outcome(self) -> str:
        return self.state or ("approved" if self.approved else "denied")


ApprovalFunc = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]
