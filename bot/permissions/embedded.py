"""Shell code hidden in arguments: what deny rules and danger patterns must also read.

Programs that handle data can run commands through one of their options (``tar
--to-command``, ``split --filter``, ``sed``'s ``e``, awk's ``system``); bash's own
builtins evaluate array subscripts, and with them ``$(...)`` hidden in a quoted word
(``let 'a[$(rm -rf src)]'``); ``alias`` values, ``mapfile -C`` callbacks and variables
such as ``LESSOPEN`` or ``GIT_SSH_COMMAND`` are commands. :func:`embedded_code` finds
that code in one command's words, sorted by how sure it is that it runs:

* ``scripts``: it runs (bash parses it as it would any ``sh -c`` string);
* ``doubtful``: it may run (an unknown program's option holding a command line, a
  variable a program may read): a deny rule matching it asks, not denies;
* ``computed``: code made only when the command runs (``sed``'s ``s///e`` runs the
  line it made, awk's ``system(cmd)`` a string it built): no rule can be matched
  against it, so where a deny rule or a rule's own approvers could apply, a person
  reads it (:func:`bot.permissions.hook.PermissionHook`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bot.permissions.options import OptionTable, parse_args, table
from bot.permissions.programs.sed import sed_commands_run
from bot.permissions.programs.tar import new_style

__all__ = ["COMPUTED_MARK", "EVALUATING_BUILTINS", "EmbeddedCode", "embedded_code", "substitutions"]

COMPUTED_MARK = "$(computed by {program})"
"""The program name a placeholder for computed code gets: a name only known at run time."""

EVALUATING_BUILTINS = frozenset(
    """
    let declare typeset local readonly export printf read test [ [[ unset mapfile readarray wait
    shift return exit
    """.split()
)
"""Builtins whose arguments bash evaluates as arithmetic or array subscripts."""

# Variables whose value some program runs as a command line.
_COMMAND_VARIABLES = frozenset(
    """
    LESSOPEN LESSCLOSE PAGER MANPAGER GIT_PAGER EDITOR VISUAL GIT_EDITOR GIT_SEQUENCE_EDITOR GIT_SSH
    GIT_SSH_COMMAND GIT_EXTERNAL_DIFF GIT_ASKPASS SSH_ASKPASS GIT_PROXY_COMMAND BASH_ENV ENV
    PROMPT_COMMAND RSYNC_RSH CVS_RSH BROWSER TAR_OPTIONS
    """.split()
)
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
# Variables that give a program options or settings a rule cannot see.
_CONFIGURING_VARIABLES = frozenset(
    """
    TAR_OPTIONS GIT_CONFIG_PARAMETERS GIT_CONFIG_GLOBAL GIT_CONFIG_SYSTEM GIT_CONFIG
    GIT_CONFIG_COUNT RIPGREP_CONFIG_PATH
    """.split()
)
_MAPFILE = table(flags="t", values="dnOsuCc", names={"C": "callback"})

_TAR_RUNS = table(
    values="IF",
    long_values="to-command checkpoint-action use-compress-program rsh-command rmt-command "
    "info-script new-volume-script",
    names={"I": "use-compress-program", "F": "info-script"},
)
_SPLIT_RUNS = table(long_values="filter")
_INSTALL_RUNS = table(long_values="strip-program")


@dataclass(slots=True)
class EmbeddedCode:
    """Code found in a command's words (see the module's docstring)."""

    scripts: list[str] = field(default_factory=list)
    doubtful: list[str] = field(default_factory=list)
    computed: bool = False
    # Programs it runs with arguments of its own added (`--strip-program=PROG FILE`).
    extended: list[str] = field(default_factory=list)


_Runner = Callable[[Sequence[str], EmbeddedCode], None]


def embedded_code(program: str, args: Sequence[str], words: Sequence[str]) -> EmbeddedCode:
    """The shell code a command carries in its words.

    Args:
        program: The program that runs (through its wrappers).
        args: Its arguments.
        words: The whole command's words (assignments before the program included).
    """
    found = EmbeddedCode()
    for word in words:
        match = _ASSIGNMENT.fullmatch(word)
        if match and match.group(1) in _CONFIGURING_VARIABLES:
            found.computed = True  # a program's options or git's settings, from a variable
        elif match and _runs_value(match.group(1)):
            found.doubtful.append(match.group(2).lstrip("|!"))
    if program in EVALUATING_BUILTINS:
        for arg in args:
            found.scripts += substitutions(arg)
        # `read GIT_EXTERNAL_DIFF <<< ...`, `printf -v PAGER ...`: a command set from data.
        if any(_runs_value(arg) or arg in _CONFIGURING_VARIABLES for arg in args):
            found.computed = True
    else:
        # `$(...)` in a quoted value is text here, but code wherever it is evaluated later
        # (`x='a[$(rm -rf src)]'; echo $((x))`), and in a subscript bash evaluates
        # (`"${a['$(rm -rf src)']}"`): it may run. (`echo '$(id)'` only prints.)
        for word in words:
            if _ASSIGNMENT.match(word) or "${" in word or "$((" in word:
                found.doubtful += substitutions(word)
    if program == "alias":
        found.scripts += [m.group(2) for arg in args if (m := _ASSIGNMENT.fullmatch(arg))]
    if program in ("mapfile", "readarray"):
        found.scripts += parse_args(args, _MAPFILE).values("callback")
    if program in ("hash", "enable") and any(
        a.startswith("-") and set(a[1:]) & set("pf") for a in args
    ):
        found.computed = True  # `hash -p PATH NAME`: NAME now runs another program
    runner = _OPTION_RUNNERS.get(program)
    if runner is not None:
        runner(args, found)
    return found


def substitutions(text: str) -> list[str]:
    """The text of each ``$(...)`` and backquoted command in ``text``, outermost first."""
    found: list[str] = []
    index = 0
    while index < len(text):
        if text.startswith("$(", index) and not text.startswith("$((", index):
            end = _closing_paren(text, index + 2)
            if end is None:
                found.append(text[index + 2 :])
                break
            found.append(text[index + 2 : end])
            index = end + 1
        elif text[index] == "`":
            end = text.find("`", index + 1)
            found.append(text[index + 1 : end if end >= 0 else len(text)])
            index = len(text) if end < 0 else end + 1
        else:
            index += 1
    return [body for body in found if body.strip()]


def _closing_paren(text: str, start: int) -> int | None:
    depth = 1
    for index in range(start, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    return None


def _runs_value(name: str) -> bool:
    return name in _COMMAND_VARIABLES or name.startswith(("GIT_CONFIG_VALUE_", "GIT_CONFIG_KEY_"))


def _tar(args: Sequence[str], found: EmbeddedCode) -> None:
    parsed = parse_args(new_style(tuple(args)), _TAR_RUNS)
    for option in parsed.options:
        if option.value is None:
            continue
        if option.name == "checkpoint-action":
            action, _, command = option.value.partition("=")
            if action == "exec":
                found.scripts.append(command)
        elif option.name in ("info-script", "new-volume-script"):
            found.computed = True  # a script file Baton cannot read
        elif option.name in ("use-compress-program", "rsh-command", "rmt-command"):
            found.extended.append(option.value)  # given -d, or a host and a command
        elif option.name != "?":
            found.scripts.append(option.value)


def _sed(args: Sequence[str], found: EmbeddedCode) -> None:
    commands, computed = sed_commands_run(tuple(args))
    found.scripts += commands
    found.computed = found.computed or computed


_AWK_LITERAL = r'"(?:[^"\\]|\\.)*"'
_AWK_SYSTEM = re.compile(r"\bsystem\b\s*(?:\\\n\s*)*\(?\s*(" + _AWK_LITERAL + r")?")
_AWK_PIPE_BEFORE = re.compile(r"(" + _AWK_LITERAL + r")\s*$")
_AWK_PIPE_AFTER = re.compile(r"^&?\s*(" + _AWK_LITERAL + r")")


def _awk(args: Sequence[str], found: EmbeddedCode) -> None:
    """`system("...")` and `"cmd" | getline` / `print | "cmd"` with literal commands;
    anything else (a command in a variable, data piped into a shell) is computed."""
    for arg in args:
        for match in _AWK_SYSTEM.finditer(arg):
            if match.group(1) is None:
                found.computed = True
            else:
                found.scripts.append(_awk_string(match.group(1)))
        for match in re.finditer(r"(?<!\|)\|(?!\|)", arg):
            before = _AWK_PIPE_BEFORE.search(arg[: match.start()])
            after = _AWK_PIPE_AFTER.match(arg[match.end() :])
            literal = (after or before).group(1) if (after or before) else None
            if literal is None:
                found.computed = True
                continue
            command = _awk_string(literal)
            found.scripts.append(command)
            if after and command.split()[:1] and command.split()[0] in _SHELLS:
                found.computed = True  # what is printed into a shell is code


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "/bin/sh", "/bin/bash"})


def _awk_string(literal: str) -> str:
    return literal[1:-1].replace('\\"', '"').replace("\\\\", "\\")


def _with_values(options: OptionTable, names: tuple[str, ...], *, extended: bool) -> _Runner:
    def runner(args: Sequence[str], found: EmbeddedCode) -> None:
        parsed = parse_args(args, options)
        values = [value for name in names for value in parsed.values(name)]
        (found.extended if extended else found.scripts).extend(values)

    return runner


def _zip(args: Sequence[str], found: EmbeddedCode) -> None:
    for index, arg in enumerate(args):
        if arg == "-TT" and index + 1 < len(args):
            found.extended.append(args[index + 1])  # given the archive's name
        elif arg.startswith("--unzip-command="):
            found.extended.append(arg.split("=", 1)[1])


_OPTION_RUNNERS: dict[str, _Runner] = {
    "tar": _tar,
    "sed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "nawk": _awk,
    "split": _with_values(_SPLIT_RUNS, ("filter",), extended=False),  # run by sh -c
    "install": _with_values(_INSTALL_RUNS, ("strip-program",), extended=True),
    "zip": _zip,
}
