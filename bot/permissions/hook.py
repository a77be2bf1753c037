"""The permission hook: rules, danger patterns and protected paths, decided per tool call."""

from __future__ import annotations

import asyncio
import contextvars
import os
import re
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from bot.engine.hooks import HookDecision, ToolInvocation
from bot.errors import WorkspaceError
from bot.permissions.command_spellings import (
    CommandSpellings,
    command_spellings,
    git_named_at_run_time,
)
from bot.permissions.danger import DangerMatch, find_command_danger, find_path_danger
from bot.permissions.danger_context import CommandContext
from bot.permissions.deadline import JudgingTooLong, judging_until
from bot.permissions.git_args import git_allow_problem, split_git
from bot.permissions.limits import size_problem
from bot.permissions.path_denies import path_denial
from bot.permissions.plain import plain_commands
from bot.permissions.programs import allow_problem
from bot.permissions.protected_words import protected_words
from bot.permissions.rules import PermissionRules, Rule
from bot.permissions.wrappers import HARMLESS_WRAPPERS, WRAPPERS
from bot.tools.base import Tool
from bot.tools.workspace import PROTECTED_MESSAGE, Workspace

# File tools whose object is one file's content; grep skips hard-linked files itself.
HARD_LINK_TOOLS = frozenset({"read_file", "write_file", "edit_file"})

JUDGE_SECONDS = 2.0
"""How long judging one call may take before it asks a person instead."""
TOO_COMPLEX = "too complex to judge automatically"

# One thread judges every call in turn: judging is Python, so two threads would only take
# turns at the interpreter, and each more would take a share of it from the event loop.
# Calls that wait here count against their deadline.
_JUDGE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="baton-judge")


