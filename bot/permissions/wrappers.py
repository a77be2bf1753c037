"""Programs that run other programs: the command after their options, or a string as shell code.

``taskset -c 0 rm -rf src`` deletes as surely as ``rm -rf src``; ``script -qc 'rm -rf
src' /dev/null`` and ``trap 'rm -rf src' EXIT`` run shell code given as one word. The
deny rules, the danger patterns and per-rule approvers must see those commands, so
this module says, for each such program, which of its words are the command it runs
(:data:`WRAPPERS`, read by :func:`bot.permissions.argv.unwrap_command`) or the shell
code it runs (:func:`wrapper_script`, parsed by :mod:`bot.permissions.shell_words`).

Each reading follows the program's own parser: the options that take a value, where
options end (most of these stop at their first operand: that is the command), and
the modes in which they run nothing (``taskset -p PID``, ``command -v``).
:data:`HARMLESS_WRAPPERS` are the ones an allow rule may look through: they change how
a program is scheduled or timed, never what it is or what it may touch.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from bot.permissions.bash_tree import CommandParseError
from bot.permissions.git_args import split_git
from bot.permissions.options import skip_options

__all__ = ["HARMLESS_WRAPPERS", "WRAPPERS", "WrapperHandler", "git_scripts", "wrapper_script"]

WrapperHandler = Callable[[tuple[str, ...]], tuple[str, ...] | None]
"""Given a wrapper's arguments, the command it runs, or None when it runs none."""

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _after_options(
    short: str = "",
    long: frozenset[str] = frozenset(),
    operands: int = 0,
    *,
    no_command: str = "",
    no_command_long: frozenset[str] = frozenset(),
) -> WrapperHandler:
    """A wrapper whose command follows its options and `operands` words of its own.

    Args:
        short: Short options that take a value.
        long: Long options that take the next word as value.
        operands: Words between the options and the command (``timeout DURATION``).
        no_command: Short options that mean no command runs (``taskset -p``).
        no_command_long: Long options that mean no command runs.
    """

    def handler(args: tuple[str, ...]) -> tuple[str, ...] | None:
        start = skip_options(args, short=short, long=long)
        for word in args[:start]:
            if word.startswith("--"):
                if word.split("=", 1)[0] in no_command_long:
                    return None
            elif word.startswith("-") and set(word[1:]) & set(no_command):
                return None
        start += operands
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
    while index < len(args) and _ASSIGNMENT.match(args[index]):
        index += 1
    # `env FOO=1` alone prints the environment: then env itself is the program.
    return args[index:] or None


def _command_builtin(args: tuple[str, ...]) -> tuple[str, ...] | None:
    start = skip_options(args)
    options = "".join(arg for arg in args[:start] if arg != "--")
    if "v" in options or "V" in options:
        return None  # `command -v rm` only looks the program up
    return args[start:] or None


def _flock_command(args: tuple[str, ...]) -> tuple[str, ...] | None:
    # `flock [options] FILE COMMAND...`; `flock FILE -c STRING` is wrapper_script's.
    start = skip_options(
        args, short="wEc", long=frozenset({"--timeout", "--conflict-exit-code", "--command"})
    )
    if any(word in ("-c", "--command") or word.startswith("--command=") for word in args):
        return None
    rest = args[start + 1 :]
    return rest or None


def _coproc_command(args: tuple[str, ...]) -> tuple[str, ...] | None:
    # `coproc NAME { ...; }` is read as words by the grammar: wrapper_script joins them.
    if _coproc_compound(args) is not None:
        return None
    return args or None


def _coproc_compound(args: tuple[str, ...]) -> str | None:
    """The body of ``coproc [NAME] { ...; }`` or ``coproc [NAME] ( ... )``, as shell text."""
    words = list(args)
    if len(words) > 1 and _NAME.fullmatch(words[0]) and words[1] in ("{", "("):
        words = words[1:]
    if not words or words[0] not in ("{", "("):
        return None
    body = words[1:]
    if body and body[-1] in ("}", ")"):
        body = body[:-1]
    return shlex.join(body)


