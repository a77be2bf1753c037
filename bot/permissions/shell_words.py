"""Split shell commands into words the way a shell would, for the safety checks.

The danger checks must reason about what a command *runs*, not about the characters
it contains: ``echo "rm -rf /"`` only prints text, while ``\\rm -rf x`` deletes files.
This module turns a command line into simple commands (tuples of words), keeps the
pipelines they form, and exposes commands hidden inside other commands (``$(...)``,
backticks, ``<(...)``, ``sh -c``, ``eval``, ``xargs``, ``find -exec``, here-documents
fed to a shell) so they are checked too.

Tokenising is done by :class:`shlex.shlex` (POSIX mode, punctuation characters,
whitespace splitting), taught a few shell rules it does not know on its own:

* a newline separates commands, and a ``#`` comment does not swallow that newline;
* ``#`` starts a comment only at the beginning of a word (``curl x#y | sh`` is a pipe);
* backslash-newline continues a line;
* ``$(...)``, backticks and ``<(...)``/``>(...)`` are recognised unquoted and inside
  double quotes, with their own nested quoting, and become nested scripts;
* here-document bodies are data, not commands (unless fed to a shell);
* an operator is told apart from a quoted word that looks like one (``'>'``).

This is a best-effort model of bash syntax for a safety net, not a complete parser.
Whatever it cannot tokenise raises :class:`CommandParseError`; callers should treat
that as "a human has to look at this".
"""

from __future__ import annotations

import re
import shlex
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

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
]

NestedKind = Literal["substitution", "process", "group", "script", "exec"]
"""How a nested script is reached from the command that holds it.

* ``substitution``: ``$(...)`` or backticks; its output becomes words.
* ``process``: ``<(...)`` or ``>(...)``; it is connected as a file.
* ``group``: ``( ... )`` or ``{ ...; }``; it runs in place of a simple command.
* ``script``: text run as shell code (``sh -c``, ``eval``, a here-document or
  here-string given to a shell).
* ``exec``: a command run by another program (``xargs CMD``, ``find -exec CMD``).
"""