class PermissionHook:
    """Decides allow / deny / ask for each tool call from the rules in baton.yaml.

    Order: a deny rule refuses; a protected path refuses; a built-in danger pattern
    asks (its reason is the one reported, whatever `allow` says); without a sandbox
    every `bash` call asks; then an ask rule with a pattern, an allow rule with a
    pattern, a bare ask rule, a bare allow rule; otherwise read-only tools are allowed
    and the rest ask. An allow rule with a pattern approves a `bash` command only when
    it is made of plain literal commands (:func:`plain_commands`), each naming the
    rule's program exactly (or through a wrapper that only changes how it is
    scheduled, such as ``taskset``), and each known to only read by its program's
    model (:mod:`bot.permissions.programs`; git's is :mod:`bot.permissions.git_args`).

    Deny rules, danger patterns and per-rule approvers see every part of a command and
    the programs it really runs, through wrappers (``taskset``, ``flock``, ``script
    -c``, ``trap`` ...); the parts a program Baton cannot read may run (its tails) make
    a matching deny rule ask. A deny rule on a file tool holds for the files a command
    names (:mod:`bot.permissions.path_denies`).

    Judging runs off the event loop with a deadline (:data:`JUDGE_SECONDS`): a call too
    large or too complex to judge in time asks a person.
    """

    def __init__(
        self,
        rules: PermissionRules,
        workspace: Workspace,
        *,
        sandboxed: bool = True,
        judge_seconds: float = JUDGE_SECONDS,
    ) -> None:
        """Hold the rules for one workspace.

        Args:
            rules: The parsed `permissions` section.
            workspace: The workspace the tools work in (protected and private files).
            sandboxed: False when no OS sandbox could be made: then every `bash` call
                asks, whatever `allow` says, since nothing would contain it.
            judge_seconds: How long judging one call may take on its worker thread.
        """
        self.rules = rules
        self.workspace = workspace
        self.sandboxed = sandboxed
        self.judge_seconds = judge_seconds
        self.may_write_files = _bare_allows(rules, "write_file")

    async def __call__(self, invocation: ToolInvocation) -> HookDecision:
        """Judge a call on a worker thread, so no command, however large, holds the bot.

        The thread works under a deadline it checks as it goes (:mod:`.deadline`); should
        it still not answer a little after, the call asks all the same.
        """
        tool, arguments = invocation.tool, invocation.arguments
        deadline = time.monotonic() + self.judge_seconds

        def judge() -> HookDecision:
            with judging_until(deadline):
                return self.check(tool, arguments)

        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        try:
            # asyncio.timeout, not wait_for: on 3.11, wait_for swallows a cancel that lands
            # as the judging finishes, and a cancelled run would go on.
            async with asyncio.timeout(self.judge_seconds + 1.0):
                return await loop.run_in_executor(_JUDGE, context.run, judge)
        except TimeoutError:
            return self._too_complex(tool, f"judging it took over {self.judge_seconds:g} s")

    def check(self, tool: Tool, arguments: object) -> HookDecision:
        """Decide one call; an ask carries the approver sets of every ask rule matching it.

        Whatever made the call ask (a rule, a danger pattern, no sandbox), a rule naming
        its own approvers still holds: a danger pattern must not let someone outside
        `bash(git push*)`'s set approve a `git push`.
        """
        if tool.control:
            return HookDecision.allow("one of Baton's own control tools")
        try:
            return self._check(tool, _main_value(tool, arguments))
        except JudgingTooLong:
            return self._too_complex(tool, f"judging it took over {self.judge_seconds:g} s")

    def _check(self, tool: Tool, value: str | None) -> HookDecision:
        extended: list[str] = []
        computed = False
        if tool.argument_kind == "command" and value is not None:
            if problem := size_problem(value):
                return self._too_complex(tool, problem)
            spellings = command_spellings(value)
            every = spellings.all()
            extended = [*spellings.extended, *(text for text, _ in spellings.doubtful)]
            computed = _computed_context(spellings) is not None
            decision = self._check_command(tool, value, spellings)
        elif value is None or tool.argument_kind != "path":
            every = [value] if value else []
            decision = self._decide(tool, every=every, exact=every)
        else:
            resolved = self._resolved(value)
            every = _path_spellings(value, self._exact_paths(resolved))
            decision = self._check_path(tool, value, resolved, every)
        if decision.action != "ask":
            return decision
        approver_sets = self._approver_sets(tool, every, extended, computed=computed)
        return replace(decision, approver_sets=approver_sets) if approver_sets else decision

    def _too_complex(self, tool: Tool, why: str) -> HookDecision:
        """Ask a person about a call not judged; every rule's approvers hold, since any might."""
        sets = self._approver_sets(tool, [], computed=True)
        return HookDecision.ask(f"{TOO_COMPLEX}: {why}", risk="too-complex", approver_sets=sets)

    def _approver_sets(
        self,
        tool: Tool,
        every: Sequence[str],
        extended: Sequence[str] = (),
        *,
        computed: bool = False,
    ) -> tuple[tuple[str, ...], ...]:
        """The approvers of each ask rule that names some and matches any spelling of the call.

        For a command, its parts are among the spellings (those a wrapper or an unknown
        program runs too, those given more arguments matched as such), so every part's
        rule counts; where a program is named only when the command runs, every rule of
        the tool that names approvers does, since any of them might apply.
        """
        sets: list[tuple[str, ...]] = []
        for rule in self.rules.ask:
            if not rule.approvers or rule.approvers in sets:
                continue
            if (
                rule.matches(tool.name, every, tool.argument_kind)
                or any(rule.matches_extended(tool.name, text) for text in extended)
                or (computed and rule.tool == tool.name)
            ):
                sets.append(rule.approvers)
        return tuple(sets)

    def _exact_paths(self, resolved: Path | None) -> list[str]:
        return [self.workspace.relative(resolved), str(resolved)] if resolved else []

    def _check_path(
        self, tool: Tool, value: str, resolved: Path | None, every: list[str]
    ) -> HookDecision:
        if resolved is not None and not tool.read_only and self.workspace.is_protected(resolved):
            return HookDecision.deny(f"{value!r} {PROTECTED_MESSAGE}")
        exact = self._exact_paths(resolved)
        for candidate in every:
            if danger := find_path_danger(candidate):
                if denied := _first_match(self.rules.deny, tool, every):
                    return HookDecision.deny(f"the rule deny: {denied.text} forbids it")
                return HookDecision.ask(danger.reason, risk=danger.pattern)
        decision = self._decide(tool, every=every, exact=exact)
        if decision.action == "allow" and tool.name in HARD_LINK_TOOLS:
            # Another name of a file may lie outside the workspace: a person decides.
            # The tool checks the count again on what it opens, unless a person said yes.
            if (links := self._hard_links(value)) > 1:
                return HookDecision.ask(
                    f"{value!r} has {links} hard links: the same file may also lie outside "
                    "the workspace",
                    risk="hard-link",
                )
        return decision

    def _hard_links(self, value: str) -> int:
        try:
            return self.workspace.hard_link_count(value)
        except (WorkspaceError, OSError):
            return 0

    def _decide(self, tool: Tool, *, every: list[str], exact: list[str]) -> HookDecision:
        if denied := _first_match(self.rules.deny, tool, every):
            return HookDecision.deny(f"the rule deny: {denied.text} forbids it")
        if asked := _first_match(_with_pattern(self.rules.ask), tool, every):
            return HookDecision.ask(f"the rule ask: {asked.text} matches it")
        if allowed := _first_match(_with_pattern(self.rules.allow), tool, exact):
            return HookDecision.allow(f"the rule allow: {allowed.text} matches it")
        return self._bare(tool) or self._default(tool)

    def _bare(self, tool: Tool) -> HookDecision | None:
        """What a rule naming the tool alone says: a bare ask beats a bare allow."""
        if asked := _first_match(_bare(self.rules.ask), tool, []):
            return HookDecision.ask(f"the rule ask: {asked.text} matches it")
        if allowed := _first_match(_bare(self.rules.allow), tool, []):
            return HookDecision.allow(f"the rule allow: {allowed.text} matches it")
        return None

    def _resolved(self, value: str) -> Path | None:
        try:
            return self.workspace.resolve(value)
        except WorkspaceError:
            return None

    def _check_command(self, tool: Tool, command: str, spellings: CommandSpellings) -> HookDecision:
        if denied := self._denied(tool, spellings):
            return denied
        denial, concern = protected_words(spellings.contexts, self.workspace)
        if denial is not None:
            return HookDecision.deny(denial)
        danger = find_command_danger(
            command, path_exists=self._path_exists, contexts=spellings.contexts or None
        )
        if danger is None:
            danger = concern or self._doubtful_denial(tool, spellings)
        elif concern is not None:
            danger = DangerMatch(
                pattern=danger.pattern, reason=f"{danger.reason} Also, {concern.reason}"
            )
        if not self.sandboxed:
            # Nothing would contain it: no rule approves it, a person reads it.
            reason = "this command runs unsandboxed (no OS sandbox could be made here)"
            if danger is not None:
                reason = f"{danger.reason} And {reason}."
            return HookDecision.ask(reason, risk=danger.pattern if danger else "unsandboxed")
        if danger is not None:
            return HookDecision.ask(danger.reason, risk=danger.pattern)
        if asked := self._asked(tool, spellings):
            return asked
        allowed, problem = self._allowed_by_pattern(tool, command)
        if allowed is not None:
            return allowed
        if bare := self._bare(tool):
            return bare
        if problem is not None:
            return HookDecision.ask(problem)
        return self._default(tool)

    def _denied(self, tool: Tool, spellings: CommandSpellings) -> HookDecision | None:
        """A deny rule matching what surely runs, or a file-tool deny naming its files."""
        if denied := _first_match(self.rules.deny, tool, spellings.exact):
            return HookDecision.deny(f"the rule deny: {denied.text} forbids it")
        for text in spellings.extended:
            if denied := next(
                (r for r in self.rules.deny if r.matches_extended(tool.name, text)), None
            ):
                return HookDecision.deny(
                    f"the rule deny: {denied.text} forbids it (`{text}` runs with arguments "
                    "added when it runs)"
                )
        found = path_denial(
            spellings.contexts,
            self.rules.deny,
            root=str(self.workspace.root),
            spellings=self._word_spellings,
            exists=self._path_exists,
        )
        if found is None:
            return None
        if found.certain:
            return HookDecision.deny(
                f"the rule deny: {found.rule.text} forbids it ({found.word!r} is named)"
            )
        return HookDecision.ask(
            f"{found.word!r} may name a file the rule deny: {found.rule.text} forbids",
            risk="deny-rule-path",
        )

    def _doubtful_denial(self, tool: Tool, spellings: CommandSpellings) -> DangerMatch | None:
        """A deny rule that may match what runs, though Baton cannot tell: a person decides.

        A part an unknown program may run (with arguments of its own added, as
        `parallel` and `xargs` add them), or a program whose name is only known when the
        command runs (`$(echo rm) -rf src`), where a deny rule names this tool's calls.
        """
        deny = self.rules.deny
        for text, holder in spellings.doubtful:
            if denied := next((r for r in deny if r.matches_extended(tool.name, text)), None):
                return DangerMatch(
                    pattern="deny-rule-tail",
                    reason=f"{holder} may run `{text}`, which the rule deny: {denied.text} "
                    "forbids; Baton does not know whether it does.",
                )
        computed = _computed_context(spellings)
        rules = [r for r in deny if r.pattern is not None and r.tool == tool.name]
        rules += [r for r in self.rules.ask if r.approvers and r.tool == tool.name]
        if rules and computed is not None:
            kind = "deny" if rules[0] in deny else "ask"
            return DangerMatch(
                pattern="deny-rule-computed-program",
                reason=f"`{computed.shown}` runs a program named only when it runs "
                f"({computed.program}), so the rule {kind}: {rules[0].text} cannot be "
                "checked.",
            )
        return None

    def _asked(self, tool: Tool, spellings: CommandSpellings) -> HookDecision | None:
        rules = _with_pattern(self.rules.ask)
        if asked := _first_match(rules, tool, spellings.all()):
            return HookDecision.ask(f"the rule ask: {asked.text} matches it")
        for text in spellings.extended:
            if asked := next((r for r in rules if r.matches_extended(tool.name, text)), None):
                return HookDecision.ask(f"the rule ask: {asked.text} matches it")
        return None

    def _word_spellings(self, word: str) -> list[str]:
        """A command word naming a path: as written, normalised, and what it really is."""
        return _path_spellings(word, self._exact_paths(self._resolved(word)))

    def _allowed_by_pattern(
        self, tool: Tool, command: str
    ) -> tuple[HookDecision | None, str | None]:
        """An allow decision from rules with a pattern, or why they cannot give one.

        Every command must be plain and literal, named exactly by some rule (directly
        or through harmless wrappers), and known to only read by its program's model;
        a compound command is allowed only when every part is, so an allow rule for
        `git status*` does not let `git status && curl ...` or `git status > f` through.
        """
        rules = [rule for rule in _with_pattern(self.rules.allow) if rule.tool == tool.name]
        if not rules:
            return None, None
        commands = plain_commands(command)
        if commands is None:
            return None, (
                "allow rules approve only plain commands, and this one has shell syntax "
                "they cannot vouch for (expansions, globs, redirections to files, ...)"
            )
        names: list[str] = []
        for argv in commands:
            found = _matching_rule(rules, tool.name, argv)
            if found is None:
                return None, None
            rule, judged = found
            if problem := self._allow_problem(judged):
                return None, f"{problem}, so the rule allow: {rule.text} does not vouch for it"
            if secret := self._secret_target(judged[1:]):
                return None, secret
            if linked := self._hard_linked_word(judged[1:]):
                # The sandbox cannot tell a second name of an outside file from a
                # workspace file; read_file asks for it, so `cat` does too.
                return None, (
                    f"{linked!r} has several hard links: the same file may also lie outside "
                    "the workspace"
                )
            names.append(rule.text)
        listed = ", ".join(sorted(set(names)))
        return HookDecision.allow(f"the rule allow: {listed} matches it"), None

    def _allow_problem(self, argv: tuple[str, ...]) -> str | None:
        if argv[0] == "git":
            return git_allow_problem(argv[1:], may_write_files=self.may_write_files)
        return allow_problem(argv)

    def _hard_linked_word(self, words: Sequence[str]) -> str | None:
        """The first word naming a workspace file with more than one hard link."""
        return next((v for v in _path_operands(words) if self._hard_links(v) > 1), None)

    def _secret_target(self, words: Sequence[str]) -> str | None:
        """Why a word is a link to a secret (``docs/notes.txt`` -> ``../.env``), or None.

        The danger patterns read the words as written; this follows each path-like word
        to the file it really names and checks that one too.
        """
        for value in _path_operands(words):
            target = self._real_target(value)
            if target is None or target == os.path.normpath(value):
                continue
            if danger := find_path_danger(target):
                return f"{value!r} leads to {target!r}: {danger.reason}"
        return None

    def _real_target(self, value: str) -> str | None:
        """Where ``value`` really leads: workspace-relative, or absolute when outside."""
        try:
            return self.workspace.relative(self.workspace.resolve(value))
        except WorkspaceError:
            pass  # outside the workspace (or a private file, which is refused elsewhere)
        except (OSError, ValueError):
            return None
        try:
            candidate = value if os.path.isabs(value) else os.path.join(self.workspace.root, value)
            if not os.path.islink(candidate) and os.path.isabs(value):
                return None  # an absolute path as written: already checked word by word
            return os.path.realpath(candidate)
        except (OSError, ValueError):
            return None

    def _default(self, tool: Tool) -> HookDecision:
        if tool.read_only:
            return HookDecision.allow("read-only tool")
        return HookDecision.ask(tool.unruled_reason())

    def _path_exists(self, path: str) -> bool:
        """Whether ``path`` (relative to the workspace root) names something there."""
        try:
            return os.path.lexists(os.path.join(self.workspace.root, path))
        except (OSError, ValueError):
            return True  # cannot tell: count it as a path, which asks more


