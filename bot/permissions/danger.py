"""Built-in danger patterns: tool calls that always need a human's approval.

These checks run whatever the configured rules allow. They look at the words a shell
would see (see :mod:`bot.permissions.shell_words`), not at raw substrings, so
``echo "rm -rf /"`` and ``grep -r sudo .`` pass while ``\\rm -fr build`` and
``wget -qO- x | sudo bash`` are caught. The only raw-text check is the fork bomb,
whose shape is not made of meaningful words.

They are a safety net for an agent that means well but errs, not a sandbox against a
determined adversary: a program can always be written to a file and run later.

This module holds the command checks, one per pattern. The table of patterns is
:mod:`bot.permissions.danger_patterns`; the secrets check on paths and words is
:mod:`bot.permissions.secret_paths`; how a command's words are read is
:mod:`bot.permissions.danger_context`; git is :mod:`bot.permissions.git_danger`.

Public API (callers import it from here):

* :func:`find_command_danger` for a ``bash`` command;
* :func:`find_path_danger` for the path argument of a file tool;
* :data:`DANGER_PATTERNS`, the table of patterns, most severe first, with its
  :class:`DangerPattern` and :class:`DangerMatch`.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Callable, Sequence

from bot.permissions.danger_context import (
    CommandContext,
    command_contexts,
    interpreter,
    long_flags,
    normalize_path,
    operand_args,
    pipeline_shown,
    reads_code_from_stdin,
    shell_reads_stdin,
    short_flags,
    show_words,
    subcommand,
    written_paths,
)
from bot.permissions.danger_patterns import (
    DANGER_PATTERNS,
    PATTERN_BY_ID,
    DangerMatch,
    DangerPattern,
    shown_text,
)
from bot.permissions.git_danger import PathExists, git_danger
from bot.permissions.secret_paths import find_path_danger, find_word_danger
from bot.permissions.shell_words import (
    SHELL_PROGRAMS,
    CommandParseError,
    SimpleCommand,
    parse_command,
    unwrap_command,
)

__all__ = [
    "DANGER_PATTERNS",
    "DangerMatch",
    "DangerPattern",
    "find_command_danger",
    "find_path_danger",
]

# `name() { ... name | name & ... }`. The name must start a word and the quantifiers are
# possessive, so that a long run of word characters cannot make the search quadratic.
_FORK_BOMB_RE = re.compile(
    r"(?<![^\s;&|(){}])(?P<name>[^\s;&|(){}<>]{1,64}+)\s*+\(\s*+\)\s*+\{[^}]*?"
    r"(?P=name)\s*+\|\s*+&?\s*+(?P=name)\s*+&"
)

_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "lwp-request"})
_CODE_RUNNERS = frozenset({"eval", "source", "."})
_ROOT_PROGRAMS = frozenset({"sudo", "su", "doas", "pkexec", "run0", "sudoedit"})

_BLOCK_DEVICE_RE = re.compile(
    r"/dev/(?:(?:s|h|v|xv)d[a-z]|nvme\d|mmcblk\d|r?disk\d|disk/|md\d|dm-\d|loop\d|mapper/"
    r"|sr\d|mem$|kmem$|port$)"
)
_FORMAT_PROGRAMS = frozenset(
    """
    mkfs mke2fs mkswap fdisk sfdisk cfdisk gdisk sgdisk cgdisk parted wipefs blkdiscard mkntfs
    mkdosfs newfs
    """.split()
)
# diskutil's verbs that erase or repartition a disk.
_DISKUTIL_ERASERS = ("erase", "partitiondisk", "zerodisk", "randomdisk", "secureerase", "reformat")

# Exactly these are too important to chmod/chown at all; inside the trees, only a
# recursive change is flagged (a single config file is an ordinary edit).
_SYSTEM_ROOTS = frozenset(
    """
    / /bin /boot /dev /etc /home /lib /lib32 /lib64 /libx32 /opt /proc /root /run /sbin /srv /sys
    /usr /var /System /Library /Applications /Users /private
    """.split()
)
_SYSTEM_TREES = tuple(
    """
    /bin/ /boot/ /dev/ /etc/ /lib/ /lib32/ /lib64/ /libx32/ /proc/ /root/ /run/ /sbin/ /sys/ /usr/
    /var/ /System/ /Library/ /private/
    """.split()
)
_HOME_WORDS = frozenset({"~", "$HOME", "${HOME}"})
_SYSTEM_WRITE_TREES = tuple(
    """
    /etc/ /usr/ /bin/ /sbin/ /lib/ /lib32/ /lib64/ /boot/ /System/ /Library/
    """.split()
)

_STARTUP_NAMES = frozenset(
    """
    .bashrc .bash_profile .bash_login .bash_logout .profile .zshrc .zprofile .zshenv .zlogin
    .zlogout .kshrc .cshrc .tcshrc config.fish
    """.split()
)
_STARTUP_PATHS = frozenset(
    """
    /etc/profile /etc/bash.bashrc /etc/bashrc /etc/zshrc /etc/zsh/zshrc /etc/zshenv /etc/zsh/zshenv
    /etc/environment
    """.split()
)

_POWER_PROGRAMS = frozenset({"shutdown", "reboot", "halt", "poweroff"})
_POWER_VERBS = frozenset(
    """
    reboot poweroff halt kexec soft-reboot suspend hibernate hybrid-sleep rescue emergency
    """.split()
)
_FIREWALL_UNITS = frozenset({"firewalld", "ufw", "nftables", "iptables", "ip6tables"})
_ACCOUNT_PROGRAMS = frozenset(
    """
    passwd chpasswd useradd userdel usermod adduser deluser groupadd groupdel groupmod gpasswd
    visudo chsh chfn vipw
    """.split()
)
_PUBLISHERS = {
    "npm": "publish",
    "pnpm": "publish",
    "yarn": "publish",
    "cargo": "publish",
    "poetry": "publish",
    "uv": "publish",
    "flit": "publish",
    "hatch": "publish",
    "pdm": "publish",
    "twine": "upload",
    "gem": "push",
}

_DIRECTORY_CHANGERS = frozenset({"cd", "pushd", "popd"})


def find_command_danger(
    command: str,
    *,
    path_exists: PathExists | None = None,
    contexts: Sequence[CommandContext] | None = None,
) -> DangerMatch | None:
    """Check a ``bash`` command against :data:`DANGER_PATTERNS`.

    Every simple command is checked, including those chained with ``;``/``&&``/``|``
    and those nested in ``$(...)``, ``sh -c``, ``eval``, ``xargs`` or ``find -exec``.

    Args:
        command: The command line the agent wants to run.
        path_exists: Whether a path relative to the workspace root exists; it tells
            ``git checkout BRANCH`` from ``git checkout PATH``. Without it only '.',
            globs and pathspec magic count as paths.
        contexts: The command's simple commands, when the caller has read them
            already (the permission hook has); else they are read here.

    Returns:
        The match of the most severe pattern that applies (the first in the table),
        or None when nothing dangerous was found. A command that cannot be tokenised
        gives an ``unparsable-command`` match, so that it is never waved through.
    """
    if _FORK_BOMB_RE.search(command):
        return PATTERN_BY_ID["fork-bomb"].match(shown_text(command))
    if contexts is None:
        try:
            script = parse_command(command)
        except CommandParseError as exc:
            pattern = PATTERN_BY_ID["unparsable-command"]
            return DangerMatch(
                pattern=pattern.id, reason=f"{pattern.title} ({exc}): {pattern.consequence}"
            )
        contexts = list(command_contexts(script, via=None, parent=None))
    if path_exists is not None:
        if any(context.program in _DIRECTORY_CHANGERS for context in contexts):
            # Paths are no longer relative to the root: any word may name one.
            path_exists = _anything_exists
        contexts = [dataclasses.replace(context, path_exists=path_exists) for context in contexts]
    for pattern in DANGER_PATTERNS:
        check = _CHECKS.get(pattern.id)
        if check is None:
            continue
        for context in contexts:
            if found := check(context):
                return found
    return None


def _anything_exists(path: str) -> bool:
    return True


def _runs_downloader(command: SimpleCommand) -> bool:
    """Whether a command, or anything nested in it, downloads from the network."""
    _, argv = unwrap_command(command.words)
    if argv and argv[0] in _DOWNLOADERS:
        return True
    return any(
        _runs_downloader(inner)
        for nested in command.nested
        for pipeline in nested.script.pipelines
        for inner in pipeline
    )


# --- the checks, one per pattern id ---------------------------------------------------

_Check = Callable[[CommandContext], DangerMatch | None]


def _check_filesystem_format(context: CommandContext) -> DangerMatch | None:
    program, args = context.program, context.args
    formats = (
        program in _FORMAT_PROGRAMS
        or program.startswith(("mkfs.", "newfs_"))
        or (program == "diskutil" and subcommand(args).lower().startswith(_DISKUTIL_ERASERS))
    )
    if not formats:
        return None
    if program in ("fdisk", "sfdisk", "gdisk", "parted") and (
        "l" in short_flags(args) or "--list" in long_flags(args)
    ):
        return None
    return PATTERN_BY_ID["filesystem-format"].match(context.shown)


def _check_disk_write(context: CommandContext) -> DangerMatch | None:
    if context.program == "dd" and any(arg.startswith("of=") for arg in context.args):
        return PATTERN_BY_ID["disk-write"].match(context.shown)
    return None


def _check_device_write(context: CommandContext) -> DangerMatch | None:
    for path in written_paths(context):
        if _BLOCK_DEVICE_RE.match(normalize_path(path)):
            return PATTERN_BY_ID["device-write"].match(show_words(context.command.words))
    return None


def _check_recursive_delete(context: CommandContext) -> DangerMatch | None:
    program, args = context.program, context.args
    pattern = PATTERN_BY_ID["recursive-delete"]
    if program == "rm":
        recursive = (
            "r" in short_flags(args)
            or "R" in short_flags(args)
            or "--recursive" in long_flags(args)
        )
        if recursive or context.via == "exec":  # find -exec rm, xargs rm: bulk deletes
            return pattern.match(context.shown)
    if program == "find" and "-delete" in args:
        return pattern.match(context.shown)
    return None


def _check_download_exec(context: CommandContext) -> DangerMatch | None:
    pattern = PATTERN_BY_ID["download-exec"]
    program = context.program
    # curl ... | sh
    if context.index > 0 and reads_code_from_stdin(context):
        if any(_runs_downloader(stage) for stage in context.pipeline[: context.index]):
            return pattern.match(pipeline_shown(context))
    # A process substitution given to a shell or interpreter is the script it runs:
    # bash <(curl ...), source <(curl ...), python <(curl ...), sh < <(curl ...).
    # A command substitution is code only for a shell or eval: sh -c "$(curl ...)",
    # eval "$(curl ...)", bash <<< "$(curl ...)"; for python it would be an argument.
    runs_process = (
        program in SHELL_PROGRAMS or program in _CODE_RUNNERS or interpreter(program) is not None
    )
    runs_substitution = program in SHELL_PROGRAMS or program == "eval"
    for nested in context.command.nested:
        if (nested.kind == "process" and runs_process) or (
            nested.kind == "substitution" and runs_substitution
        ):
            if any(_runs_downloader(inner) for pipe in nested.script.pipelines for inner in pipe):
                return pattern.match(context.shown)
    # "$(curl ...)" run as a command in its own right, e.g. inside sh -c or eval
    if program and ("$(" in program or "`" in program) and _runs_downloader(context.command):
        return pattern.match(context.shown)
    return None


def _check_system_permissions(context: CommandContext) -> DangerMatch | None:
    program = context.program
    if program not in ("chmod", "chown", "chgrp"):
        return None
    recursive, operands = _permission_operands(context)
    for target in operands[1:]:
        path = normalize_path(target)
        if (
            path in _SYSTEM_ROOTS
            or re.match(r"/+\*", path)
            or (recursive and (path in _HOME_WORDS or path.startswith(_SYSTEM_TREES)))
        ):
            return PATTERN_BY_ID["system-permissions"].match(context.shown)
    return None


def _permission_operands(context: CommandContext) -> tuple[bool, list[str]]:
    """Whether chmod/chown/chgrp is recursive, and its operands (mode or owner first)."""
    recursive = False
    operands: list[str] = []
    args = context.args
    for index, arg in enumerate(args):
        if arg == "--":
            operands.extend(args[index + 1 :])
            break
        if arg.startswith("--"):
            recursive = recursive or arg == "--recursive"
            if arg.startswith("--reference"):
                operands.append("")  # stands for the mode/owner it replaces
        elif context.program == "chmod" and _SYMBOLIC_MODE_RE.fullmatch(arg):
            operands.append(arg)  # `chmod -w file`: a mode, not an option
        elif arg.startswith("-") and len(arg) > 1:
            recursive = recursive or "R" in arg
        else:
            operands.append(arg)
    return recursive, operands


_SYMBOLIC_MODE_RE = re.compile(r"[ugoa]*(?:[-+=][rwxXstugo]*)+(?:,[ugoa]*(?:[-+=][rwxXstugo]*)+)*")


def _world_writable(mode: str) -> bool:
    if re.fullmatch(r"[0-7]{1,4}", mode):
        return bool(int(mode[-1]) & 2)
    for clause in mode.split(","):
        match = re.fullmatch(r"([ugoa]*)((?:[-+=][rwxXstugo]*)+)", clause)
        if match is None:
            continue
        who = match.group(1)
        for operator, permissions in re.findall(r"([-+=])([rwxXstugo]*)", match.group(2)):
            if operator in "+=" and "w" in permissions and ("o" in who or "a" in who):
                return True
    return False


def _check_world_writable(context: CommandContext) -> DangerMatch | None:
    if context.program != "chmod":
        return None
    _, operands = _permission_operands(context)
    if operands and _world_writable(operands[0]):
        return PATTERN_BY_ID["world-writable"].match(context.shown)
    return None


def _check_privilege_escalation(context: CommandContext) -> DangerMatch | None:
    if _ROOT_PROGRAMS & {*context.wrappers, context.program}:
        return PATTERN_BY_ID["privilege-escalation"].match(context.shown)
    return None


def _check_secret_path(context: CommandContext) -> DangerMatch | None:
    for word in context.command.words:
        if found := find_word_danger(word):
            return found
    return None


def _check_git(pattern_id: str) -> _Check:
    def check(context: CommandContext) -> DangerMatch | None:
        if context.program != "git":
            return None
        found = git_danger(context.args, context.path_exists)
        if found is not None and found.pattern == pattern_id:
            return PATTERN_BY_ID[pattern_id].match(context.shown, title=found.title)
        return None

    return check


def _check_system_power(context: CommandContext) -> DangerMatch | None:
    program, args = context.program, context.args
    powers = (
        program in _POWER_PROGRAMS
        or (program in ("init", "telinit") and subcommand(args) in ("0", "6"))
        or (program in ("systemctl", "loginctl") and subcommand(args) in _POWER_VERBS)
    )
    return PATTERN_BY_ID["system-power"].match(context.shown) if powers else None


def _check_mass_kill(context: CommandContext) -> DangerMatch | None:
    program = context.program
    if program in ("killall", "pkill", "killall5"):
        return PATTERN_BY_ID["mass-kill"].match(context.shown)
    if program != "kill":
        return None
    targets: list[str] = []
    signal_given = False
    args = context.args
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            targets.extend(args[index:])
            break
        if arg in ("-l", "-L", "--list", "--table"):
            return None
        if arg in ("-s", "-n", "--signal"):
            index += 1
            signal_given = True
        elif arg.startswith("-") and not signal_given and not targets:
            signal_given = True  # -9, -KILL, -SIGTERM, and -1 when it comes first
        else:
            targets.append(arg)
    if "-1" in targets or "1" in targets:
        return PATTERN_BY_ID["mass-kill"].match(context.shown)
    return None


def _check_firewall_change(context: CommandContext) -> DangerMatch | None:
    program, args = context.program, context.args
    changes = False
    if program.startswith(("iptables", "ip6tables")):
        changes = any(
            arg in ("-F", "--flush", "-X", "--delete-chain", "-P", "--policy") for arg in args
        )
    elif program == "nft":
        changes = any(arg in ("flush", "delete") for arg in args)
    elif program == "ufw":
        changes = subcommand(args) in ("disable", "reset")
    elif program == "systemctl":
        operands = operand_args(args)
        changes = (
            bool(operands)
            and operands[0] in ("stop", "disable", "mask")
            and any(unit.removesuffix(".service") in _FIREWALL_UNITS for unit in operands[1:])
        )
    elif program == "setenforce":
        changes = subcommand(args).lower() in ("0", "permissive")
    elif program == "pfctl":
        changes = "d" in short_flags(args)
    return PATTERN_BY_ID["firewall-change"].match(context.shown) if changes else None


def _crontab_options(args: Sequence[str]) -> tuple[str, list[str]]:
    """The option letters of ``crontab ARGS`` and its operands (``-u USER`` skipped)."""
    letters = ""
    operands: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg.startswith("-") and len(arg) > 1:
            letters += arg[1:]
            if arg.endswith("u"):
                index += 1
        else:
            operands.append(arg)
    return letters, operands


def _check_crontab_remove(context: CommandContext) -> DangerMatch | None:
    if context.program == "crontab" and "r" in _crontab_options(context.args)[0]:
        return PATTERN_BY_ID["crontab-remove"].match(context.shown)
    return None


def _check_crontab_install(context: CommandContext) -> DangerMatch | None:
    if context.program != "crontab":
        return None
    letters, operands = _crontab_options(context.args)
    if operands and not set(letters) & set("lre"):
        return PATTERN_BY_ID["crontab-install"].match(context.shown)
    return None


def _check_shell_startup_file(context: CommandContext) -> DangerMatch | None:
    for path in written_paths(context):
        normalized = normalize_path(path)
        name = posixpath.basename(normalized)
        if (
            name in _STARTUP_NAMES
            or normalized in _STARTUP_PATHS
            or normalized.startswith("/etc/profile.d/")
        ):
            return PATTERN_BY_ID["shell-startup-file"].match(show_words(context.command.words))
    return None


def _check_system_file_write(context: CommandContext) -> DangerMatch | None:
    for path in written_paths(context):
        if normalize_path(path).startswith(_SYSTEM_WRITE_TREES):
            return PATTERN_BY_ID["system-file-write"].match(show_words(context.command.words))
    return None


def _check_account_change(context: CommandContext) -> DangerMatch | None:
    if context.program in _ACCOUNT_PROGRAMS:
        return PATTERN_BY_ID["account-change"].match(context.shown)
    return None


def _check_environment_dump(context: CommandContext) -> DangerMatch | None:
    program, args = context.program, context.args
    dumps = (
        program == "printenv"
        # `env` is left as the program only when it has no command to run.
        or program == "env"
        or (
            program in ("export", "declare", "typeset")
            and all(arg.startswith("-") and set(arg[1:]) <= set("px") for arg in args)
        )
        or (program == "set" and not args)
    )
    return PATTERN_BY_ID["environment-dump"].match(context.shown) if dumps else None


def _check_history_clear(context: CommandContext) -> DangerMatch | None:
    program, args = context.program, context.args
    if (program == "history" and "c" in short_flags(args)) or (
        program == "unset" and "HISTFILE" in args
    ):
        return PATTERN_BY_ID["history-clear"].match(context.shown)
    return None


def _check_pipe_to_shell(context: CommandContext) -> DangerMatch | None:
    if context.index > 0 and context.program in SHELL_PROGRAMS and shell_reads_stdin(context.args):
        return PATTERN_BY_ID["pipe-to-shell"].match(pipeline_shown(context))
    return None


def _check_package_publish(context: CommandContext) -> DangerMatch | None:
    program, args = context.program, context.args
    operands = operand_args(args)
    publishes = (
        (program in _PUBLISHERS and operands[:1] == [_PUBLISHERS[program]])
        or (program == "yarn" and operands[:2] == ["npm", "publish"])
        or (interpreter(program) == "python" and _python_module(args) == ("twine", "upload"))
    )
    return PATTERN_BY_ID["package-publish"].match(context.shown) if publishes else None


def _python_module(args: Sequence[str]) -> tuple[str, str]:
    """For ``python -m MODULE ARG ...``: the module and its first argument."""
    for index, arg in enumerate(args):
        if arg == "-m" and index + 1 < len(args):
            rest = args[index + 2 :]
            return args[index + 1], rest[0] if rest else ""
    return "", ""


_CHECKS: dict[str, _Check] = {
    "filesystem-format": _check_filesystem_format,
    "disk-write": _check_disk_write,
    "device-write": _check_device_write,
    "recursive-delete": _check_recursive_delete,
    "download-exec": _check_download_exec,
    "system-permissions": _check_system_permissions,
    "world-writable": _check_world_writable,
    "privilege-escalation": _check_privilege_escalation,
    "secret-path": _check_secret_path,
    "git-force-push": _check_git("git-force-push"),
    "git-push-delete": _check_git("git-push-delete"),
    "git-reset-hard": _check_git("git-reset-hard"),
    "git-clean": _check_git("git-clean"),
    "git-rm-recursive": _check_git("git-rm-recursive"),
    "git-discard": _check_git("git-discard"),
    "git-stash-drop": _check_git("git-stash-drop"),
    "git-ref-delete": _check_git("git-ref-delete"),
    "git-prune": _check_git("git-prune"),
    "git-daemon": _check_git("git-daemon"),
    "system-power": _check_system_power,
    "mass-kill": _check_mass_kill,
    "firewall-change": _check_firewall_change,
    "crontab-remove": _check_crontab_remove,
    "crontab-install": _check_crontab_install,
    "shell-startup-file": _check_shell_startup_file,
    "system-file-write": _check_system_file_write,
    "account-change": _check_account_change,
    "environment-dump": _check_environment_dump,
    "history-clear": _check_history_clear,
    "pipe-to-shell": _check_pipe_to_shell,
    "package-publish": _check_package_publish,
}