class CommandParseError(ValueError):
    """Raised when a command line cannot be split into shell words."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleCommand:
    """One simple command: its words, redirections included, and what it contains.

    Attributes:
        words: The words in order. Redirection operators stay in place as words (a
            file-descriptor number is glued to its operator, so ``2>/dev/null`` is
            ``"2>", "/dev/null"``). Substitutions appear as their source text, e.g.
            ``"$(curl -s x)"``. Empty for a ``( ... )`` or ``{ ...; }`` group.
        nested: Scripts found inside this command, in the order they were found.
    """

    words: tuple[str, ...]
    nested: tuple[NestedScript, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NestedScript:
    """A script reached from inside a command (see :data:`NestedKind`)."""

    kind: NestedKind
    script: Script


@dataclass(frozen=True, slots=True, kw_only=True)
class Script:
    """A parsed command line: its pipelines, each a sequence of simple commands.

    A command joined with ``;``, ``&&``, ``||``, ``&`` or a newline is a pipeline of
    one stage; ``a | b`` is one pipeline of two stages.
    """

    pipelines: tuple[tuple[SimpleCommand, ...], ...] = ()


# --------------------------------------------------------------------------------------
# Limits. A command is lexed again for each level it is nested in, so both the nesting
# depth and the total amount of text lexed are bounded; exceeding either is treated as
# unparsable rather than silently skipped.

_MAX_DEPTH = 12
_BUDGET_PER_CHAR = 40
_MIN_BUDGET = 20_000

# shlex groups runs of these characters into one token; `_split_operators` cuts it up.
_PUNCTUATION = "();<>|&\n"
_OPERATORS = tuple(
    sorted(
        ("&>>", ";;&", "<<<", "&&", "||", ";;", ";&", "|&", ">>", "<<", "<>", ">|", ">&",
         "<&", "&>", ";", "&", "|", "(", ")", "<", ">", "\n"),
        key=len,
        reverse=True,
    )
)  # fmt: skip
_PIPE_OPERATORS = frozenset({"|", "|&"})
_REDIRECT_RE = re.compile(r"(\d*)(&>>|&>|>>|>\||>&|<<<|<<-|<<|<>|<&|>|<)")
_HEREDOC_OPERATORS = frozenset({"<<", "<<-"})
_FD_DUPLICATIONS = frozenset({">&", "<&"})

# The stream replaces each substitution with a marker made of these private-use
# characters, which shlex then carries through as ordinary word characters.
_MARK_OPEN = "\ue000"
_MARK_CLOSE = "\ue001"
_MARK_RE = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_CLOSE}")

_UNQUOTED_STATES = frozenset({" ", "a", "c"})
_RESERVED_WORDS = frozenset({"!", "if", "then", "elif", "else", "do", "while", "until"})
SHELL_PROGRAMS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "yash",
     "posh", "rbash"}
)  # fmt: skip
"""Programs that run shell code: ``-c`` strings and here-documents given to them are parsed."""
_ASSIGNMENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")


class _LiteralWord(str):
    """A quoted word that looks like an operator (``'>'``): data, not a redirection."""

    __slots__ = ()


@dataclass(slots=True)
class _Budget:
    remaining: int

    def enter(self, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise CommandParseError("commands are nested too deeply to check")
        self.spend(1)

    def spend(self, amount: int) -> None:
        self.remaining -= amount
        if self.remaining < 0:
            raise CommandParseError("the command is too complex to check")


@dataclass(slots=True)
class _Heredoc:
    delimiter: str
    strip_tabs: bool
    quoted: bool
    body: str = ""


@dataclass(slots=True)
class _Token:
    text: str
    is_op: bool
    quoted: bool
    # True when the next token starts right after this one, with no blank between.
    glued: bool
    heredoc: _Heredoc | None = None


# --------------------------------------------------------------------------------------
# Lexing


class _Stream:
    """The character source shlex reads from, applying the shell rules shlex lacks.

    It looks at the lexer's state before handing out each character, so it knows
    whether that character is quoted.
    """

    def __init__(self, text: str, start: int, lexer: _Lexer, budget: _Budget, depth: int) -> None:
        self._text = text
        self._pos = start
        self._lexer = lexer
        self._budget = budget
        self._depth = depth
        self._queued: deque[str] = deque()
        self._line_ended = False
        self.pending_heredocs: list[_Heredoc] = []
        # Where each unquoted ")" the lexer has read sits in the text, so the end of a
        # `$(` can be located once the parser knows which ")" closes it.
        self.close_positions: list[int] = []
        self.substitutions: list[tuple[str, str]] = []

    def read(self, size: int = 1) -> str:
        """Return the next character (shlex only ever asks for one)."""
        del size
        if self._queued:
            return self._queued.popleft()
        state = self._lexer.state
        if self._line_ended:
            self._line_ended = False
            if self.pending_heredocs:
                self._read_heredoc_bodies()
        text = self._text
        if state not in ("'", "\\"):
            while text.startswith("\\\n", self._pos):
                self._pos += 2
        if self._pos >= len(text):
            return ""
        self._budget.spend(1)
        pos = self._pos
        char = text[pos]
        unquoted = state in _UNQUOTED_STATES
        if unquoted or state == '"':
            if text.startswith("$(", pos):
                return self._substitute("$(", pos + 2, separate=False)
            if char == "`":
                end = _backtick_end(text, pos + 1)
                return self._emit("`", text[pos + 1 : end].replace("\\`", "`"), end, False)
        if unquoted and text.startswith(("<(", ">("), pos):
            # A process substitution is a word of its own even when glued to the
            # previous one (`cmd<(x)`), so it is preceded by a blank.
            return self._substitute(text[pos : pos + 2], pos + 2, separate=state != " ")
        if unquoted:
            if char == "\n":
                self._line_ended = True
            elif char == ")":
                self.close_positions.append(pos)
        self._pos = pos + 1
        return char

    def readline(self) -> str:
        """Skip a comment, leaving its newline so that it still ends the command."""
        end = self._text.find("\n", self._pos)
        if end == -1:
            end = len(self._text)
        line = self._text[self._pos : end]
        self._pos = end
        return line

    def _substitute(self, kind: str, start: int, *, separate: bool) -> str:
        end = _find_close(self._text, start, self._budget, self._depth + 1)
        return self._emit(kind, self._text[start:end], end, separate)

    def _emit(self, kind: str, inner: str, end: int, separate: bool) -> str:
        self.substitutions.append((kind, inner))
        self._pos = end + 1
        marker = f"{_MARK_OPEN}{len(self.substitutions) - 1}{_MARK_CLOSE}"
        if separate:
            marker = " " + marker
        self._queued.extend(marker[1:])
        return marker[0]

    def _read_heredoc_bodies(self) -> None:
        text = self._text
        for heredoc in self.pending_heredocs:
            lines: list[str] = []
            while self._pos < len(text):
                end = text.find("\n", self._pos)
                if end == -1:
                    end = len(text)
                line = text[self._pos : end]
                self._budget.spend(len(line) + 1)
                self._pos = min(end + 1, len(text))
                if (line.lstrip("\t") if heredoc.strip_tabs else line) == heredoc.delimiter:
                    break
                lines.append(line)
            heredoc.body = "\n".join(lines)
        self.pending_heredocs.clear()


class _Lexer(shlex.shlex):
    """shlex in POSIX mode that also reports whether a token was an operator or quoted."""

    def __init__(self, text: str, budget: _Budget, depth: int, start: int = 0) -> None:
        budget.enter(depth)
        self._state_value: str | None = None
        self._is_op = False
        self._quoted = False
        self._stream = _Stream(text, start, self, budget, depth)
        super().__init__(self._stream, posix=True, punctuation_chars=_PUNCTUATION)
        self.whitespace_split = True
        # Newlines separate commands, so they are punctuation rather than blanks.
        self.whitespace = " \t\r"

    # shlex keeps its automaton state in `self.state`; watching the transitions is the
    # only way to learn how a token was read. State "c" means punctuation (an operator),
    # a quote character or "\\" means quoting or escaping.
    @property  # type: ignore[override]
    def state(self) -> str | None:
        return self._state_value

    @state.setter
    def state(self, value: str | None) -> None:
        if value == "c":
            self._is_op = True
        elif value in ("'", '"', "\\"):
            self._quoted = True
        self._state_value = value

    # In the shell `#` opens a comment only at the start of a word; shlex would also
    # honour it in the middle of one (`x#y`), hiding the rest of the line.
    @property  # type: ignore[override]
    def commenters(self) -> str:
        return "" if self._state_value == "a" else "#"

    @commenters.setter
    def commenters(self, value: str) -> None:
        del value

    @property
    def substitutions(self) -> list[tuple[str, str]]:
        return self._stream.substitutions

    def run(self, *, stop_at_close: bool = False) -> tuple[list[_Token], int]:
        """Read all tokens, or up to the ``)`` that closes an already open ``(``.

        Returns the tokens and, with ``stop_at_close``, the position of that ``)``.
        """
        tokens: list[_Token] = []
        depth = 0
        closes = 0
        heredoc_op: _Token | None = None
        while True:
            self._is_op = False
            self._quoted = False
            try:
                raw = self.get_token()
            except CommandParseError:
                raise
            except ValueError as exc:
                raise CommandParseError(f"cannot split the command into words: {exc}") from exc
            if raw is None:
                break
            glued = bool(self._pushback_chars)
            if self._is_op:
                operators = _split_operators(raw)
                for index, operator in enumerate(operators):
                    if operator == "(":
                        depth += 1
                    elif operator == ")":
                        if stop_at_close and depth == 0:
                            return tokens, self._stream.close_positions[closes]
                        closes += 1
                        depth -= 1
                    last = index == len(operators) - 1
                    tokens.append(_Token(operator, is_op=True, quoted=False, glued=glued and last))
                heredoc_op = tokens[-1] if operators[-1] == "<<" else None
                continue
            token = _Token(raw, is_op=False, quoted=self._quoted, glued=glued)
            if heredoc_op is not None:
                if raw == "-" and not token.quoted and heredoc_op.text == "<<":
                    heredoc_op.text = "<<-"  # `<<- EOF`: the dash belongs to the operator
                    continue
                self._register_heredoc(heredoc_op, token)
                heredoc_op = None
            tokens.append(token)
        if stop_at_close:
            raise CommandParseError("a '$(' or '<(' substitution is never closed")
        return tokens, -1

    def _register_heredoc(self, operator: _Token, token: _Token) -> None:
        if operator.text == "<<" and token.text.startswith("-"):
            operator.text = "<<-"
            token.text = token.text[1:]
        heredoc = _Heredoc(
            delimiter=token.text, strip_tabs=operator.text == "<<-", quoted=token.quoted
        )
        token.heredoc = heredoc
        self._stream.pending_heredocs.append(heredoc)


def _split_operators(raw: str) -> list[str]:
    operators: list[str] = []
    index = 0
    while index < len(raw):
        operator = next(op for op in _OPERATORS if raw.startswith(op, index))
        operators.append(operator)
        index += len(operator)
    return operators


def _find_close(text: str, start: int, budget: _Budget, depth: int) -> int:
    """Position in ``text`` of the ``)`` closing a ``$(`` or ``<(`` opened before ``start``."""
    _, position = _Lexer(text, budget, depth, start).run(stop_at_close=True)
    return position


def _backtick_end(text: str, start: int) -> int:
    index = start
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "`":
            return index
        index += 1
    raise CommandParseError("a backtick command substitution is never closed")


def _expansions_in_text(text: str, budget: _Budget, depth: int) -> list[tuple[str, str]]:
    """The ``$(...)`` and backtick substitutions of an unquoted here-document body."""
    found: list[tuple[str, str]] = []
    index = 0
    while index < len(text):
        if text[index] == "\\":
            index += 2
        elif text.startswith("$(", index):
            end = _find_close(text, index + 2, budget, depth + 1)
            found.append(("$(", text[index + 2 : end]))
            index = end + 1
        elif text[index] == "`":
            end = _backtick_end(text, index + 1)
            found.append(("`", text[index + 1 : end].replace("\\`", "`")))
            index = end + 1
        else:
            index += 1
    return found


# --------------------------------------------------------------------------------------
# Parsing tokens into pipelines of simple commands


@dataclass(slots=True)
class _CommandBuilder:
    words: list[str] = field(default_factory=list)
    nested: list[NestedScript] = field(default_factory=list)
    heredocs: list[_Heredoc] = field(default_factory=list)
    last_token: _Token | None = None

    @property
    def empty(self) -> bool:
        return not self.words and not self.nested

    def accepts_group(self) -> bool:
        """Whether a ``{`` here opens a group rather than being an ordinary word."""
        if not self.words:
            return True
        if self.words[0] == "function":
            return True
        return all(word in _RESERVED_WORDS for word in self.words)


@dataclass(slots=True)
class _ListBuilder:
    pipelines: list[tuple[SimpleCommand, ...]] = field(default_factory=list)
    stages: list[SimpleCommand] = field(default_factory=list)
    current: _CommandBuilder = field(default_factory=_CommandBuilder)


class _Parser:
    def __init__(
        self,
        tokens: list[_Token],
        substitutions: list[tuple[str, str]],
        budget: _Budget,
        depth: int,
    ) -> None:
        self._tokens = tokens
        self._substitutions = substitutions
        self._budget = budget
        self._depth = depth
        self._index = 0
        self._groups = 0  # how many ( ) or { } groups the parser is inside

    def parse(self) -> Script:
        return self._parse_list(closer=None)

    def _parse_list(self, closer: str | None) -> Script:
        built = _ListBuilder()
        while self._index < len(self._tokens):
            token = self._tokens[self._index]
            self._index += 1
            if token.is_op:
                operator = token.text
                if operator in _PIPE_OPERATORS:
                    self._finish_command(built)
                elif operator == "(":
                    self._open_group(built, ")")
                elif operator == ")":
                    if closer == ")":
                        return self._finish(built)
                    self._finish_pipeline(built)  # e.g. the end of a `case` pattern
                elif _REDIRECT_RE.fullmatch(operator):
                    self._add_redirect(built.current, operator)
                else:
                    self._finish_pipeline(built)
                continue
            bare = not token.quoted
            if bare and token.text == "{" and built.current.accepts_group():
                self._open_group(built, "}")
            elif bare and token.text == "}" and not built.current.words:
                if closer == "}":
                    return self._finish(built)
                self._finish_pipeline(built)
            else:
                self._add_word(built.current, token)
        if closer is not None:
            raise CommandParseError(f"a group is never closed with {closer!r}")
        return self._finish(built)

    def _open_group(self, built: _ListBuilder, closer: str) -> None:
        if not built.current.empty:
            # `f() {`, `a=(1 2)`, `then (` ...: what precedes is not piped into the group.
            self._finish_pipeline(built)
        self._groups += 1
        if self._depth + self._groups > _MAX_DEPTH:
            raise CommandParseError("commands are nested too deeply to check")
        inner = self._parse_list(closer)
        self._groups -= 1
        built.current.nested.append(NestedScript(kind="group", script=inner))

    def _add_redirect(self, current: _CommandBuilder, operator: str) -> None:
        previous = current.last_token
        if (
            previous is not None
            and not previous.is_op
            and not previous.quoted
            and previous.glued
            and previous.text.isdigit()
            and current.words
            and current.words[-1] == previous.text
        ):
            operator = current.words.pop() + operator
        current.words.append(operator)
        current.last_token = _Token(operator, is_op=True, quoted=False, glued=False)

    def _add_word(self, current: _CommandBuilder, token: _Token) -> None:
        text = _MARK_RE.sub(lambda match: self._expand(current, int(match.group(1))), token.text)
        if token.quoted and _REDIRECT_RE.fullmatch(text):
            text = _LiteralWord(text)
        current.words.append(text)
        current.last_token = token
        heredoc = token.heredoc
        if heredoc is not None:
            current.heredocs.append(heredoc)
            if not heredoc.quoted:
                for _kind, inner in _expansions_in_text(heredoc.body, self._budget, self._depth):
                    current.nested.append(self._nested("substitution", inner))

    def _expand(self, current: _CommandBuilder, index: int) -> str:
        kind, inner = self._substitutions[index]
        nested_kind: NestedKind = "substitution" if kind in ("$(", "`") else "process"
        current.nested.append(self._nested(nested_kind, inner))
        return f"`{inner}`" if kind == "`" else f"{kind}{inner})"

    def _nested(self, kind: NestedKind, text: str) -> NestedScript:
        return NestedScript(kind=kind, script=_parse(text, self._budget, self._depth + 1))

    def _finish_command(self, built: _ListBuilder) -> None:
        current = built.current
        if current.empty:
            return
        derived = _derived_scripts(current.words, current.heredocs, self._budget, self._depth)
        built.stages.append(
            SimpleCommand(words=tuple(current.words), nested=(*current.nested, *derived))
        )
        built.current = _CommandBuilder()

    def _finish_pipeline(self, built: _ListBuilder) -> None:
        self._finish_command(built)
        if built.stages:
            built.pipelines.append(tuple(built.stages))
            built.stages = []

    def _finish(self, built: _ListBuilder) -> Script:
        self._finish_pipeline(built)
        return Script(pipelines=tuple(built.pipelines))


def _parse(text: str, budget: _Budget, depth: int) -> Script:
    lexer = _Lexer(text, budget, depth)
    tokens, _ = lexer.run()
    return _Parser(tokens, lexer.substitutions, budget, depth).parse()


# --------------------------------------------------------------------------------------
# Commands that run other commands


def _derived_scripts(
    words: Sequence[str], heredocs: Sequence[_Heredoc], budget: _Budget, depth: int
) -> list[NestedScript]:
    """Scripts a command runs from its arguments: ``sh -c``, ``eval``, ``xargs``..."""
    _, command = unwrap_command(words)
    if not command:
        return []
    program, args = command[0], command[1:]

    def script(text: str) -> NestedScript:
        return NestedScript(kind="script", script=_parse(text, budget, depth + 1))

    def run(argv: Sequence[str]) -> NestedScript:
        budget.enter(depth + 1)
        nested = _derived_scripts(argv, (), budget, depth + 1)
        inner = SimpleCommand(words=tuple(argv), nested=tuple(nested))
        return NestedScript(kind="exec", script=Script(pipelines=((inner,),)))

    if program in SHELL_PROGRAMS:
        text = _shell_script_argument(args)
        if text is not None:
            return [script(text)]
        found = [script(heredoc.body) for heredoc in heredocs]
        found += [script(target) for op, target in redirections(words) if op == "<<<"]
        return found
    if program == "su":
        text = _su_script_argument(args)
        return [script(text)] if text is not None else []
    if program == "eval" and args:
        return [script(" ".join(args))]
    if program == "xargs":
        return [run(_xargs_command(args))]
    if program == "find":
        return [run(argv) for argv in _find_exec_commands(args) if argv]
    return []


def _shell_script_argument(args: Sequence[str]) -> str | None:
    """The script of ``sh -c SCRIPT``, or None when the shell reads a file or stdin."""
    has_c = False
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg in ("--", "-"):
            break
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            index += 1
        elif arg.startswith("--"):
            continue
        elif arg.startswith(("-", "+")) and len(arg) > 1:
            has_c = has_c or (arg[0] == "-" and "c" in arg[1:])
        else:
            return arg if has_c else None
    if has_c and index < len(args):
        return args[index]
    return None


def _su_script_argument(args: Sequence[str]) -> str | None:
    for index, arg in enumerate(args):
        if arg in ("-c", "--command") and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith("--command="):
            return arg.split("=", 1)[1]
    return None


def _xargs_command(args: Sequence[str]) -> tuple[str, ...]:
    start = _skip_options(
        args,
        short="aEdILnPs",
        long=frozenset(
            {"--arg-file", "--delimiter", "--eof", "--replace", "--max-lines", "--max-args",
             "--max-procs", "--max-chars", "--process-slot-var"}
        ),
    )  # fmt: skip
    return tuple(args[start:]) or ("echo",)


def _find_exec_commands(args: Sequence[str]) -> list[tuple[str, ...]]:
    commands: list[tuple[str, ...]] = []
    index = 0
    while index < len(args):
        if args[index] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = index + 1
            while end < len(args) and args[end] not in (";", "+"):
                end += 1
            commands.append(tuple(args[index + 1 : end]))
            index = end
        index += 1
    return commands


# --------------------------------------------------------------------------------------
# Wrappers: programs that run the rest of their arguments as a command

_WrapperHandler = Callable[[tuple[str, ...]], tuple[str, ...] | None]


def _skip_options(
    args: Sequence[str], *, short: str = "", long: frozenset[str] = frozenset()
) -> int:
    """Index of the first operand, skipping options and the values they take.

    Args:
        args: The arguments after the program name.
        short: Short options that take a value (attached, ``-n5``, or the next word).
        long: Long options that take the next word as value unless written ``--x=v``.

    Returns:
        The index of the first word that is not an option (or ``len(args)``).
    """
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return index + 1
        if arg.startswith("--"):
            index += 1
            if "=" not in arg and arg in long:
                index += 1
        elif arg.startswith("-") and len(arg) > 1:
            index += 1
            for position, letter in enumerate(arg[1:], start=2):
                if letter in short:
                    if position == len(arg):
                        index += 1
                    break
        else:
            return index
    return index


def _after_options(
    short: str = "", long: frozenset[str] = frozenset(), operands: int = 0
) -> _WrapperHandler:
    def handler(args: tuple[str, ...]) -> tuple[str, ...] | None:
        start = _skip_options(args, short=short, long=long) + operands
        return args[start:] if start < len(args) else None

    return handler


def _env_command(args: tuple[str, ...]) -> tuple[str, ...] | None:
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-S", "--split-string") or arg.startswith(("-S", "--split-string=")):
            if arg in ("-S", "--split-string"):
                value = args[index + 1] if index + 1 < len(args) else ""
                rest = args[index + 2 :]
            else:
                value = arg.split("=", 1)[1] if arg.startswith("--") else arg[2:]
                rest = args[index + 1 :]
            try:
                split = tuple(shlex.split(value))
            except ValueError as exc:
                raise CommandParseError(f"cannot split 'env -S' string: {exc}") from exc
            return (*split, *rest) or None
        if arg == "--":
            index += 1
            break
        if arg in ("-u", "-C", "--unset", "--chdir"):
            index += 2
        elif arg.startswith("-"):
            index += 1  # includes `-` alone, an old spelling of -i
        else:
            break
    while index < len(args) and _ASSIGNMENT_RE.match(args[index]):
        index += 1
    # `env FOO=1` alone prints the environment: then env itself is the program.
    return args[index:] or None


def _command_builtin(args: tuple[str, ...]) -> tuple[str, ...] | None:
    start = _skip_options(args)
    options = "".join(arg for arg in args[:start] if arg != "--")
    if "v" in options or "V" in options:
        return None  # `command -v rm` only looks the program up
    return args[start:] or None


_WRAPPERS: dict[str, _WrapperHandler] = {
    "sudo": _after_options(
        "ugpCDhrtTUR",
        frozenset(
            {"--user", "--group", "--prompt", "--close-from", "--chdir", "--role", "--type",
             "--command-timeout", "--other-user", "--host", "--chroot"}
        ),
    ),
    "doas": _after_options("uC"),
    "pkexec": _after_options("", frozenset({"--user"})),
    "run0": _after_options("uDg", frozenset({"--user", "--group", "--chdir"})),
    "env": _env_command,
    "nohup": _after_options(),
    "time": _after_options("fo", frozenset({"--format", "--output"})),
    "nice": _after_options("n", frozenset({"--adjustment"})),
    "ionice": _after_options("cnpPu", frozenset({"--class", "--classdata"})),
    "timeout": _after_options("sk", frozenset({"--signal", "--kill-after"}), operands=1),
    "command": _command_builtin,
    "exec": _after_options("a"),
    "builtin": _after_options(),
    "stdbuf": _after_options("ioe", frozenset({"--input", "--output", "--error"})),
    "setsid": _after_options(),
    "unbuffer": _after_options(),
    "chronic": _after_options(),
    "busybox": _after_options(),
}  # fmt: skip


# --------------------------------------------------------------------------------------
# Public helpers


def parse_command(command: str) -> Script:
    """Parse a command line into pipelines of simple commands, nested scripts included.

    Args:
        command: The command line, as it would be given to ``bash -c``.

    Returns:
        The parsed script.

    Raises:
        CommandParseError: The command cannot be tokenised (e.g. an unbalanced quote or
            parenthesis), is nested too deeply, or is too large to analyse.
    """
    if _MARK_OPEN in command or _MARK_CLOSE in command:
        raise CommandParseError("the command contains reserved characters U+E000/U+E001")
    budget = _Budget(max(_MIN_BUDGET, len(command) * _BUDGET_PER_CHAR))
    return _parse(command, budget, 0)


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

    Segments are separated by ``;``, ``&&``, ``||``, ``|``, ``&``, newlines and
    parentheses/braces. Redirections stay in their segment (see :func:`redirections`).
    Commands nested in a segment (``$(...)``, backticks, ``<(...)``, ``sh -c`` and
    ``bash -c`` strings, ``eval``, ``xargs CMD``, ``find -exec CMD ;``, here-documents
    fed to a shell) follow it as segments of their own.

    Args:
        command: The command line.

    Returns:
        The non-empty segments, in order.

    Raises:
        CommandParseError: The command cannot be tokenised.

    Example:
        >>> split_segments("ls 2>/dev/null && echo $(whoami)")
        [('ls', '2>', '/dev/null'), ('echo', '$(whoami)'), ('whoami',)]
    """
    return [found.words for found in iter_commands(parse_command(command)) if found.words]


def pipelines(command: str) -> list[list[tuple[str, ...]]]:
    """Split a command line into pipelines, each a list of segments in pipe order.

    ``curl x | sh; ls`` gives ``[[('curl', 'x'), ('sh',)], [('ls',)]]``. Pipelines
    nested in a segment follow the pipeline holding it. A ``( ... )`` or ``{ ...; }``
    group is not a segment of its own; its commands appear as their own pipelines
    (use :func:`parse_command` to see what a group is piped into).

    Args:
        command: The command line.

    Returns:
        The pipelines with at least one segment.

    Raises:
        CommandParseError: The command cannot be tokenised.
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


def redirections(segment: Sequence[str]) -> list[tuple[str, str]]:
    """The redirections in a segment, as (operator, target) pairs.

    The operator is given without its file-descriptor number (``2>`` becomes ``>``).
    For here-documents (``<<``, ``<<-``) the target is the delimiter word; for ``<<<``
    it is the string; for ``>&``/``<&`` it may be a descriptor number.

    Args:
        segment: Words of one segment, as returned by :func:`split_segments`.

    Returns:
        The redirections in order; a trailing operator with no target gets "".
    """
    found: list[tuple[str, str]] = []
    index = 0
    while index < len(segment):
        operator = _redirect_operator(segment[index])
        if operator is None:
            index += 1
            continue
        target = segment[index + 1] if index + 1 < len(segment) else ""
        found.append((operator, target))
        index += 2
    return found


def redirect_targets(segment: Sequence[str]) -> list[str]:
    """The files a segment redirects from or to.

    Here-document delimiters, here-strings and descriptor duplications (``2>&1``)
    are not files and are left out.

    Args:
        segment: Words of one segment, as returned by :func:`split_segments`.

    Returns:
        The file words after redirection operators, in order.

    Example:
        >>> redirect_targets(("sort", "<", "in.txt", "2>", "/dev/null", "2>&", "1"))
        ['in.txt', '/dev/null']
    """
    targets: list[str] = []
    for operator, target in redirections(segment):
        if operator in _HEREDOC_OPERATORS or operator == "<<<" or not target:
            continue
        if operator in _FD_DUPLICATIONS and (target.rstrip("-").isdigit() or target == "-"):
            continue
        targets.append(target)
    return targets


def command_words(segment: Sequence[str]) -> tuple[str, ...]:
    """A segment without its redirections (operators, descriptor numbers and targets).

    Args:
        segment: Words of one segment, as returned by :func:`split_segments`.

    Returns:
        The remaining words: variable assignments, the program and its arguments.

    Example:
        >>> command_words(("ls", "-l", "2>", "/dev/null", ">", "out"))
        ('ls', '-l')
    """
    words: list[str] = []
    index = 0
    while index < len(segment):
        if _redirect_operator(segment[index]) is not None:
            index += 2
            continue
        words.append(segment[index])
        index += 1
    return tuple(words)


def program_name(word: str) -> str:
    """How a command word names its program: basename, without a leading backslash.

    Args:
        word: The first word of a command.

    Returns:
        ``rm`` for ``/usr/bin/rm`` or ``\\rm``; words holding a substitution are left
        as they are.
    """
    name = word.lstrip("\\")
    if "$(" in name or "`" in name:
        return word
    base = name.rsplit("/", 1)[-1]
    return base or name or word


def unwrap_command(words: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Separate the wrappers of a command from the program they run.

    Leading variable assignments (``FOO=1``), reserved words (``if``, ``then``, ``do``,
    ``!`` ...) and wrappers with their options are skipped: ``env``, ``sudo``,
    ``doas``, ``pkexec``, ``nohup``, ``time``, ``nice``, ``ionice``, ``timeout``,
    ``command``, ``exec``, ``builtin``, ``stdbuf``, ``setsid``, ``unbuffer``,
    ``chronic`` and ``busybox``. A wrapper with nothing to run (bare ``env`` or
    ``sudo -v``; ``command -v``, which only looks a name up) is itself the program.

    Args:
        words: A segment or its :func:`command_words`; redirections are dropped.

    Returns:
        The wrapper names (normalised with :func:`program_name`) and the effective
        command, whose first word is normalised the same way.
    """
    remaining = command_words(words)
    wrappers: list[str] = []
    # Each round drops at least the wrapper's own word, so this always ends.
    while True:
        while remaining and (_ASSIGNMENT_RE.match(remaining[0]) or remaining[0] in _RESERVED_WORDS):
            remaining = remaining[1:]
        if not remaining:
            break
        name = program_name(remaining[0])
        handler = _WRAPPERS.get(name)
        if handler is None:
            break
        wrapped = handler(remaining[1:])
        if not wrapped:
            break
        wrappers.append(name)
        remaining = wrapped
    if remaining:
        remaining = (program_name(remaining[0]), *remaining[1:])
    return tuple(wrappers), remaining


def effective_command(words: Sequence[str]) -> tuple[str, ...]:
    """The command that really runs, with wrappers and assignments stripped.

    ``FOO=1 sudo -u me nice -n 5 /usr/bin/rm -rf x`` gives ``('rm', '-rf', 'x')``.
    See :func:`unwrap_command` for the wrappers recognised.

    Args:
        words: A segment or its :func:`command_words`.

    Returns:
        The program (basename, no leading backslash) and its arguments; empty when
        the segment holds only assignments or reserved words.
    """
    return unwrap_command(words)[1]


def _redirect_operator(word: str) -> str | None:
    if isinstance(word, _LiteralWord):
        return None
    match = _REDIRECT_RE.fullmatch(word)
    return match.group(2) if match else None
