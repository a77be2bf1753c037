"""Read shell commands as bash does, for the safety checks: simple commands and what they nest.

The danger checks and the deny rules must reason about what a command *runs*, not
about the characters it contains: ``echo "rm -rf /"`` only prints text, while
``\\rm -rf x`` deletes files. This module parses a command line with bash's real
grammar (tree-sitter-bash, see :mod:`bot.permissions.bash_tree`) and turns the tree
into pipelines of simple commands (tuples of words, quotes removed), exposing the
commands hidden inside other commands so they are checked too: ``$(...)``,
backticks, ``<(...)``, subshells and ``{ ...; }`` groups, ``if``/``for``/``while``/
``case`` bodies, functions, ``sh -c``, ``eval``, ``xargs``, ``find -exec``,
here-documents or here-strings fed to a shell, and the shell code of ``script -c``,
``flock -c``, ``su -c``, ``sg``, ``watch``, ``trap`` and ``coproc``.
Which arguments of ``sh -c``, ``xargs`` and ``find -exec`` hold the inner command is
read by :mod:`bot.permissions.inner_commands`; the other programs that run commands,
by :mod:`bot.permissions.wrappers`.

Whatever the grammar rejects, or what is too large or too deeply nested, raises
:class:`CommandParseError`; callers treat that as "a human has to look at this".
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import tree_sitter

from bot.permissions.argv import (
    REDIRECT_RE,
    SHELL_PROGRAMS,
    LiteralWord,
    command_levels,
    command_words,
    effective_command,
    program_name,
    redirect_targets,
    redirections,
    unwrap_command,
)
from bot.permissions.bash_tree import (
    MAX_TREE_DEPTH,
    CommandParseError,
    ansi_c_text,
    parse_tree,
    unescape_double_quoted,
    unescape_unquoted,
)
from bot.permissions.command_names import NON_RUNNERS, is_command_name
from bot.permissions.deadline import check_deadline
from bot.permissions.embedded import COMPUTED_MARK, embedded_code
from bot.permissions.inner_commands import (
    find_exec_commands,
    shell_script_argument,
    xargs_command,
)
from bot.permissions.wrappers import git_scripts, wrapper_script

__all__ = [
    "SHELL_PROGRAMS",
    "CommandParseError",
    "NestedKind",
    "NestedScript",
    "Script",
    "SimpleCommand",
    "command_words",
    "effective_command",
    "iter_commands",
    "parse_command",
    "pipelines",
    "program_name",
    "redirect_targets",
    "redirections",
    "split_segments",
    "unwrap_command",
    "word_text",
]

NestedKind = Literal["substitution", "process", "group", "script", "exec", "tail"]
"""How a nested script is reached from the command that holds it.

* ``substitution``: ``$(...)`` or backticks; its output becomes words.
* ``process``: ``<(...)`` or ``>(...)``; it is connected as a file.
* ``group``: a subshell, ``{ ...; }``, ``if``/``for``/``while``/``case``, a function
  body; it runs in place of a simple command.
* ``script``: text run as shell code (``sh -c``, ``eval``, a here-document or
  here-string given to a shell).
