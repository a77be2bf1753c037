"""Who may decide an approval request, and who may cancel a run or a task.

Approve: without rule sets, the requester (when `self_approval` is on) or anyone in
`approvers`. When the request carries approver sets (ask rules naming their own
approvers), only someone in every set may approve (the strictest applicable set
wins), and the requester only when `self_approval` is on; the global `approvers`
do not override a rule's set. Deny: anyone who may approve, and the requester
always (saying no is always safe). Cancel: the person who started the work or a
global approver.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.access.directory import Directory, includes, is_group, mention

ApproverSets = tuple[tuple[str, ...], ...]


class Deciders:
    """Answers "may this person decide?" from the operator's settings and the directory."""

    def __init__(
        self, directory: Directory, approvers: Sequence[str], *, self_approval: bool
    ) -> None:
        """Hold the deployment's rules.

        Args:
            directory: Looks user groups up (a group that cannot be read grants nothing).
            approvers: `approvers` from baton.yaml: user ids (U…, W…) and group ids (S…).
            self_approval: Whether the requester may approve their own requests; a
                request remembers the value it was made with, which overrides this one.
        """
        self.directory = directory
        self.approvers = tuple(approvers)
        self.self_approval = self_approval

    async def is_approver(self, user: str) -> bool:
        """Whether `user` is listed in `approvers`, directly or through a user group."""
        return await includes(self.directory, self.approvers, user)

    async def may_approve(
        self,
        user: str,
        *,
        requester: str | None,
        approver_sets: ApproverSets,
        self_approval: bool | None = None,
    ) -> bool:
        """Whether `user` may approve a request asked by `requester`.

        Args:
            user: Who clicked.
            requester: Whose message started the run the request belongs to.
            approver_sets: The request's sets; a decider must be in every one.
            self_approval: The value fixed when the request was made (None: this
                deployment's setting).
        """
        own = user == requester
        if own and not (self.self_approval if self_approval is None else self_approval):
            return False
        if approver_sets:
            for approvers in approver_sets:
                if not await includes(self.directory, approvers, user):
                    return False
            return True
        return own or await self.is_approver(user)

    async def may_deny(
        self,
        user: str,
        *,
        requester: str | None,
        approver_sets: ApproverSets,
        self_approval: bool | None = None,
    ) -> bool:
        """The requester always may; otherwise whoever may approve."""
        if requester is not None and user == requester:
            return True
        return await self.may_approve(
            user, requester=requester, approver_sets=approver_sets, self_approval=self_approval
        )

    async def may_cancel(self, user: str, started_by: str | None) -> bool:
        """The person who started a run or task, or a global approver."""
        return user == started_by or await self.is_approver(user)

    def who_may_decide(
        self,
        *,
        requester: str | None,
        approver_sets: ApproverSets,
        self_approval: bool | None = None,
    ) -> str:
        """Who may approve, as Slack text with mentions (and that the requester may deny)."""
        own = self.self_approval if self_approval is None else self_approval
        asker = f"<@{requester}>" if requester else None
        if approver_sets:
            groups = [_any_of(approvers) for approvers in approver_sets]
            text = (
                groups[0]
                if len(groups) == 1
                else "someone in each of " + "; ".join(f"({group})" for group in groups)
            )
            if asker and not own:
                text += f" (not {asker}, who asked)"
        elif asker and own:
            text = f"you (the requester, {asker})"
            if self.approvers:
                text += f" or {_any_of(self.approvers)}"
            return text
        else:
            text = _any_of(self.approvers) or "nobody"
        if asker:
            text += f"; {asker}, who asked, may deny"
        return text


def _any_of(ids: Sequence[str]) -> str:
    """`<@U1>, <@U2> or anyone in <!subteam^S1>`."""
    people = [mention(i) for i in ids if not is_group(i)]
    people += [f"anyone in {mention(i)}" for i in ids if is_group(i)]
    if len(people) <= 1:
        return "".join(people)
    return ", ".join(people[:-1]) + " or " + people[-1]
