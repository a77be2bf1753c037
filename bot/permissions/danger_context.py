"""One simple command as the danger checks see it, and how they read its words.

:func:`command_contexts` walks a parsed script (:mod:`bot.permissions.shell_words`)
and gives a :class:`CommandContext` for every simple command, nested ones included:
its words, the wrappers it runs through, the program that really runs and its
arguments, the pipeline around it and how it was reached. The helpers read arguments
the way most programs do (short option clusters, long options, operands), name the
files a command writes, tell whether a shell or interpreter runs code from standard
input, and show a command to the approver.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bot.permissions.danger_patterns import shown_text
from bot.permissions.deadline import check_deadline
from bot.permissions.git_danger import PathExists
from bot.permissions.shell_words import (
    SHELL_PROGRAMS,
    NestedKind,
    Script,
    SimpleCommand,
    command_words,
    redirections,
    unwrap_command,
)

__all__ = [
    "CommandContext",
    "command_contexts",
    "interpreter",
    "long_flags",
    "normalize_path",
    "operand_args",
    "pipeline_shown",
    "reads_code_from_stdin",
    "shell_reads_stdin",
    "short_flags",
    "show_words",
    "subcommand",
    "written_paths",
]

_INTERPRETER_INLINE_FLAGS = {
    "python": "cm",
    "perl": "eE",
    "ruby": "e",
    "node": "ep",
    "nodejs": "ep",
    "php": "rRBEF",
    "lua": "e",
}
_PYTHON_RE = re.compile(r"python(\d+(\.\d+)?)?")

_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "<>", "&>", "&>>", ">&"})
_COPY_PROGRAMS = frozenset({"cp", "mv", "install", "ln", "rsync"})
_PLAIN_WORD_RE = re.compile(r"[\w@%+=:,./~^{}-]+")
_OPERATOR_WORD_RE = re.compile(r"\d*[<>&|]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandContext:
    """One simple command with what the checks need to know about its surroundings."""

    command: SimpleCommand
    words: tuple[str, ...]  # without redirections
    wrappers: tuple[str, ...]
    argv: tuple[str, ...]  # the effective command: program first
    pipeline: tuple[SimpleCommand, ...]
    index: int  # position in the pipeline
    via: NestedKind | None  # how it was reached, None at the top level
    parent: CommandContext | None
    path_exists: PathExists | None = None  # whether a workspace path exists
    # It gets more arguments than its words (what `xargs` reads and appends).
    open_ended: bool = False

    @property
    def in_tail(self) -> bool:
        """Whether it was reached through a tail: a program Baton cannot read may run it."""
        context: CommandContext | None = self
        while context is not None:
            if context.via == "tail":
                return True
            context = context.parent
        return False

    @property
    def program(self) -> str:
        """The program that runs, through wrappers such as ``sudo`` or ``env``."""
        return self.argv[0] if self.argv else ""

    @property
    def args(self) -> tuple[str, ...]:
        """The program's arguments."""
        return self.argv[1:]

    @property
    def shown(self) -> str:
        """The command as shown to the approver; `find`/`xargs` show the whole thing."""
        if self.via in ("exec", "tail") and self.parent is not None:
            return self.parent.shown
        return show_words(self.words or self.command.words)


def command_contexts(
    script: Script,
    *,
    via: NestedKind | None,
    parent: CommandContext | None,
    open_ended: bool = False,
) -> Iterator[CommandContext]:
    """Every simple command of a script, each followed by those nested in it."""
    for pipeline in script.pipelines:
        for index, command in enumerate(pipeline):
            check_deadline()
            words = command_words(command.words)
            wrappers, argv = unwrap_command(words)
            context = CommandContext(
                command=command,
                words=words,
                wrappers=wrappers,
                argv=argv,
                pipeline=pipeline,
                index=index,
                via=via,
                parent=parent,
                open_ended=open_ended,
            )
            yield context
            for nested in command.nested:
                yield from command_contexts(
                    nested.script, via=nested.kind, parent=context, open_ended=nested.open_ended
                )