def _path_spellings(value: str, exact: list[str]) -> list[str]:
    """Every spelling of a path: as written, normalised, and what it really is.

    Deny rules see them all; allow and ask rules only the path it really is, so
    `src/../Makefile` is never covered by `write_file(src/**)`.
    """
    return list(dict.fromkeys([value, os.path.normpath(value), *exact]))


def _path_operands(words: Sequence[str]) -> Iterator[str]:
    """The words of a command that may name files: operands, and `--option=VALUE` values."""
    for word in words:
        value = word.partition("=")[2] if word.startswith("--") else word
        if value and not value.startswith("-") and "\0" not in value:
            yield value


def _bare_allows(rules: PermissionRules, tool_name: str) -> bool:
    """Whether a bare allow rule lets ``tool_name`` through, no bare ask or deny overriding it."""
    if any(rule.tool == tool_name for rule in _bare(rules.deny) + _bare(rules.ask)):
        return False
    return any(rule.tool == tool_name for rule in _bare(rules.allow))


def _with_pattern(rules: Sequence[Rule]) -> list[Rule]:
    return [rule for rule in rules if rule.pattern is not None]


def _bare(rules: Sequence[Rule]) -> list[Rule]:
    return [rule for rule in rules if rule.pattern is None]


_GLOB_NAME = re.compile(r"[*?]|\[[^\]]+\]|\{[^{}]*(?:,|\.\.)[^{}]*\}")