* ``exec``: a command run by another program (``xargs CMD``, ``find -exec CMD``).
* ``tail``: the words of a program Baton has no reading of, from one that names a
  command on (``docker run IMAGE rm -rf /`` holds ``rm -rf /``): it may run them.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleCommand:
    """One simple command: its words, redirections included, and what it contains.

    Attributes:
        words: The words in order, quotes removed. Redirection operators stay in place
            as words (a file-descriptor number is glued to its operator, so
            ``2>/dev/null`` is ``"2>", "/dev/null"``). Substitutions and expansions
            appear as their source text, e.g. ``"$(curl -s x)"``. Only redirections
            for a group (``( ... ) > out``).
        nested: Scripts found inside this command, in the order they were found.
    """

    words: tuple[str, ...]
    nested: tuple[NestedScript, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NestedScript:
    """A script reached from inside a command (see :data:`NestedKind`)."""

    kind: NestedKind
    script: Script
    # The command gets more arguments than its words: what `xargs` reads from its input.
    open_ended: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Script:
    """A parsed command line: its pipelines, each a sequence of simple commands.

    A command joined with ``;``, ``&&``, ``||``, ``&`` or a newline is a pipeline of
    one stage; ``a | b`` is one pipeline of two stages.
    """

    pipelines: tuple[tuple[SimpleCommand, ...], ...] = ()


# --------------------------------------------------------------------------------------
# Limits. Text run by a shell (`sh -c`, `eval`) is parsed again for each level it is
# nested in, so both the nesting depth and the total amount of text parsed are
# bounded; exceeding either is treated as unparsable rather than silently skipped.

_MAX_NESTING = 12
_BUDGET_PER_CHAR = 8
_MIN_BUDGET = 20_000

_STATEMENT_CONTAINERS = frozenset({"do_group", "else_clause", "elif_clause", "case_item"})
_COMPOUND_STATEMENTS = frozenset(
    """
    subshell compound_statement if_statement while_statement for_statement c_style_for_statement
    case_statement function_definition
    """.split()
)
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
# Statements read as a flat list of words (their leaves, in order).
_FLAT_STATEMENTS = frozenset(
    """
    test_command declaration_command unset_command variable_assignment variable_assignments
    """.split()
)
# What such a statement's words are made of: each one a word of its own.
_FLAT_WORDS = frozenset(
    """
    variable_assignment test_operator word string raw_string concatenation number
    simple_expansion expansion command_substitution process_substitution arithmetic_expansion
    ansi_c_string
    """.split()
)


@dataclass(slots=True)
class _Budget:
    remaining: int

    def spend(self, amount: int) -> None:
        self.remaining -= amount
        if self.remaining < 0:
            raise CommandParseError("the command is too complex to check")
        check_deadline()


@dataclass(slots=True)
class _Command:
    """A simple command being built."""

    words: list[str] = field(default_factory=list)
    nested: list[NestedScript] = field(default_factory=list)
    heredocs: list[str] = field(default_factory=list)  # bodies, to parse if a shell reads them
    tail: list[tuple[SimpleCommand, ...]] = field(default_factory=list)
    tail_piped: bool = False


def _text(source: bytes, node: tree_sitter.Node) -> str:
    return source[node.start_byte : node.end_byte].decode("utf-8", "replace")


def word_text(source: bytes, node: tree_sitter.Node) -> str:
    """A word as bash would pass it after quote removal, expansions left as written.

    ``"a $(b)"`` gives ``a $(b)``, ``\\rm`` gives ``rm``, ``$'\\x72m'`` gives ``rm``,
    ``~/x`` and ``$HOME`` stay as they are.

    Args:
        source: The bytes the node indexes.
        node: A word-like node (word, string, raw_string, concatenation, ...).

    Returns:
        The word's text.
    """
    kind = node.type
    if kind == "word":
        return unescape_unquoted(_text(source, node))
    if kind == "raw_string":
        return _text(source, node)[1:-1]
    if kind == "ansi_c_string":
        return ansi_c_text(_text(source, node)[2:-1])
    if kind == "string":
        return _string_text(source, node)
    if kind == "concatenation":
        return "".join(word_text(source, child) for child in node.children)
    if kind == "translated_string":
        return _text(source, node)[1:].strip('"')
    return _text(source, node)


def _string_text(source: bytes, node: tree_sitter.Node) -> str:
    out: list[str] = []
    position = node.start_byte + 1
    for child in node.named_children:
        out.append(unescape_double_quoted(source[position : child.start_byte].decode("utf-8")))
        piece = _text(source, child)
        out.append(unescape_double_quoted(piece) if child.type == "string_content" else piece)
        position = child.end_byte
    out.append(unescape_double_quoted(source[position : node.end_byte - 1].decode("utf-8")))
    return "".join(out)


class _Builder:
    """Turns one tree-sitter tree into a :class:`Script`."""

    def __init__(self, source: bytes, budget: _Budget, level: int) -> None:
        self._source = source
        self._budget = budget
        self._level = level

    def script(self, node: tree_sitter.Node) -> Script:
        return Script(pipelines=tuple(self._statements(node.named_children, 1)))

    def _statements(
        self, nodes: Sequence[tree_sitter.Node], depth: int
    ) -> list[tuple[SimpleCommand, ...]]:
        found: list[tuple[SimpleCommand, ...]] = []
        for node in nodes:
            found += self._pipelines(node, depth)
        return found

    def _pipelines(self, node: tree_sitter.Node, depth: int) -> list[tuple[SimpleCommand, ...]]:
        """The pipelines one statement node stands for."""
        if depth > MAX_TREE_DEPTH:
            raise CommandParseError("commands are nested too deeply to check")
        self._budget.spend(1)
        kind = node.type
        if kind == "comment":
            return []
        if kind == "list":
            return self._statements(_flatten_list(node), depth + 1)
        if kind == "negated_command":
            return self._statements(node.named_children, depth + 1)
        if kind == "pipeline":
            return self._pipeline(node, depth)
        if kind == "redirected_statement":
            return self._redirected(node, depth)
        if kind == "command":
            command = _Command()
            self._command(node, command, depth + 1)
            return self._finish(command)
        if kind in _COMPOUND_STATEMENTS:
            return [(self._group(node, depth + 1),)]
        if kind in _FLAT_STATEMENTS:
            command = _Command()
            self._flat_words(node, command, depth + 1)
            return self._finish(command)
        raise CommandParseError(f"the checker does not model bash's {kind.replace('_', ' ')}")

    def _pipeline(self, node: tree_sitter.Node, depth: int) -> list[tuple[SimpleCommand, ...]]:
        stages: list[SimpleCommand] = []
        after: list[tuple[SimpleCommand, ...]] = []
        for child in node.named_children:
            found = self._pipelines(child, depth + 1)
            if found:
                stages += found[0]
                after += found[1:]
        return [tuple(stages), *after] if stages else after

    def _redirected(self, node: tree_sitter.Node, depth: int) -> list[tuple[SimpleCommand, ...]]:
        body = [child for child in node.named_children if child.type not in _REDIRECTS]
        redirects = _Command()
        for child in node.named_children:
            if child.type in _REDIRECTS:
                self._redirect(child, redirects, depth + 1)
        found = self._statements(body, depth + 1)
        if not found:
            return self._finish(redirects)
        # bash binds a redirection to the last simple command (`a && b > out` writes b's
        # output); tree-sitter hangs it on the whole list, so it is moved back here.
        *pipes, last = found
        *stages, final = last
        derived = _derived_scripts(
            (*final.words, *redirects.words), redirects.heredocs, self._budget, self._level
        )
        known = (*final.nested, *redirects.nested)
        final = SimpleCommand(
            words=(*final.words, *redirects.words), nested=(*known, *_unseen(derived, known))
        )
        merged = [*pipes, (*stages, final)]
        return self._with_tail(merged, redirects)

    def _with_tail(
        self, found: list[tuple[SimpleCommand, ...]], command: _Command
    ) -> list[tuple[SimpleCommand, ...]]:
        # What follows a here-document's delimiter on its line (`cat <<EOF | sh`) is
        # parsed by tree-sitter inside the redirection; it belongs after the command.
        if not command.tail:
            return found
        if command.tail_piped and found:
            first, *rest = command.tail
            return [*found[:-1], (*found[-1], *first), *rest]
        return [*found, *command.tail]

    def _finish(self, command: _Command) -> list[tuple[SimpleCommand, ...]]:
        if not command.words and not command.nested:
            return self._with_tail([], command)
        derived = _derived_scripts(command.words, command.heredocs, self._budget, self._level)
        nested = (*command.nested, *_unseen(derived, command.nested))
        built = SimpleCommand(words=tuple(command.words), nested=nested)
        return self._with_tail([(built,)], command)

    def _command(self, node: tree_sitter.Node, command: _Command, depth: int) -> None:
        children = node.children
        for index, child in enumerate(children):
            kind = child.type
            if kind in _REDIRECTS:
                self._redirect(child, command, depth + 1)
            elif kind == "command_name":
                for inner in child.named_children:
                    self._word(inner, command, depth + 1)
            elif kind == "$" and not child.is_named:
                # `$"..."`: a translated string, the same text in the C locale.
                following = children[index + 1] if index + 1 < len(children) else None
                if following is None or following.start_byte != child.end_byte:
                    command.words.append("$")
            elif child.is_named and kind != "comment":
                self._word(child, command, depth + 1)

    def _word(self, node: tree_sitter.Node, command: _Command, depth: int) -> None:
        text = self._assignment_text(node) if node.type == "variable_assignment" else None
        if text is None:
            text = word_text(self._source, node)
        if REDIRECT_RE.fullmatch(text):
            text = LiteralWord(text)
        command.words.append(text)
        command.nested += self._substitutions(node, depth + 1)

    def _assignment_text(self, node: tree_sitter.Node) -> str:
        value = node.child_by_field_name("value")
        if value is None:
            return _text(self._source, node)
        head = self._source[node.start_byte : value.start_byte].decode("utf-8")
        return head + word_text(self._source, value)

    def _flat_words(self, node: tree_sitter.Node, command: _Command, depth: int) -> None:
        """Words of a test, declaration or assignment: its leaves, in order."""
        if depth > MAX_TREE_DEPTH:
            raise CommandParseError("commands are nested too deeply to check")
        if node.type in _REDIRECTS:
            self._redirect(node, command, depth + 1)
            return
        if node.type in _FLAT_WORDS or not node.children:
            self._word(node, command, depth + 1)
            return
        for child in node.children:
            self._flat_words(child, command, depth + 1)

    def _redirect(self, node: tree_sitter.Node, command: _Command, depth: int) -> None:
        descriptor = ""
        operator = ""
        targets: list[tree_sitter.Node] = []
        for child in node.children:
            if child.type == "file_descriptor":
                descriptor = _text(self._source, child)
            elif not child.is_named and not operator:
                operator = child.type
            elif child.type in ("heredoc_start", "heredoc_body", "heredoc_end"):
                continue
            elif child.is_named and child.type not in _STATEMENT_LIKE:
                targets.append(child)
        if node.type == "heredoc_redirect":
            self._heredoc(node, command, descriptor + operator, depth)
            return
        command.words.append(descriptor + operator)
        if targets:
            self._word(targets[0], command, depth + 1)
            for extra in targets[1:]:  # `echo x > out y`: y is an argument of echo
                self._word(extra, command, depth + 1)
        else:
            after = self._source[node.start_byte : node.end_byte].decode("utf-8")
            command.words.append(after.split(operator, 1)[-1].strip())

    def _heredoc(
        self, node: tree_sitter.Node, command: _Command, operator: str, depth: int
    ) -> None:
        delimiter = ""
        for child in node.named_children:
            if child.type == "heredoc_start":
                delimiter = unescape_unquoted(_text(self._source, child)).replace("'", "")
                delimiter = delimiter.replace('"', "")
                command.words += [operator, delimiter]
            elif child.type == "heredoc_body":
                body = _text(self._source, child)
                if operator.endswith("<<-"):
                    body = "\n".join(line.lstrip("\t") for line in body.split("\n"))
                command.heredocs.append(body)
                command.nested += self._substitutions(child, depth + 1)
            elif child.type in _STATEMENT_LIKE:
                piped = child.type == "pipeline" and child.children[0].type in ("|", "|&")
                if not command.tail:
                    command.tail_piped = piped
                command.tail += self._pipelines(child, depth + 1)

    def _group(self, node: tree_sitter.Node, depth: int) -> SimpleCommand:
        inner: list[tuple[SimpleCommand, ...]] = []
        nested: list[NestedScript] = []
        self._collect_group(node, inner, nested, depth)
        group = NestedScript(kind="group", script=Script(pipelines=tuple(inner)))
        return SimpleCommand(words=(), nested=(*nested, group))

    def _collect_group(
        self,
        node: tree_sitter.Node,
        inner: list[tuple[SimpleCommand, ...]],
        nested: list[NestedScript],
        depth: int,
    ) -> None:
        if depth > MAX_TREE_DEPTH:
            raise CommandParseError("commands are nested too deeply to check")
        for child in node.named_children:
            kind = child.type
            if kind in _STATEMENT_CONTAINERS or (
                kind == "compound_statement" and node.type == "function_definition"
            ):
                self._collect_group(child, inner, nested, depth + 1)
            elif kind in _STATEMENT_LIKE:
                inner += self._pipelines(child, depth + 1)
            else:  # `for x in $(...)`, `case $(...) in`: words that may hold commands
                nested += self._substitutions(child, depth + 1)

    def _substitutions(self, node: tree_sitter.Node, depth: int) -> list[NestedScript]:
        """Command and process substitutions inside a word, as nested scripts."""
        if depth > MAX_TREE_DEPTH:
            raise CommandParseError("commands are nested too deeply to check")
        kind = node.type
        if kind in ("command_substitution", "process_substitution"):
            if self._level + 1 > _MAX_NESTING:
                raise CommandParseError("commands are nested too deeply to check")
            inner = _Builder(self._source, self._budget, self._level + 1)
            script = Script(pipelines=tuple(inner._statements(node.named_children, depth + 1)))
            how: NestedKind = "substitution" if kind == "command_substitution" else "process"
            return [NestedScript(kind=how, script=script)]
        found: list[NestedScript] = []
        for child in node.named_children:
            found += self._substitutions(child, depth + 1)
        return found


def _flatten_list(node: tree_sitter.Node) -> list[tree_sitter.Node]:
    """The statements of `a && b || c ...`, which tree-sitter nests leftwards, one per level."""
    found: list[tree_sitter.Node] = []
    while node.type == "list":
        children = node.named_children
        found[:0] = [child for child in children[1:] if child.type != "comment"]
        if not children:
            break
        node = children[0]
    if node.type != "list":
        found.insert(0, node)
    return found


_STATEMENT_LIKE = (
    frozenset("command list pipeline redirected_statement negated_command".split())
    | _FLAT_STATEMENTS
    | _COMPOUND_STATEMENTS
)


def _parse(text: str, budget: _Budget, level: int) -> Script:
    if level > _MAX_NESTING:
        raise CommandParseError("commands are nested too deeply to check")
    budget.spend(len(text) + 1)
    root, source = parse_tree(text)
    return _Builder(source, budget, level).script(root)


# --------------------------------------------------------------------------------------
# Commands that run other commands


def _derived_scripts(
    words: Sequence[str],
    heredocs: Sequence[str],
    budget: _Budget,
    level: int,
    *,
    tails: bool = True,
) -> list[NestedScript]:
    """Scripts a command runs from its arguments: ``sh -c``, ``eval``, ``xargs``..."""
    levels = command_levels(words)
    command = levels[-1]
    program, args = (command[0], command[1:]) if command else ("", ())

    def script(text: str) -> NestedScript:
        return NestedScript(kind="script", script=_parse(text, budget, level + 1))

    def run(
        argv: Sequence[str], kind: NestedKind = "exec", *, open_ended: bool = False
    ) -> NestedScript:
        if level + 1 > _MAX_NESTING:
            raise CommandParseError("commands are nested too deeply to check")
        budget.spend(len(argv))
        nested = _derived_scripts(argv, (), budget, level + 1, tails=kind != "tail")
        inner = SimpleCommand(words=tuple(argv), nested=tuple(nested))
        script = Script(pipelines=((inner,),))
        return NestedScript(kind=kind, script=script, open_ended=open_ended)

    def maybe(text: str) -> NestedScript | None:
        """Code that may run, where it parses: matched by rules as a tail is."""
        try:
            return NestedScript(kind="tail", script=_parse(text, budget, level + 1))
        except CommandParseError:
            return None

    found = _embedded(program, args, command_words(words), script, maybe, run)
    if not command:
        return found  # assignments alone (`x='a[$(...)]'`)
    if program in SHELL_PROGRAMS or program in _SOURCES:
        text = shell_script_argument(args) if program in SHELL_PROGRAMS else None
        if text is not None:
            return [*found, script(text)]
        found += [script(body) for body in heredocs]
        found += [script(target) for op, target in redirections(words) if op == "<<<"]
        if any(word.startswith(("<(", ">(")) for word in words):
            found.append(_computed(program))  # runs what another command prints
        return found
    # script -c, flock -c, su -c, sg, watch, trap, coproc: at whatever level they run.
    texts = [text for name, *rest in levels if (text := wrapper_script(name, tuple(rest)))]
    if texts:
        return [*found, *(script(text) for text in texts)]
    if program == "eval" and args:
        return [*found, script(" ".join(args))]
    if program == "git":
        # Unparsable alias code asks through the danger check's parse error, as any does.
        return [*found, *(script(text) for text in git_scripts(tuple(args)))]
    if program == "xargs":
        return [*found, run(xargs_command(args), open_ended=True)]
    if program == "find":
        return [*found, *(run(argv) for argv in find_exec_commands(args) if argv)]
    if not tails or program in NON_RUNNERS:
        return found
    # A program of unknown habits may run any of its tails that names a command (a
    # tail's own tails are among these already), and a word holding a command line
    # (`ssh -o ProxyCommand='...'`, `make --eval='...'`).
    found += [run(args[i:], "tail") for i in range(len(args)) if is_command_name(args[i])]
    for index, arg in enumerate(args):
        code = _command_line_value(args[index - 1] if index else "", arg)
        if code is not None and (nested := maybe(code)) is not None:
            found.append(nested)
    return found


# Names of options and settings whose value is a command line (`-o ProxyCommand=...`,
# `--eval=...`, `CLEAN_CMD=...`); prose in other options (`--body '... rm -rf ...'`)
# is left alone.
_COMMAND_NAME = re.compile(r"(?i)command|cmd|exec|eval|shell|script|proxy|hook|filter|program")


def _command_line_value(previous: str, arg: str) -> str | None:
    """The command line a word of an unknown program holds, when its name says so."""
    if not any(char.isspace() for char in arg) or "$(" in arg or "`" in arg:
        return None  # (a substitution's own commands are parsed where it stands)
    head = arg.split(None, 1)[0] if arg.strip() else ""
    if "=" in head:
        name, _, value = arg.partition("=")
        return value if _COMMAND_NAME.search(name) else None
    if previous.startswith("-") and _COMMAND_NAME.search(previous.lstrip("-").split("=")[0]):
        return arg
    return None


_SOURCES = frozenset({"source", "."})


def _unseen(derived: Sequence[NestedScript], known: Sequence[NestedScript]) -> list[NestedScript]:
    """The derived scripts not parsed already where they stand (an unquoted `$(id)`)."""
    seen = {nested.script for nested in known}
    return [nested for nested in derived if nested.script not in seen]


def _embedded(
    program: str,
    args: Sequence[str],
    words: Sequence[str],
    script: Callable[[str], NestedScript],
    maybe: Callable[[str], NestedScript | None],
    run: Callable[..., NestedScript],
) -> list[NestedScript]:
    """The code a command carries in its words (bot.permissions.embedded), parsed."""
    code = embedded_code(program, args, words)
    found = [script(text) for text in code.scripts if text.strip()]
    found += [nested for text in code.doubtful if (nested := maybe(text)) is not None]
    computed = code.computed
    for line in code.extended:
        try:
            argv = shlex.split(line)
        except ValueError:
            computed = True
            continue
        if argv:
            found.append(run(argv, open_ended=True))
    if computed:
        found.append(_computed(program))
    return found


def _computed(program: str) -> NestedScript:
    """A stand-in for code only known when the command runs: a program named at run time."""
    marker = SimpleCommand(words=(COMPUTED_MARK.format(program=program),))
    return NestedScript(kind="tail", script=Script(pipelines=((marker,),)))


# --------------------------------------------------------------------------------------
# Public helpers


def parse_command(command: str) -> Script:
    """Parse a command line into pipelines of simple commands, nested scripts included.

    Args:
        command: The command line, as it would be given to ``bash -c``.

    Returns:
        The parsed script.

    Raises:
        CommandParseError: bash's grammar rejects the command (e.g. an unbalanced quote
            or parenthesis), or it is nested too deeply or too large to analyse.
    """
    parsed = _parsed(command)
    if isinstance(parsed, CommandParseError):
        raise parsed
    return parsed


@functools.lru_cache(maxsize=64)
def _parsed(command: str) -> Script | CommandParseError:
    """One parse per command line, shared by every check of a call (a Script is immutable).

    A refusal is kept too, so the checks that each try the same unparsable line do not
    parse it again.
    """
    budget = _Budget(max(_MIN_BUDGET, len(command) * _BUDGET_PER_CHAR))
    try:
        return _parse(command, budget, 0)
    except CommandParseError as error:
        return error


def iter_commands(script: Script) -> Iterator[SimpleCommand]:
    """Yield every simple command of a script, each followed by the ones nested in it.

    Args:
        script: A parsed script.

    Yields:
        Simple commands, depth first, in source order.
    """
    for pipeline in script.pipelines:
        for command in pipeline:
            yield command
            for nested in command.nested:
                yield from iter_commands(nested.script)


def split_segments(command: str) -> list[tuple[str, ...]]:
    """Split a command line into simple-command segments (tuples of shell words).

    Commands nested in a segment (substitutions, groups, ``sh -c`` strings, ``eval``,
    ``xargs CMD``, ``find -exec CMD ;``, here-documents fed to a shell) follow it as
    segments of their own. Redirections stay in their segment (see
    :func:`redirections`).

    Args:
        command: The command line.

    Returns:
        The non-empty segments, in order.

    Raises:
        CommandParseError: The command cannot be parsed.

    Example:
        >>> split_segments("ls 2>/dev/null && echo $(whoami)")
        [('ls', '2>', '/dev/null'), ('echo', '$(whoami)'), ('whoami',)]
    """
    return [found.words for found in iter_commands(parse_command(command)) if found.words]


def pipelines(command: str) -> list[list[tuple[str, ...]]]:
    """Split a command line into pipelines, each a list of segments in pipe order.

    ``curl x | sh; ls`` gives ``[[('curl', 'x'), ('sh',)], [('ls',)]]``. Pipelines
    nested in a segment follow the pipeline holding it.

    Args:
        command: The command line.

    Returns:
        The pipelines with at least one segment.

    Raises:
        CommandParseError: The command cannot be parsed.
    """
    found: list[list[tuple[str, ...]]] = []

    def walk(script: Script) -> None:
        for pipeline in script.pipelines:
            stages = [stage.words for stage in pipeline if stage.words]
            if stages:
                found.append(stages)
            for stage in pipeline:
                for nested in stage.nested:
                    walk(nested.script)

    walk(parse_command(command))
    return found