_TIME_OPTIONS = frozenset({"--format", "--output"})
_SUDO_VALUES = frozenset(
    """
    --user --group --prompt --close-from --chdir --role --type --command-timeout --other-user --host
    --chroot
    """.split()
)
_STRACE_VALUES = frozenset(
    """
    --trace --signal --status --quiet --silent --abbrev --verbose --raw --read --write --fault
    --inject --kvm --output --attach --trace-path --string-limit --summary-sort-by --user --env
    --columns --const-print-style --decode-fds --decode-pids --absolute-timestamps --timestamps
    --seccomp-bpf --argv0 --interruptible --follow-forks
    """.split()
)
_SETPRIV_VALUES = frozenset(
    """
    --groups --inh-caps --ambient-caps --bounding-set --securebits --egid --euid --regid --reuid
    --rgid --ruid --pdeathsig --selinux-label --apparmor-profile --landlock-access --landlock-rule
    """.split()
)
_UNSHARE_VALUES = frozenset(
    """
    --map-user --map-group --map-users --map-groups --propagation --setgroups --root --wd --setuid
    --setgid
    """.split()
)
_NUMACTL_VALUES = frozenset(
    """
    --interleave --preferred --preferred-many --membind --cpunodebind --physcpubind --shmmode
    --shmid --shm --file --offset --length --huge --weighted-interleave
    """.split()
)
_CHRT_VALUES = frozenset({"--sched-runtime", "--sched-period", "--sched-deadline"})
_PRLIMIT_VALUES = frozenset({"--pid", "--output"})
_XVFB_VALUES = frozenset(
    """
    --server-num --server-args --auth-file --error-file --xauth-protocol --wait
    """.split()
)

WRAPPERS: dict[str, WrapperHandler] = {
    "sudo": _after_options("ugpCDhrtTUR", _SUDO_VALUES, no_command="lv"),
    "doas": _after_options("uC"),
    "pkexec": _after_options("", frozenset({"--user"})),
    "run0": _after_options("uDg", frozenset({"--user", "--group", "--chdir"})),
    "runuser": _after_options(
        "ugG",
        frozenset({"--user", "--group", "--supp-group", "--shell", "--whitelist-environment"}),
        no_command="c",
        no_command_long=frozenset({"--command"}),
    ),
    "env": _env_command,
    "nohup": _after_options(),
    "time": _after_options("fo", _TIME_OPTIONS),
    "nice": _after_options("n", frozenset({"--adjustment"})),
    "ionice": _after_options(
        "cnpPu",
        frozenset({"--class", "--classdata"}),
        no_command="pPu",
        no_command_long=frozenset({"--pid", "--pgid", "--uid"}),
    ),
    "timeout": _after_options("sk", frozenset({"--signal", "--kill-after"}), operands=1),
    "command": _command_builtin,
    "exec": _after_options("a"),
    "builtin": _after_options(),
    "stdbuf": _after_options("ioe", frozenset({"--input", "--output", "--error"})),
    "setsid": _after_options(),
    "unbuffer": _after_options(),
    "chronic": _after_options(),
    "busybox": _after_options(),
    "taskset": _after_options(operands=1, no_command="p", no_command_long=frozenset({"--pid"})),
    "chrt": _after_options(
        "TPD",
        _CHRT_VALUES,
        operands=1,
        no_command="pm",
        no_command_long=frozenset({"--pid", "--max"}),
    ),
    "numactl": _after_options(
        "ipmNCMISfoLu",
        _NUMACTL_VALUES,
        no_command="sH",
        no_command_long=frozenset({"--show", "--hardware"}),
    ),
    "flock": _flock_command,
    "setpriv": _after_options(
        "", _SETPRIV_VALUES, no_command="d", no_command_long=frozenset({"--dump"})
    ),
    "prlimit": _after_options(
        "po", _PRLIMIT_VALUES, no_command="p", no_command_long=frozenset({"--pid"})
    ),
    "unshare": _after_options("RwSG", _UNSHARE_VALUES),
    "nsenter": _after_options("tSGW", frozenset({"--target", "--setuid", "--setgid", "--wdns"})),
    "chroot": _after_options("", frozenset({"--groups", "--userspec"}), operands=1),
    "strace": _after_options(
        "eopPsSuEaIXObA", _STRACE_VALUES, no_command="p", no_command_long=frozenset({"--attach"})
    ),
    "ltrace": _after_options(
        "aAeFlLnopsuwxXD", frozenset({"--output", "--library"}), no_command="p"
    ),
    "fakeroot": _after_options("lisb", frozenset({"--lib", "--faked", "--fd-base"})),
    "ssh-agent": _after_options("aEOPt", no_command="kD"),
    "dbus-run-session": _after_options("", frozenset({"--config-file", "--dbus-daemon"})),
    "watch": _after_options("nq", frozenset({"--interval", "--equexit"})),
    "coproc": _coproc_command,
    "xvfb-run": _after_options("nsfepw", _XVFB_VALUES),
}
"""Each program that runs a command from its words, and how to find that command."""