def _computed(program: str) -> bool:
    """Whether a command's program name is made when it runs: an expansion, a glob
    (`r[m]`, `r*`) or braces (`r{m,}`); `[` and `[[` are tests, not globs."""
    if "$" in program or "`" in program:
        return True
    return program not in ("[", "[[") and _GLOB_NAME.search(program) is not None


def _computed_context(spellings: CommandSpellings) -> CommandContext | None:
    """The first part whose program (or git subcommand) is named only when it runs."""
    for context in spellings.contexts:
        if _computed(context.program):
            return context
        if context.program == "git" and _computed(split_git(context.args).subcommand):
            return context  # `git pus[h]`, `git $(echo push)`
    return git_named_at_run_time(spellings.contexts)  # aliases, config a rule cannot see


def _matching_rule(
    rules: Sequence[Rule], tool: str, argv: tuple[str, ...]
) -> tuple[Rule, tuple[str, ...]] | None:
    """The allow rule naming ``argv``'s program, and the words that program gets.

    ``taskset -c 0 ls -la`` is judged as ``ls -la`` by ``bash(ls*)``: the harmless
    wrappers (:data:`HARMLESS_WRAPPERS`) only change when or how fast it runs. The
    wrapped program is compared as written, like any other: ``nice /bin/ls`` is not ``ls``.
    """
    levels = [argv]
    while levels[-1][0] in HARMLESS_WRAPPERS:
        wrapped = WRAPPERS[levels[-1][0]](levels[-1][1:])
        if not wrapped:
            break
        levels.append(tuple(wrapped))
    for level in reversed(levels):  # the program that really runs, if a rule names it
        if rule := next((r for r in rules if r.matches_argv(tool, level)), None):
            return rule, level
    return None


def _main_value(tool: Tool, arguments: object) -> str | None:
    if tool.main_argument is None:
        return None
    value = getattr(arguments, tool.main_argument, None)
    return value if isinstance(value, str) else None


def _first_match(rules: Sequence[Rule], tool: Tool, values: Sequence[str]) -> Rule | None:
    for rule in rules:
        if rule.matches(tool.name, values, tool.argument_kind):
            return rule
    return None
