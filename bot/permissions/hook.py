"""The permission hook: rules, danger patterns and protected paths, decided per tool call."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath

from bot.engine.hooks import HookDecision, ToolInvocation
from bot.errors import WorkspaceError
from bot.permissions.danger import DangerMatch, find_command_danger, find_path_danger
from bot.permissions.git_args import git_allow_problem, split_git
from bot.permissions.plain import plain_commands
from bot.permissions.rules import PermissionRules, Rule
from bot.permissions.shell_words import (
    CommandParseError,
    command_words,
    effective_command,
    redirect_targets,
    split_segments,
)
from bot.tools.base import Tool
from bot.tools.workspace import PROTECTED_DIR, PROTECTED_MESSAGE, Workspace

# File tools whose object is one file's content; grep skips hard-linked files itself.
HARD_LINK_TOOLS = frozenset({"read_file", "write_file", "edit_file"})

# Programs that only read: naming a protected path in them is harmless.
READ_ONLY_PROGRAMS = frozenset(
    {"cat", "ls", "head", "tail", "less", "more", "grep", "rg", "wc", "stat", "file", "diff",
     "tree", "du", "md5sum", "sha256sum", "shasum", "echo", "printf", "test", "["}
)  # fmt: skip


class PermissionHook:
    """Decides allow / deny / ask for each tool call from the rules in baton.yaml.

    Order: a deny rule refuses; a protected path refuses; a built-in danger pattern
    asks (its reason is the one reported, whatever `allow` says); without a sandbox
    every `bash` call asks; then an ask rule with a pattern, an allow rule with a
    pattern, a bare ask rule, a bare allow rule; otherwise read-only tools are allowed
    and the rest ask. An allow rule with a pattern approves a `bash` command only when
    it is made of plain literal commands (:func:`plain_commands`), each naming the
    rule's program exactly, and git calls that cannot run programs or write elsewhere.
    """

    def __init__(
        self, rules: PermissionRules, workspace: Workspace, *, sandboxed: bool = True
    ) -> None:
        """Hold the rules for one workspace.

        Args:
            rules: The parsed `permissions` section.
            workspace: The workspace the tools work in (protected and private files).
            sandboxed: False when no OS sandbox could be made: then every `bash` call
                asks, whatever `allow` says, since nothing would contain it.
        """
        self.rules = rules
        self.workspace = workspace
        self.sandboxed = sandboxed
        self.may_write_files = _bare_allows(rules, "write_file")

    async def __call__(self, invocation: ToolInvocation) -> HookDecision:
        return self.check(invocation.tool, invocation.arguments)

    def check(self, tool: Tool, arguments: object) -> HookDecision:
        """Decide one call; an ask carries the approver sets of every ask rule matching it.

        Whatever made the call ask (a rule, a danger pattern, no sandbox), a rule naming
        its own approvers still holds: a danger pattern must not let someone outside
        `bash(git push*)`'s set approve a `git push`.
        """
        if tool.control:
            return HookDecision.allow("one of Baton's own control tools")
        value = _main_value(tool, arguments)
        if tool.argument_kind == "command" and value is not None:
            every = self._command_spellings(value)
            decision = self._check_command(tool, value, every)
        elif value is None or tool.argument_kind != "path":
            every = [value] if value else []
            decision = self._decide(tool, every=every, exact=every)
        else:
            resolved = self._resolved(value)
            every = _path_spellings(value, self._exact_paths(resolved))
            decision = self._check_path(tool, value, resolved, every)
        if decision.action != "ask":
            return decision
        approver_sets = self._approver_sets(tool, every)
        return replace(decision, approver_sets=approver_sets) if approver_sets else decision

    def _approver_sets(self, tool: Tool, every: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        """The approvers of each ask rule that names some and matches any spelling of the call.

        For a command, its parts are among the spellings, so every part's rule counts.
        """
        sets: list[tuple[str, ...]] = []
        for rule in self.rules.ask:
            if rule.approvers and rule.matches(tool.name, every, tool.argument_kind):
                if rule.approvers not in sets:
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

    def _command_spellings(self, command: str) -> list[str]:
        """The command, each part as written, and as the program it really runs.

        `/bin/rm`, `env rm`, `then rm` all run rm, so a deny rule cannot be stepped around.
        """
        try:
            parsed = split_segments(command)
        except CommandParseError:
            parsed = []
        written = [" ".join(command_words(s)) for s in parsed]
        effective = [_effective_text(s) for s in parsed]
        git = [text for text in map(_without_git_globals, parsed) if text]
        return list(dict.fromkeys([command, *written, *effective, *git]))

    def _check_command(self, tool: Tool, command: str, every: list[str]) -> HookDecision:
        if denied := _first_match(self.rules.deny, tool, every):
            return HookDecision.deny(f"the rule deny: {denied.text} forbids it")
        denial, concern = self._protected_words(command)
        if denial is not None:
            return HookDecision.deny(denial)
        danger = find_command_danger(command, path_exists=self._path_exists)
        if danger is None:
            danger = concern
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
        if asked := _first_match(_with_pattern(self.rules.ask), tool, every):
            return HookDecision.ask(f"the rule ask: {asked.text} matches it")
        allowed, problem = self._allowed_by_pattern(tool, command)
        if allowed is not None:
            return allowed
        if bare := self._bare(tool):
            return bare
        if problem is not None:
            return HookDecision.ask(problem)
        return self._default(tool)

    def _allowed_by_pattern(
        self, tool: Tool, command: str
    ) -> tuple[HookDecision | None, str | None]:
        """An allow decision from rules with a pattern, or why they cannot give one.

        Every command must be plain and literal, and named exactly by some rule; a
        compound command is allowed only when every part is, so an allow rule for
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
            rule = next((r for r in rules if r.matches_argv(tool.name, argv)), None)
            if rule is None:
                return None, None
            if argv[0] == "git" and (
                problem := git_allow_problem(argv[1:], may_write_files=self.may_write_files)
            ):
                return None, problem
            if secret := self._secret_target(argv[1:]):
                return None, secret
            if linked := self._hard_linked_word(argv[1:]):
                # The sandbox cannot tell a second name of an outside file from a
                # workspace file; read_file asks for it, so `cat` does too.
                return None, (
                    f"{linked!r} has several hard links: the same file may also lie outside "
                    "the workspace"
                )
            names.append(rule.text)
        listed = ", ".join(sorted(set(names)))
        return HookDecision.allow(f"the rule allow: {listed} matches it"), None

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

    def _protected_words(self, command: str) -> tuple[str | None, DangerMatch | None]:
        """Refuse commands naming Baton's database or writing its config or `.baton/`.

        This reads the command's words, so it stops plain attempts (`rm -r .baton`,
        `echo x > baton.yaml`); the file tools enforce the same rule by path. A literal
        name is refused; a glob that may match one of those files (`ls *`) only asks: a
        person can see what it matches, and the sandbox masks those files anyway.

        Returns:
            Why the command is refused (or None), and else why a person should look.
        """
        try:
            segments = split_segments(command)
        except CommandParseError:
            return None, None
        concern: DangerMatch | None = None
        for segment in segments:
            words = command_words(segment)
            program = effective_command(words)
            name = PurePosixPath(program[0]).name if program else ""
            targets = redirect_targets(segment)
            writes = name not in READ_ONLY_PROGRAMS
            for word in (*words, *targets):
                named = self._named_files(word, self.workspace.private_files)
                if writes or word in targets:
                    named += self._named_files(word, self.workspace.protected_files)
                    if PROTECTED_DIR in PurePosixPath(word).parts:
                        return _protected_denial(word), None
                exact = [path for path, glob in named if not glob]
                if exact:
                    path = exact[0]
                    if path in self.workspace.private_files:
                        return f"{word!r} is Baton's {self._label(path)}; no tool may use it", None
                    return _protected_denial(word), None
                if named and concern is None:
                    labels = " and ".join(
                        dict.fromkeys(f"{self._label(p)} ({p.name})" for p, _ in named)
                    )
                    concern = DangerMatch(
                        pattern="baton-file-glob",
                        reason=f"{word!r} may match Baton's {labels}: a person should check "
                        "what it expands to.",
                    )
        return None, concern

    def _label(self, path: Path) -> str:
        """What a private or protected file is to Baton, as the approver should read it."""
        return "configuration" if path in self.workspace.protected_files else "database"

    def _named_files(self, word: str, files: frozenset[Path]) -> list[tuple[Path, bool]]:
        """The files ``word`` names, each with True when only a glob in it matches."""
        found: list[tuple[Path, bool]] = []
        for path in sorted(files):
            if word == str(path):
                found.append((path, False))
                continue
            if PurePosixPath(word).name == path.name:
                candidate = Path(word) if os.path.isabs(word) else self.workspace.root / word
                if os.path.realpath(candidate) == str(path):
                    found.append((path, False))
                    continue
            if _globs(word) and fnmatch.fnmatchcase(path.name, PurePosixPath(word).name):
                # `cat baton.d?`: bash would expand the glob to the file
                parent = str(PurePosixPath(word).parent)
                folder = Path(parent) if os.path.isabs(parent) else self.workspace.root / parent
                if os.path.realpath(folder) == str(path.parent):
                    found.append((path, True))
        return found


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