HARMLESS_WRAPPERS = frozenset({"nice", "ionice", "taskset", "timeout", "stdbuf", "nohup", "setsid"})
"""Wrappers that change when or how fast a program runs, not what it may do.

An allow rule for ``ls`` approves ``taskset -c 0 ls``: with these, the rule judges the
wrapped command. (``env`` sets variables such as ``LD_PRELOAD``, ``flock`` creates its
lock file, ``time -o`` writes one, ``chrt`` asks for real-time priority, ``command``
and ``exec`` change how the name is looked up, ``sudo`` who runs it: none of them is
here.)
"""

# `watch` joins its words and hands them to `sh -c` unless told to exec them.
_WATCH_EXEC = frozenset({"-x", "--exec"})


def wrapper_script(program: str, args: tuple[str, ...]) -> str | None:
    """The shell code a program runs from one of its words, or None.

    ``script -c CODE``, ``flock FILE -c CODE``, ``su -c CODE``, ``runuser -c CODE``,
    ``sg GROUP [-c] CODE``, ``watch CODE...`` (joined, as watch does), ``trap CODE
    SIGNAL...``, and ``coproc [NAME] { CODE; }``.

    Args:
        program: The program's name.
        args: Its arguments.

    Returns:
        The code, as bash would be given it.
    """
    if program in ("script", "flock", "su", "runuser"):
        return _dash_c(args)
    if program == "sg":
        rest = [word for word in args[1:] if word != "-c"] if args else []
        if args and args[0] == "-":
            rest = [word for word in args[2:] if word != "-c"]
        return " ".join(rest) or None
    if program == "watch":
        start = skip_options(args, short="nq", long=frozenset({"--interval", "--equexit"}))
        if any(word in _WATCH_EXEC or _short_has(word, "x") for word in args[:start]):
            return None  # exec'd as words: WRAPPERS reads it
        return " ".join(args[start:]) or None
    if program == "trap":
        operands = [word for word in args if word != "--"]
        if operands and operands[0].startswith("-") and operands[0] != "-":
            return None  # `trap -l`, `trap -p`
        if len(operands) >= 2 and operands[0] != "-":
            return operands[0]
        return None
    if program == "coproc":
        return _coproc_compound(args)
    return None


# Stands for code git takes from a variable (`--config-env=core.pager=VAR`): named only
# when it runs, it is matched as a computed program (see bot.permissions.embedded).
GIT_ENVIRONMENT_CODE = '"$(code git takes from a variable, URL or setting)"'
# Configuration keys whose value git runs as a shell command (`-c KEY=VALUE`).
_GIT_COMMAND_KEYS = frozenset(
    """
    core.pager core.sshcommand core.fsmonitor core.editor core.askpass sequence.editor diff.external
    gpg.program gpg.ssh.program pager.log pager.diff pager.show pager.branch pager.status
    interactive.difffilter
    """.split()
)
# Keys by pattern: drivers and filters a `.gitattributes` names, transports, signing.
_GIT_COMMAND_KEY_PATTERN = re.compile(
    r"(diff|merge|filter)\..+\.(textconv|command|driver|clean|smudge|process)"
    r"|remote\..+\.(uploadpack|receivepack|proxy)|gpg(\..+)?\.(program|defaultkeycommand)"
    r"|core\.gitproxy|uploadpack\.packobjectshook|sendemail\..*(cmd|command)"
)
_GIT_ENABLING_KEY_PATTERN = re.compile(r"protocol\..*allow|core\.hookspath")
# Subcommand options whose value git runs as a shell command.
_GIT_COMMAND_OPTIONS = {
    "rebase": ("-x", "--exec"),
    "difftool": ("-x", "--extcmd"),
    "fetch": ("--upload-pack",),
    "pull": ("--upload-pack",),
    "ls-remote": ("--upload-pack", "-u"),
    "clone": ("--upload-pack", "-u"),
    "push": ("--receive-pack", "--exec"),
    "archive": ("--exec",),
    "filter-branch": (
        "--env-filter",
        "--tree-filter",
        "--index-filter",
        "--msg-filter",
        "--commit-filter",
        "--tag-name-filter",
        "--parent-filter",
    ),
}


