"""Per-program models: whether a call of a known program only reads.

An allow rule with a pattern, ``bash(find *)`` or ``bash(sed -n*)``, is written with
the program's harmless uses in mind; but ``find -exec``, ``sed -i``, ``rg --pre`` and
``sort -o`` write files or run programs through the same rule. As Codex's
``is_safe_command`` does, Baton reads each known program's arguments with a model
of that program, and a patterned allow approves the call only when every option, every
sed script command and every find primary is known to only read
(:func:`allow_problem` returns None); otherwise the call goes on to the next rule.
``rm`` has a model too: a rule for it vouches for deleting the files named, not for
``-f`` or ``-r``. Programs that run other programs (shells, ``sudo``, ``flock`` ...)
are never vouched for by their own name: the rule must name what they run.

The programs modelled: ``find`` (:mod:`.find`), ``sed`` (:mod:`.sed`), ``awk`` and its
kin (:mod:`.awk`), ``tar`` (:mod:`.tar`), ``xargs`` and ``env`` (here: they run another
program, which must itself be known to only read), and the programs judged by their
options alone (:mod:`.tables`): ``ls``, ``cat``, ``head``, ``tail``, ``wc``, ``sort``,
``uniq``, ``cut``, ``tr``, ``diff``, ``jq``, ``grep``, ``rg``, ``less``, ``more``,
``man``, ``base64``. git has a model of its own (:mod:`bot.permissions.git_args`). A program with no
model is approved in its plain form, as the rule's words say.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextvars import ContextVar

from bot.permissions.argv import SHELL_PROGRAMS
from bot.permissions.options import parse_args, table
from bot.permissions.programs.awk import awk_problem
from bot.permissions.programs.find import find_problem
from bot.permissions.programs.sed import sed_problem
from bot.permissions.programs.tables import SIMPLE_PROGRAMS, SimpleProgram
from bot.permissions.programs.tar import tar_problem
from bot.permissions.wrappers import WRAPPERS

__all__ = ["MODELLED", "RUNNERS", "allow_problem"]

_Model = Callable[..., str | None]
# `env env env ... ls`: each level is judged in turn, so the chain is bounded.
_MAX_DEPTH = 8
_depth: ContextVar[int] = ContextVar("baton_allow_problem_depth", default=0)

_XARGS = table(
    flags="0prtxo",
    values="adEILnPs",
    optional="eil",
    longs="null no-run-if-empty verbose exit interactive open-tty show-limits help version",
    long_values="arg-file delimiter max-args max-chars max-lines max-procs process-slot-var",
    long_optional="eof replace",
    permute=False,
)
_ENV = table(
    flags="i0v",
    values="uCS",
    longs="ignore-environment null debug list-signal-handling help version",
    long_values="unset chdir split-string",
    long_optional="block-signal default-signal ignore-signal",
    names={"S": "split-string", "u": "unset", "C": "chdir", "i": "ignore-environment"},
    permute=False,
)
# Variables a program reads for its look (language, time zone, colours, width), never
# for what it runs or loads; `env LC_ALL=C sort` stays a read.
_HARMLESS_VARIABLES = re.compile(
    r"(?:LC_[A-Z]+|LANG|LANGUAGE|TZ|TERM|COLUMNS|LINES|NO_COLOR|CLICOLOR|CLICOLOR_FORCE|"
    r"FORCE_COLOR|GREP_COLORS?|LS_COLORS|TIME_STYLE|POSIXLY_CORRECT)="
)


def allow_problem(argv: Sequence[str], *, open_ended: bool = False) -> str | None:
    """Why an allow rule naming this program must not vouch for the call, or None.

    Args:
        argv: The command's words, program first (as an allow rule names it).
        open_ended: The program will get more words than these (``xargs PROGRAM ...``),
            which may be options.

    Returns:
        A sentence for the approver, or None when the call only reads, or when the
        program has no model (then only its plain form was asked of it).
    """
    if not argv:
        return None
    depth = _depth.get()
    if depth >= _MAX_DEPTH:
        return f"{argv[0]} is run through more than {_MAX_DEPTH} other programs"
    token = _depth.set(depth + 1)
    try:
        return _problem(argv, open_ended=open_ended)
    finally:
        _depth.reset(token)


def _problem(argv: Sequence[str], *, open_ended: bool) -> str | None:
    model = _MODELS.get(argv[0])
    if model is None:
        if argv[0] in RUNNERS:
            return (
                f"{argv[0]} runs other programs; an allow rule vouches for the program that "
                "runs, named as such"
            )
        return None
    return model(tuple(argv[1:]), open_ended=open_ended)


def _simple(name: str, program: SimpleProgram) -> _Model:
    def problem(args: tuple[str, ...], *, open_ended: bool = False) -> str | None:
        parsed = parse_args(args, program.options)
        for option in parsed.options:
            if option.name in program.unsafe:
                return f"{name} {program.unsafe[option.name]}"
        if (unknown := parsed.unknown()) is not None:
            return f"{name} {unknown.word}: an option this check does not know"
        if program.operands is not None and (found := program.operands(parsed)):
            return f"{name} {found}"
        if program.plus_words:
            for word in parsed.operands:
                if word.startswith("+") and not _harmless_plus(word):
                    return f"{name} {word}: a command it runs at start, which may run programs"
        if open_ended and not parsed.ended and (program.unsafe or program.operands):
            return f"{name} given more arguments by xargs may be given options that write or run"
        return None

    return problem


def _harmless_plus(word: str) -> bool:
    """``+NUM``, ``+G``, ``+F``, ``+/pattern``: where to start, not a command to run."""
    rest = word[1:]
    return rest.isdigit() or rest in ("G", "g", "F") or rest[:1] in ("/", "?")


def _xargs_problem(args: tuple[str, ...], *, open_ended: bool = False) -> str | None:
    del open_ended  # xargs's own words come first; what it appends goes to its command
    parsed = parse_args(args, _XARGS)
    if (unknown := parsed.unknown()) is not None:
        return f"xargs {unknown.word}: an option this check does not know"
    if replace := parsed.given("I", "i", "replace"):
        return (
            f"xargs {replace.word} puts what it reads inside the command's words, options "
            "and scripts included"
        )
    if parsed.given("process-slot-var"):
        return "xargs --process-slot-var sets an environment variable the command runs with"
    command = parsed.operands or ("echo",)
    program = command[0]
    if program == "echo":
        return None
    if program not in _MODELS:
        return f"xargs runs {program}, which Baton cannot vouch for with arguments it has not seen"
    return allow_problem(command, open_ended=True)


def _env_problem(args: tuple[str, ...], *, open_ended: bool = False) -> str | None:
    parsed = parse_args(args, _ENV)
    if (unknown := parsed.unknown()) is not None:
        return f"env {unknown.word}: an option this check does not know"
    if split := parsed.values("split-string"):
        return f"env -S {split[0]!r} runs a command line split from one string"
    words = list(parsed.operands)
    while words and "=" in words[0] and not words[0].startswith("="):
        if not _HARMLESS_VARIABLES.match(words[0]):
            name = words[0].split("=", 1)[0]
            return f"env sets {name}, which can change what a program loads or runs"
        words.pop(0)
    if not words:
        return None  # prints the environment
    if words[0] not in _MODELS:
        if words[0] in WRAPPERS:
            return f"env runs {words[0]}, which runs another program"
        return (
            None
            if len(words) == 1 and words[0] in ("true", "false", "pwd")
            else (f"env runs {words[0]}, which Baton has no model of")
        )
    return allow_problem(words, open_ended=open_ended)


_MODELS: dict[str, _Model] = {
    **{name: _simple(name, program) for name, program in SIMPLE_PROGRAMS.items()},
    "find": find_problem,
    "sed": sed_problem,
    "awk": awk_problem,
    "gawk": awk_problem,
    "mawk": awk_problem,
    "nawk": awk_problem,
    "tar": tar_problem,
    "xargs": _xargs_problem,
    "env": _env_problem,
}

MODELLED = frozenset(_MODELS)
"""The programs with a model (git's is apart, in :mod:`bot.permissions.git_args`)."""

RUNNERS = frozenset({*SHELL_PROGRAMS, *WRAPPERS, "eval", "source", ".", "parallel", "npx"})
"""Programs whose job is to run another: no allow rule vouches for one by its own name."""