def _protected_denial(word: str) -> str:
    return f"{word!r} {PROTECTED_MESSAGE}"


def _globs(word: str) -> bool:
    return any(char in word for char in "*?[")


def _bare_allows(rules: PermissionRules, tool_name: str) -> bool:
    """Whether a bare allow rule lets ``tool_name`` through, no bare ask or deny overriding it."""
    if any(rule.tool == tool_name for rule in _bare(rules.deny) + _bare(rules.ask)):
        return False
    return any(rule.tool == tool_name for rule in _bare(rules.allow))


def _with_pattern(rules: Sequence[Rule]) -> list[Rule]:
    return [rule for rule in rules if rule.pattern is not None]


def _bare(rules: Sequence[Rule]) -> list[Rule]:
    return [rule for rule in rules if rule.pattern is None]


def _effective_text(segment: Sequence[str]) -> str:
    program = effective_command(command_words(segment))
    if not program:
        return ""
    return " ".join([PurePosixPath(program[0]).name.lstrip("\\"), *program[1:]])


def _without_git_globals(segment: Sequence[str]) -> str:
    """`git -C . -c x=y push` as `git push`: what rules on git subcommands must see.

    Only for matching deny and ask rules (more matches, never fewer); allow rules read
    the whole command, and git's global options keep them from approving it.
    """
    program = effective_command(command_words(segment))
    if len(program) < 2 or PurePosixPath(program[0]).name.lstrip("\\") != "git":
        return ""
    call = split_git(program[1:])
    if not call.globals or not call.subcommand:
        return ""
    return " ".join(["git", call.subcommand, *call.args])


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