def git_scripts(args: tuple[str, ...]) -> list[str]:
    """The shell code ``git ARGS`` runs: aliases and programs set with ``-c``, ``rebase
    --exec``, ``difftool -x``, ``filter-branch`` filters, ``submodule foreach``, ``bisect
    run`` (whose words are a command, given here as one line).
    """
    scripts: list[str] = []
    call = split_git(args)
    options = call.globals
    index = 0
    while index < len(options):
        word = options[index]
        value = options[index + 1] if index + 1 < len(options) else None
        index += 2 if word in ("-c", "--config-env") else 1
        if word.startswith("--config-env"):
            setting = word.split("=", 1)[1] if "=" in word else value or ""
            key = setting.split("=", 1)[0].lower()
            if key.startswith("alias.") or key in _GIT_COMMAND_KEYS or "credential" in key:
                scripts.append(GIT_ENVIRONMENT_CODE)
            continue
        if word != "-c":
            value = word[2:] if word.startswith("-c") and len(word) > 2 else None
        if value is None or "=" not in value:
            continue
        key, code = value.split("=", 1)
        key = key.lower()
        if key.startswith("alias.") and code.startswith("!"):
            scripts.append(code[1:])
        elif key in _GIT_COMMAND_KEYS or (key.startswith("credential") and code.startswith("!")):
            scripts.append(code.removeprefix("!"))
        elif _GIT_COMMAND_KEY_PATTERN.fullmatch(key):
            scripts.append(code)
        elif _GIT_ENABLING_KEY_PATTERN.fullmatch(key):
            scripts.append(GIT_ENVIRONMENT_CODE)  # lets ext:: URLs or other programs run
    if not call.subcommand:
        return scripts
    sub, rest = call.subcommand, call.args
    for option in _GIT_COMMAND_OPTIONS.get(sub, ()):
        for position, word in enumerate(rest):
            if word == option and position + 1 < len(rest):
                scripts.append(rest[position + 1])
            elif word.startswith(option + "=") or (
                len(option) == 2 and word.startswith(option) and len(word) > 2
            ):
                scripts.append(word.split("=", 1)[1] if "=" in word else word[2:])
    if any("ext::" in word for word in rest):
        scripts.append(GIT_ENVIRONMENT_CODE)  # `ext::CMD` runs CMD, %-escaped
    operands = [word for word in rest if not word.startswith("-")]
    if sub == "submodule" and "foreach" in rest:
        # git runs the words after `foreach` (and its options) as one shell line.
        after = list(rest[rest.index("foreach") + 1 :])
        while after and after[0] in ("--recursive", "-q", "--quiet"):
            after.pop(0)
        scripts.append(" ".join(after))
    if sub == "bisect" and operands[:1] == ["run"]:
        scripts.append(shlex.join(operands[1:]))
    return [script for script in scripts if script.strip()]


def _dash_c(args: tuple[str, ...]) -> str | None:
    """The value of ``-c CODE``, ``-qc CODE``, ``--command CODE`` or ``--command=CODE``."""
    for index, word in enumerate(args):
        if word == "--":
            return None
        if word.startswith(("--command=", "--session-command=")):
            return word.split("=", 1)[1]
        if word in ("--command", "--session-command") or (
            word.startswith("-") and not word.startswith("--") and word.endswith("c")
        ):
            return args[index + 1] if index + 1 < len(args) else None
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            return word[word.index("c", 1) + 1 :]  # `-cCODE`
    return None


def _short_has(word: str, letter: str) -> bool:
    return word.startswith("-") and not word.startswith("--") and letter in word[1:]