def show_words(words: Sequence[str]) -> str:
    """Words joined back into a command line, quoted where the shell would need it."""
    shown = []
    for word in words:
        if _PLAIN_WORD_RE.fullmatch(word) or _OPERATOR_WORD_RE.fullmatch(word):
            shown.append(word)
        elif not any(char in word for char in "'$`"):
            shown.append(f"'{word}'")
        elif '"' not in word:
            shown.append(f'"{word}"')  # keeps `$(...)` readable as a substitution
        else:
            shown.append(shlex.quote(word))
    return shown_text(" ".join(shown))


def pipeline_shown(context: CommandContext) -> str:
    """The whole pipeline around the command, as shown to the approver."""
    return shown_text(" | ".join(show_words(stage.words) for stage in context.pipeline))


def short_flags(args: Sequence[str]) -> str:
    """The letters of all short option clusters before ``--`` (``-rf -v`` gives "rfv")."""
    letters = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            letters.append(arg[1:])
    return "".join(letters)


def long_flags(args: Sequence[str]) -> set[str]:
    """The long options before ``--``, without their ``=value``."""
    found = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--") and len(arg) > 2:
            found.add(arg.split("=", 1)[0])
    return found


def operand_args(args: Sequence[str]) -> list[str]:
    """Arguments that are not options (everything after ``--`` counts)."""
    found: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            found.extend(args[index + 1 :])
            break
        if not arg.startswith("-") or arg == "-":
            found.append(arg)
    return found


def subcommand(args: Sequence[str]) -> str:
    """The first operand, e.g. ``reboot`` in ``systemctl -i reboot``; empty if none."""
    operands = operand_args(args)
    return operands[0] if operands else ""


def normalize_path(path: str) -> str:
    """A path with ``//``, ``.`` and ``..`` folded as written (not resolved)."""
    if not path:
        return path
    return posixpath.normpath(re.sub(r"/{2,}", "/", path))


def written_paths(context: CommandContext) -> list[str]:
    """Files the command writes: redirections, tee, dd of=, sed -i, cp/mv targets."""
    paths = [
        target
        for operator, target in redirections(context.command.words)
        if operator in _WRITE_REDIRECTS and target and not target.isdigit() and target != "-"
    ]
    program, args = context.program, context.args
    if program == "tee":
        paths += operand_args(args)
    elif program == "dd":
        paths += [arg[3:] for arg in args if arg.startswith("of=")]
    elif program in ("sed", "perl") and (
        "i" in short_flags(args) or "--in-place" in long_flags(args)
    ):
        paths += operand_args(args)
    elif program in _COPY_PROGRAMS:
        operands = operand_args(args)
        paths += operands[-1:]
        for index, arg in enumerate(args):
            if arg == "-t" and index + 1 < len(args):
                paths.append(args[index + 1])
            elif arg.startswith("--target-directory="):
                paths.append(arg.split("=", 1)[1])
    return paths


def interpreter(program: str) -> str | None:
    """The interpreter a program is (``python`` for ``python3.11`` too, ``perl``...), or None."""
    if _PYTHON_RE.fullmatch(program):
        return "python"
    return program if program in _INTERPRETER_INLINE_FLAGS else None


def shell_reads_stdin(args: Sequence[str]) -> bool:
    """Whether ``sh ARGS`` takes its commands from standard input."""
    letters = ""
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            break
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            index += 1
        elif arg.startswith("--"):
            continue
        elif arg.startswith(("-", "+")) and len(arg) > 1:
            letters += arg[1:] if arg[0] == "-" else ""
        else:
            index -= 1
            break
    if "c" in letters:
        return False
    return "s" in letters or index >= len(args) or args[index] == "-"


def interpreter_reads_stdin(kind: str, args: Sequence[str]) -> bool:
    """Whether ``python ARGS`` (or perl, ruby, node...) runs code from standard input."""
    if any(letter in _INTERPRETER_INLINE_FLAGS[kind] for letter in short_flags(args)):
        return False
    if long_flags(args) & {"--eval", "--print"}:
        return False
    operands = operand_args(args)
    return not operands or operands[0] == "-"


def reads_code_from_stdin(context: CommandContext) -> bool:
    """Whether the command is a shell or interpreter that runs the code on its stdin."""
    if context.program in SHELL_PROGRAMS:
        return shell_reads_stdin(context.args)
    kind = interpreter(context.program)
    return kind is not None and interpreter_reads_stdin(kind, context.args)
