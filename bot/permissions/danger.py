"""Built-in danger patterns: tool calls that always need a human's approval.

These checks run whatever the configured rules allow. They look at the words a shell
would see (see :mod:`bot.permissions.shell_words`), not at raw substrings, so
``echo "rm -rf /"`` and ``grep -r sudo .`` pass while ``\\rm -fr build`` and
``wget -qO- x | sudo bash`` are caught. The only raw-text check is the fork bomb,
whose shape is not made of meaningful words.

They are a safety net for an agent that means well but errs, not a sandbox against a
determined adversary: a program can always be written to a file and run later.

Public API:

* :func:`find_command_danger` for a ``bash`` command;
* :func:`find_path_danger` for the path argument of a file tool;
* :data:`DANGER_PATTERNS`, the table of patterns, most severe first.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from bot.permissions.git_danger import PathExists, git_danger
from bot.permissions.globs import expand_braces, glob_spellings
from bot.permissions.shell_words import (
    SHELL_PROGRAMS,
    CommandParseError,
    NestedKind,
    Script,
    SimpleCommand,
    command_words,
    parse_command,
    redirections,
    unwrap_command,
)

__all__ = ["DANGER_PATTERNS", "DangerMatch", "DangerPattern", "find_command_danger",
           "find_path_danger"]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class DangerMatch:
    """Why a tool call needs a human.

    Attributes:
        pattern: Short id of the pattern that matched, e.g. ``"recursive-delete"``.
        reason: A sentence for the approver naming what matched, e.g. ``"Recursive
            delete (rm -rf build): can destroy many files at once."``
    """

    pattern: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DangerPattern:
    """One built-in danger pattern.

    Attributes:
        id: Short stable id, reported as :attr:`DangerMatch.pattern`.
        title: What kind of action it is, e.g. ``"Recursive delete"``.
        consequence: Why that needs a human, e.g. ``"can destroy many files at once."``
        matches: What triggers it, for documentation.
    """

    id: str
    title: str
    consequence: str
    matches: str

    @property
    def reason(self) -> str:
        """The generic reason, without the matched text."""
        return f"{self.title}: {self.consequence}"

    def match(self, shown: str, *, title: str | None = None) -> DangerMatch:
        """A match naming what was found.

        Args:
            shown: The matched command or path, as shown to the approver.
            title: Replaces the pattern's title when a more precise one is known.

        Returns:
            The match, e.g. ``Recursive delete (rm -rf x): can destroy ...``.
        """
        return DangerMatch(
            pattern=self.id, reason=f"{title or self.title} ({shown}): {self.consequence}"
        )


DANGER_PATTERNS: tuple[DangerPattern, ...] = (
    DangerPattern(
        id="fork-bomb",
        title="Fork bomb",
        consequence="it spawns processes until the machine stops responding.",
        matches="A function that pipes into itself in the background, e.g. `:(){ :|:& };:` "
        "(matched on the raw text).",
    ),
    DangerPattern(
        id="unparsable-command",
        title="Command that cannot be parsed",
        consequence="it cannot be checked automatically, so a human should read it first.",
        matches="Unbalanced quotes or parentheses, nesting deeper than the checker follows.",
    ),
    DangerPattern(
        id="filesystem-format",
        title="Disk formatting or partitioning",
        consequence="it can erase whole disks or partitions.",
        matches="mkfs, mkfs.*, mke2fs, mkswap, fdisk, sfdisk, gdisk, parted, wipefs, "
        "blkdiscard, diskutil erase* (listing with -l is fine).",
    ),
    DangerPattern(
        id="disk-write",
        title="Raw write with dd",
        consequence="dd overwrites its output byte by byte, with no undo.",
        matches="dd with an of= operand.",
    ),
    DangerPattern(
        id="device-write",
        title="Write to a block device",
        consequence="writing to a disk device corrupts its file systems.",
        matches="Redirections, tee, cp/mv to /dev/sd*, /dev/nvme*, /dev/disk*, /dev/mapper/*"
        "... (/dev/null, /dev/stdout, /dev/stderr and /dev/tty are fine).",
    ),
    DangerPattern(
        id="recursive-delete",
        title="Recursive delete",
        consequence="it can destroy many files at once.",
        matches="rm -r/-R/--recursive (with or without -f), find -delete, find -exec rm, xargs rm.",
    ),
    DangerPattern(
        id="download-exec",
        title="Downloaded code executed",
        consequence="it runs code fetched from the network without anyone reviewing it.",
        matches="curl/wget/... piped into a shell or python/perl/ruby/node reading stdin; "
        'bash <(curl ...); sh -c "$(curl ...)"; eval "$(wget -O- ...)"; '
        "source <(curl ...).",
    ),
    DangerPattern(
        id="system-permissions",
        title="Ownership or permission change on system paths",
        consequence="it can break the operating system or open it to other users.",
        matches="chmod/chown/chgrp on /, on a top-level system directory, or recursively "
        "inside /etc, /usr, /var, ... or on the home directory.",
    ),
    DangerPattern(
        id="world-writable",
        title="World-writable permissions",
        consequence="any user or process on the machine could then modify these files.",
        matches="chmod 777 / 666 / o+w / a+w, with or without -R.",
    ),
    DangerPattern(
        id="privilege-escalation",
        title="Runs as root",
        consequence="sudo, su and doas bypass the limits the workspace normally has.",
        matches="sudo, su, doas, pkexec, run0 anywhere in the command.",
    ),
    DangerPattern(
        id="secret-path",
        title="Secrets file",
        consequence="reading or changing it could leak or damage credentials.",
        matches="Any word or redirection naming ~/.ssh, ~/.aws, ~/.gnupg, ~/.kube, "
        ".env files, .netrc, private keys, /etc/shadow, /etc/sudoers... "
        "(see find_path_danger).",
    ),
    DangerPattern(
        id="git-force-push",
        title="Git force push",
        consequence="it can overwrite commits on the remote that others depend on.",
        matches="git push -f/--force/--force-with-lease/--mirror (or any abbreviation, "
        "--force-w), a +refspec, or git -c ... push (configuration can make it a mirror).",
    ),
    DangerPattern(
        id="git-push-delete",
        title="Git remote branch deletion",
        consequence="it deletes branches or tags on the remote.",
        matches="git push -d/--delete/--prune (or an abbreviation, --del), or a :refspec.",
    ),
    DangerPattern(
        id="git-reset-hard",
        title="git reset --hard",
        consequence="it throws away uncommitted changes for good.",
        matches="git reset --hard, --merge or --keep (or an abbreviation, --har).",
    ),
    DangerPattern(
        id="git-clean",
        title="git clean",
        consequence="it deletes untracked files for good.",
        matches="git clean, unless its last -n/--dry-run/--no-dry-run leaves a dry run on "
        "(options read as git reads them: -dxn, -en is --exclude=n, --no-dry, --forc).",
    ),
    DangerPattern(
        id="git-rm-recursive",
        title="Recursive git rm",
        consequence="it deletes whole directories from the work tree and the index.",
        matches="git rm -r (in any option cluster, e.g. -rfq), unless --cached or a dry run.",
    ),
    DangerPattern(
        id="git-discard",
        title="Discarding uncommitted changes",
        consequence="uncommitted work in the files it touches is lost for good.",
        matches="git checkout with paths (after --, an existing path, '.', a glob, pathspec "
        "magic such as ':^x'), -f, -p, --ours/--theirs; git restore (not --staged alone); "
        "git switch -f/--discard-changes/--orphan; git rm -f; git mv -f; git update-index "
        "--force-remove; git checkout-index -f; git read-tree -u; git worktree remove -f; "
        "git merge --abort.",
    ),
    DangerPattern(
        id="git-stash-drop",
        title="Dropping git stashes",
        consequence="the stashed changes are deleted; only git fsck can still dig them up.",
        matches="git stash drop, git stash clear.",
    ),
    DangerPattern(
        id="git-ref-delete",
        title="Deleting or moving git refs",
        consequence="commits only that branch, tag or ref reached can be lost for good once "
        "git prunes them.",
        matches="git branch -D/-d -f/-f/-M/-C, git checkout -B, git switch -C, git tag -d/-f, "
        "git update-ref, git symbolic-ref NAME REF or -d, git replace, git notes "
        "remove/prune/merge/-f.",
    ),
    DangerPattern(
        id="git-prune",
        title="Pruning git history",
        consequence="unreachable commits and reflog entries are deleted for good, so earlier "
        "mistakes can no longer be undone.",
        matches="git reflog expire/delete, git gc --prune, git prune, git repack -d, "
        "git filter-repo, git filter-branch.",
    ),
    DangerPattern(
        id="git-daemon",
        title="Git server",
        consequence="it serves repositories to the network and can keep running.",
        matches="git daemon, git instaweb.",
    ),
    DangerPattern(
        id="system-power",
        title="Shutdown or reboot",
        consequence="it takes the machine down for everyone using it.",
        matches="shutdown, reboot, halt, poweroff, init 0/6, systemctl reboot/poweroff/...",
    ),
    DangerPattern(
        id="mass-kill",
        title="Mass process kill",
        consequence="it can kill unrelated processes, including the bot itself.",
        matches="kill -9 -1 (every process), kill 1, killall, pkill.",
    ),
    DangerPattern(
        id="firewall-change",
        title="Firewall or security policy change",
        consequence="it can expose the machine to the network.",
        matches="iptables -F/-X/-P, nft flush/delete, ufw disable/reset, stopping firewalld, "
        "setenforce 0.",
    ),
    DangerPattern(
        id="crontab-remove",
        title="crontab -r",
        consequence="it deletes all of the user's scheduled jobs without confirmation.",
        matches="crontab -r.",
    ),
    DangerPattern(
        id="crontab-install",
        title="Scheduled job installation",
        consequence="it installs jobs that keep running after this session ends.",
        matches="crontab FILE or crontab - (replaces the whole crontab).",
    ),
    DangerPattern(
        id="shell-startup-file",
        title="Shell start-up file change",
        consequence="code added there runs in every future shell.",
        matches="Writing ~/.bashrc, ~/.zshrc, ~/.profile, /etc/profile... by redirection, "
        "tee, sed -i, cp or mv.",
    ),
    DangerPattern(
        id="system-file-write",
        title="Write to system files",
        consequence="it changes operating-system files outside the workspace.",
        matches="Writing under /etc, /usr, /bin, /sbin, /lib, /boot by redirection, tee, "
        "sed -i, cp or mv.",
    ),
    DangerPattern(
        id="account-change",
        title="User account change",
        consequence="it changes system users, groups, passwords or sudo rights.",
        matches="passwd, chpasswd, useradd, usermod, userdel, adduser, deluser, groupadd, "
        "groupdel, groupmod, gpasswd, visudo, chsh.",
    ),
    DangerPattern(
        id="environment-dump",
        title="Environment dump",
        consequence="environment variables often hold API keys and tokens.",
        matches="printenv, env with no command, bare export/set/declare.",
    ),
    DangerPattern(
        id="history-clear",
        title="Shell history cleared",
        consequence="it hides what was run on this machine.",
        matches="history -c, unset HISTFILE.",
    ),
    DangerPattern(
        id="pipe-to-shell",
        title="Text piped into a shell",
        consequence="the shell executes whatever the earlier command produces.",
        matches="... | sh, ... | bash (when the shell reads its commands from the pipe).",
    ),
    DangerPattern(
        id="package-publish",
        title="Package publication",
        consequence="it publishes a release to a public registry, which usually cannot be undone.",
        matches="npm/pnpm/yarn publish, twine upload, cargo publish, gem push, "
        "poetry/uv/flit/hatch/pdm publish.",
    ),
)

_PATTERNS = {pattern.id: pattern for pattern in DANGER_PATTERNS}

# `name() { ... name | name & ... }`. The name must start a word and the quantifiers are
# possessive, so that a long run of word characters cannot make the search quadratic.
_FORK_BOMB_RE = re.compile(
    r"(?<![^\s;&|(){}])(?P<name>[^\s;&|(){}<>]{1,64}+)\s*+\(\s*+\)\s*+\{[^}]*?"
    r"(?P=name)\s*+\|\s*+&?\s*+(?P=name)\s*+&"
)

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
_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https", "xh",
                          "lwp-request"})  # fmt: skip
_CODE_RUNNERS = frozenset({"eval", "source", "."})
_ROOT_PROGRAMS = frozenset({"sudo", "su", "doas", "pkexec", "run0", "sudoedit"})

_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "<>", "&>", "&>>", ">&"})
_COPY_PROGRAMS = frozenset({"cp", "mv", "install", "ln", "rsync"})
_BLOCK_DEVICE_RE = re.compile(
    r"/dev/(?:(?:s|h|v|xv)d[a-z]|nvme\d|mmcblk\d|r?disk\d|disk/|md\d|dm-\d|loop\d|mapper/"
    r"|sr\d|mem$|kmem$|port$)"
)
_FORMAT_PROGRAMS = frozenset(
    {"mkfs", "mke2fs", "mkswap", "fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "cgdisk",
     "parted", "wipefs", "blkdiscard", "mkntfs", "mkdosfs", "newfs"}
)  # fmt: skip

# Exactly these are too important to chmod/chown at all; inside the trees, only a
# recursive change is flagged (a single config file is an ordinary edit).
_SYSTEM_ROOTS = frozenset(
    {"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
     "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/System",
     "/Library", "/Applications", "/Users", "/private"}
)  # fmt: skip
_SYSTEM_TREES = (
    "/bin/", "/boot/", "/dev/", "/etc/", "/lib/", "/lib32/", "/lib64/", "/libx32/", "/proc/",
    "/root/", "/run/", "/sbin/", "/sys/", "/usr/", "/var/", "/System/", "/Library/",
    "/private/",
)  # fmt: skip
_HOME_WORDS = frozenset({"~", "$HOME", "${HOME}"})
_SYSTEM_WRITE_TREES = ("/etc/", "/usr/", "/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/",
                       "/boot/", "/System/", "/Library/")  # fmt: skip

_STARTUP_NAMES = frozenset(
    {".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
     ".zprofile", ".zshenv", ".zlogin", ".zlogout", ".kshrc", ".cshrc", ".tcshrc",
     "config.fish"}
)  # fmt: skip
_STARTUP_PATHS = frozenset(
    {"/etc/profile", "/etc/bash.bashrc", "/etc/bashrc", "/etc/zshrc", "/etc/zsh/zshrc",
     "/etc/zshenv", "/etc/zsh/zshenv", "/etc/environment"}
)  # fmt: skip

_POWER_PROGRAMS = frozenset({"shutdown", "reboot", "halt", "poweroff"})
_POWER_VERBS = frozenset(
    {"reboot", "poweroff", "halt", "kexec", "soft-reboot", "suspend", "hibernate",
     "hybrid-sleep", "rescue", "emergency"}
)  # fmt: skip
_FIREWALL_UNITS = frozenset({"firewalld", "ufw", "nftables", "iptables", "ip6tables"})
_ACCOUNT_PROGRAMS = frozenset(
    {"passwd", "chpasswd", "useradd", "userdel", "usermod", "adduser", "deluser", "groupadd",
     "groupdel", "groupmod", "gpasswd", "visudo", "chsh", "chfn", "vipw"}
)  # fmt: skip
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
_SHOWN_LIMIT = 120
_PLAIN_WORD_RE = re.compile(r"[\w@%+=:,./~^{}-]+")
_OPERATOR_WORD_RE = re.compile(r"\d*[<>&|]+")


# --------------------------------------------------------------------------------------
# Paths

_SECRET_DIRS = {
    ".ssh": "SSH keys and configuration",
    ".aws": "AWS credentials",
    ".gnupg": "GnuPG private keys",
    ".kube": "Kubernetes credentials",
    ".azure": "Azure credentials",
    ".password-store": "Password store",
}
_SECRET_FILES = {
    ".netrc": "Login credentials",
    "_netrc": "Login credentials",
    ".pgpass": "PostgreSQL passwords",
    ".git-credentials": "Git credentials",
    ".npmrc": "npm configuration, which often holds auth tokens",
    ".pypirc": "PyPI configuration, which often holds upload tokens",
    ".vault-token": "Vault token",
    ".my.cnf": "MySQL credentials",
    ".s3cfg": "S3 credentials",
    ".boto": "Cloud credentials",
    ".dockercfg": "Docker registry credentials",
}
_HISTORY_FILES = frozenset(
    {".bash_history", ".zsh_history", ".sh_history", ".history", ".python_history",
     ".psql_history", ".mysql_history", ".node_repl_history", ".sqlite_history",
     ".rediscli_history"}
)  # fmt: skip
_PRIVATE_KEY_NAMES = frozenset(
    {"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk"}
)
_PRIVATE_KEY_SUFFIXES = (".key", ".p12", ".pfx", ".jks", ".keystore", ".ppk")
_SYSTEM_SECRETS = {
    ("etc", "shadow"): "System password hashes",
    ("etc", "gshadow"): "System group password hashes",
    ("etc", "master.passwd"): "System password hashes",
    ("etc", "sudoers"): "sudo configuration",
}
# `.env.example` and friends are committed templates without real values.
_ENV_TEMPLATE_SUFFIXES = frozenset({"example", "sample", "template", "dist", "tpl", "tmpl"})
_GLOB_CHARS = frozenset("*?[")


_SECRET_NAMES = frozenset(
    {*_SECRET_DIRS, *_SECRET_FILES, *_HISTORY_FILES, *_PRIVATE_KEY_NAMES, ".env", ".envrc",
     "environ", "shadow", "gshadow", "sudoers", "sudoers.d", "master.passwd", "gcloud",
     "config.json", "hosts.yml", "proc", "etc", ".config", ".docker", "gh",
     *(f"x{suffix}" for suffix in _PRIVATE_KEY_SUFFIXES)}
)  # fmt: skip
"""Names a glob in a shell word is tried against (see :func:`glob_spellings`)."""


def find_path_danger(path: str) -> DangerMatch | None:
    """Check a file tool's path argument (or any shell word) for secrets.

    Matched, by path component so ``/home/me/.ssh/id_rsa``, ``~/.aws``, ``$HOME/.kube/config``
    and ``../.env`` all count:

    * secrets directories: ``.ssh``, ``.aws``, ``.gnupg``, ``.kube``, ``.azure``,
      ``.password-store``, ``.config/gcloud``; ``.docker/config.json``,
      ``.config/gh/hosts.yml``;
    * credential files: ``.netrc``, ``.pgpass``, ``.git-credentials``, ``.npmrc``,
      ``.pypirc``, ``.vault-token``, ``.my.cnf``, ``.s3cfg``, ``.boto``;
    * environment files: ``.env``, ``.env.local``, ``.env.production``, ``prod.env``,
      and ``.envrc`` (direnv files usually export secrets, and direnv runs them) -- but
      not templates such as ``.env.example``, ``.env.sample``, ``.env.template``,
      ``.env.dist``; a glob like ``.env*`` counts;
    * private keys: ``id_rsa``, ``id_ed25519`` ... (not ``.pub``), ``ssh_host_*_key``,
      ``*.key``, ``*.p12``, ``*.pfx``, ``*.jks``, ``*.keystore``, ``*.ppk``, and
      ``*.pem`` files whose name says key (``privkey.pem``, ``server-key.pem``), since
      most ``.pem`` files are public certificates;
    * shell and REPL histories (``.bash_history`` ...), which often hold pasted secrets;
    * ``/etc/shadow``, ``/etc/gshadow``, ``/etc/sudoers``, ``/etc/sudoers.d/*`` and a
      process environment (``/proc/<pid>/environ``).

    Args:
        path: The path as written; it is not resolved against the file system.

    Returns:
        A ``secret-path`` match naming the kind of secret, or None.
    """
    category = _secret_category(path)
    if category is None:
        return None
    return _PATTERNS["secret-path"].match(_shown(path), title=category)


def _secret_category(path: str) -> str | None:
    parts = [part.lower() for part in path.replace("\\", "/").split("/") if part not in ("", ".")]
    if not parts:
        return None
    for index, part in enumerate(parts):
        if part in _SECRET_DIRS:
            return _SECRET_DIRS[part]
        following = parts[index + 1 : index + 2]
        if part == ".config" and following == ["gcloud"]:
            return "Google Cloud credentials"
        if part == ".docker" and following == ["config.json"]:
            return "Docker registry credentials"
        if part == ".config" and parts[index + 1 : index + 3] == ["gh", "hosts.yml"]:
            return "GitHub CLI token"
    name = parts[-1]
    if name in _SECRET_FILES:
        return _SECRET_FILES[name]
    if name in _HISTORY_FILES:
        return "Shell history, which often holds pasted secrets"
    if _is_env_file(name):
        return "Environment file with secrets"
    if _is_private_key(name):
        return "Private key"
    if tuple(parts[-2:]) in _SYSTEM_SECRETS:
        return _SYSTEM_SECRETS[(parts[-2], parts[-1])]
    if len(parts) >= 3 and parts[-3:-1] == ["etc", "sudoers.d"]:
        return "sudo configuration"
    if name == "environ" and "proc" in parts[:-1]:
        return "Process environment, which often holds API keys"
    return None


def _is_env_file(name: str) -> bool:
    if name in (".env", ".envrc"):
        return True
    if name.startswith((".env.", ".env-", ".env_")) or (
        name.endswith(".env") and len(name) > len(".env")
    ):
        stem = name.removesuffix(".env")
        return re.split(r"[._-]", stem)[-1] not in _ENV_TEMPLATE_SUFFIXES
    return name.startswith(".env") and any(char in _GLOB_CHARS for char in name)


def _is_private_key(name: str) -> bool:
    if name in _PRIVATE_KEY_NAMES:
        return True
    if name.startswith("ssh_host_") and name.endswith("_key"):
        return True
    if name.endswith(_PRIVATE_KEY_SUFFIXES):
        return True
    return name.endswith(".pem") and ("key" in name or "priv" in name)


# --------------------------------------------------------------------------------------
# Commands


@dataclass(frozen=True, slots=True, kw_only=True)
class _Context:
    """One simple command with what the checks need to know about its surroundings."""

    command: SimpleCommand
    words: tuple[str, ...]  # without redirections
    wrappers: tuple[str, ...]
    argv: tuple[str, ...]  # the effective command: program first
    pipeline: tuple[SimpleCommand, ...]
    index: int  # position in the pipeline
    via: NestedKind | None  # how it was reached, None at the top level
    parent: _Context | None
    path_exists: PathExists | None = None  # whether a workspace path exists

    @property
    def program(self) -> str:
        return self.argv[0] if self.argv else ""

    @property
    def args(self) -> tuple[str, ...]:
        return self.argv[1:]

    @property
    def shown(self) -> str:
        """The command as shown to the approver; `find`/`xargs` show the whole thing."""
        if self.via == "exec" and self.parent is not None:
            return self.parent.shown
        return _show_words(self.words or self.command.words)


def find_command_danger(
    command: str, *, path_exists: PathExists | None = None
) -> DangerMatch | None:
    """Check a ``bash`` command against :data:`DANGER_PATTERNS`.

    Every simple command is checked, including those chained with ``;``/``&&``/``|``
    and those nested in ``$(...)``, ``sh -c``, ``eval``, ``xargs`` or ``find -exec``.

    Args:
        command: The command line the agent wants to run.
        path_exists: Whether a path relative to the workspace root exists; it tells
            ``git checkout BRANCH`` from ``git checkout PATH``. Without it only '.',
            globs and pathspec magic count as paths.

    Returns:
        The match of the most severe pattern that applies (the first in the table),
        or None when nothing dangerous was found. A command that cannot be tokenised
        gives an ``unparsable-command`` match, so that it is never waved through.
    """
    if _FORK_BOMB_RE.search(command):
        return _PATTERNS["fork-bomb"].match(_shown(command))
    try:
        script = parse_command(command)
    except CommandParseError as exc:
        pattern = _PATTERNS["unparsable-command"]
        return DangerMatch(pattern=pattern.id, reason=f"{pattern.title} ({exc}): "
                           f"{pattern.consequence}")  # fmt: skip
    contexts = list(_contexts(script, via=None, parent=None))
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


def _contexts(
    script: Script, *, via: NestedKind | None, parent: _Context | None
) -> Iterator[_Context]:
    for pipeline in script.pipelines:
        for index, command in enumerate(pipeline):
            words = command_words(command.words)
            wrappers, argv = unwrap_command(words)
            context = _Context(
                command=command,
                words=words,
                wrappers=wrappers,
                argv=argv,
                pipeline=pipeline,
                index=index,
                via=via,
                parent=parent,
            )
            yield context
            for nested in command.nested:
                yield from _contexts(nested.script, via=nested.kind, parent=context)


# --- helpers shared by the checks ------------------------------------------------------


def _anything_exists(path: str) -> bool:
    return True


def _shown(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > _SHOWN_LIMIT:
        return text[: _SHOWN_LIMIT - 3] + "..."
    return text


def _show_words(words: Sequence[str]) -> str:
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
    return _shown(" ".join(shown))


def _short_flags(args: Sequence[str]) -> str:
    """The letters of all short option clusters before ``--`` (``-rf -v`` gives "rfv")."""
    letters = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            letters.append(arg[1:])
    return "".join(letters)


def _long_flags(args: Sequence[str]) -> set[str]:
    """The long options before ``--``, without their ``=value``."""
    found = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--") and len(arg) > 2:
            found.add(arg.split("=", 1)[0])
    return found


def _operands(args: Sequence[str]) -> list[str]:
    """Arguments that are not options (everything after ``--`` counts)."""
    found: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            found.extend(args[index + 1 :])
            break
        if not arg.startswith("-") or arg == "-":
            found.append(arg)
    return found


def _subcommand(args: Sequence[str]) -> str:
    operands = _operands(args)
    return operands[0] if operands else ""


def _normalize_path(path: str) -> str:
    if not path:
        return path
    return posixpath.normpath(re.sub(r"/{2,}", "/", path))


def _written_paths(context: _Context) -> list[str]:
    """Files the command writes: redirections, tee, dd of=, sed -i, cp/mv targets."""
    paths = [
        target
        for operator, target in redirections(context.command.words)
        if operator in _WRITE_REDIRECTS and target and not target.isdigit() and target != "-"
    ]
    program, args = context.program, context.args
    if program == "tee":
        paths += _operands(args)
    elif program == "dd":
        paths += [arg[3:] for arg in args if arg.startswith("of=")]
    elif program in ("sed", "perl") and (
        "i" in _short_flags(args) or "--in-place" in _long_flags(args)
    ):
        paths += _operands(args)
    elif program in _COPY_PROGRAMS:
        operands = _operands(args)
        paths += operands[-1:]
        for index, arg in enumerate(args):
            if arg == "-t" and index + 1 < len(args):
                paths.append(args[index + 1])
            elif arg.startswith("--target-directory="):
                paths.append(arg.split("=", 1)[1])
    return paths


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


def _interpreter(program: str) -> str | None:
    if _PYTHON_RE.fullmatch(program):
        return "python"
    return program if program in _INTERPRETER_INLINE_FLAGS else None


def _shell_reads_stdin(args: Sequence[str]) -> bool:
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


def _interpreter_reads_stdin(kind: str, args: Sequence[str]) -> bool:
    """Whether ``python ARGS`` (or perl, ruby, node...) runs code from standard input."""
    if any(letter in _INTERPRETER_INLINE_FLAGS[kind] for letter in _short_flags(args)):
        return False
    if _long_flags(args) & {"--eval", "--print"}:
        return False
    operands = _operands(args)
    return not operands or operands[0] == "-"


def _reads_code_from_stdin(context: _Context) -> bool:
    if context.program in SHELL_PROGRAMS:
        return _shell_reads_stdin(context.args)
    kind = _interpreter(context.program)
    return kind is not None and _interpreter_reads_stdin(kind, context.args)


def _pipeline_shown(context: _Context) -> str:
    return _shown(" | ".join(_show_words(stage.words) for stage in context.pipeline))


# --- the checks, one per pattern id ---------------------------------------------------

_Check = Callable[[_Context], DangerMatch | None]


def _check_filesystem_format(context: _Context) -> DangerMatch | None:
    program, args = context.program, context.args
    formats = (
        program in _FORMAT_PROGRAMS
        or program.startswith(("mkfs.", "newfs_"))
        or (program == "diskutil" and _subcommand(args).lower().startswith(
            ("erase", "partitiondisk", "zerodisk", "randomdisk", "secureerase", "reformat")
        ))
    )  # fmt: skip
    if not formats:
        return None
    if program in ("fdisk", "sfdisk", "gdisk", "parted") and (
        "l" in _short_flags(args) or "--list" in _long_flags(args)
    ):
        return None
    return _PATTERNS["filesystem-format"].match(context.shown)


def _check_disk_write(context: _Context) -> DangerMatch | None:
    if context.program == "dd" and any(arg.startswith("of=") for arg in context.args):
        return _PATTERNS["disk-write"].match(context.shown)
    return None


def _check_device_write(context: _Context) -> DangerMatch | None:
    for path in _written_paths(context):
        if _BLOCK_DEVICE_RE.match(_normalize_path(path)):
            return _PATTERNS["device-write"].match(_show_words(context.command.words))
    return None


def _check_recursive_delete(context: _Context) -> DangerMatch | None:
    program, args = context.program, context.args
    pattern = _PATTERNS["recursive-delete"]
    if program == "rm":
        recursive = (
            "r" in _short_flags(args)
            or "R" in _short_flags(args)
            or "--recursive" in _long_flags(args)
        )
        if recursive or context.via == "exec":  # find -exec rm, xargs rm: bulk deletes
            return pattern.match(context.shown)
    if program == "find" and "-delete" in args:
        return pattern.match(context.shown)
    return None


def _check_download_exec(context: _Context) -> DangerMatch | None:
    pattern = _PATTERNS["download-exec"]
    program = context.program
    # curl ... | sh
    if context.index > 0 and _reads_code_from_stdin(context):
        if any(_runs_downloader(stage) for stage in context.pipeline[: context.index]):
            return pattern.match(_pipeline_shown(context))
    # A process substitution given to a shell or interpreter is the script it runs:
    # bash <(curl ...), source <(curl ...), python <(curl ...), sh < <(curl ...).
    # A command substitution is code only for a shell or eval: sh -c "$(curl ...)",
    # eval "$(curl ...)", bash <<< "$(curl ...)"; for python it would be an argument.
    runs_process = (
        program in SHELL_PROGRAMS or program in _CODE_RUNNERS or _interpreter(program) is not None
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


def _check_system_permissions(context: _Context) -> DangerMatch | None:
    program = context.program
    if program not in ("chmod", "chown", "chgrp"):
        return None
    recursive, operands = _permission_operands(context)
    for target in operands[1:]:
        path = _normalize_path(target)
        if (
            path in _SYSTEM_ROOTS
            or re.match(r"/+\*", path)
            or (recursive and (path in _HOME_WORDS or path.startswith(_SYSTEM_TREES)))
        ):
            return _PATTERNS["system-permissions"].match(context.shown)
    return None


def _permission_operands(context: _Context) -> tuple[bool, list[str]]:
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


def _check_world_writable(context: _Context) -> DangerMatch | None:
    if context.program != "chmod":
        return None
    _, operands = _permission_operands(context)
    if operands and _world_writable(operands[0]):
        return _PATTERNS["world-writable"].match(context.shown)
    return None


def _check_privilege_escalation(context: _Context) -> DangerMatch | None:
    if _ROOT_PROGRAMS & {*context.wrappers, context.program}:
        return _PATTERNS["privilege-escalation"].match(context.shown)
    return None


def _check_secret_path(context: _Context) -> DangerMatch | None:
    for word in context.command.words:
        for candidate in (word, *re.split(r"[=:,]", word)):
            if candidate and (found := find_path_danger(candidate)):
                return found
        # What bash would make of it: `~/.ss[h]/id_rs[a]`, `.e?v`, `{environ,cmdline}`.
        for expanded in expand_braces(word):
            for spelling in glob_spellings(expanded, _SECRET_NAMES):
                if spelling != word and (found := _secret_category(spelling)):
                    return _PATTERNS["secret-path"].match(_shown(word), title=found)
    return None


def _check_git(pattern_id: str) -> _Check:
    def check(context: _Context) -> DangerMatch | None:
        if context.program != "git":
            return None
        found = git_danger(context.args, context.path_exists)
        if found is not None and found.pattern == pattern_id:
            return _PATTERNS[pattern_id].match(context.shown, title=found.title)
        return None

    return check


def _check_system_power(context: _Context) -> DangerMatch | None:
    program, args = context.program, context.args
    powers = (
        program in _POWER_PROGRAMS
        or (program in ("init", "telinit") and _subcommand(args) in ("0", "6"))
        or (program in ("systemctl", "loginctl") and _subcommand(args) in _POWER_VERBS)
    )
    return _PATTERNS["system-power"].match(context.shown) if powers else None


def _check_mass_kill(context: _Context) -> DangerMatch | None:
    program = context.program
    if program in ("killall", "pkill", "killall5"):
        return _PATTERNS["mass-kill"].match(context.shown)
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
        return _PATTERNS["mass-kill"].match(context.shown)
    return None


def _check_firewall_change(context: _Context) -> DangerMatch | None:
    program, args = context.program, context.args
    changes = False
    if program.startswith(("iptables", "ip6tables")):
        changes = any(
            arg in ("-F", "--flush", "-X", "--delete-chain", "-P", "--policy") for arg in args
        )
    elif program == "nft":
        changes = any(arg in ("flush", "delete") for arg in args)
    elif program == "ufw":
        changes = _subcommand(args) in ("disable", "reset")
    elif program == "systemctl":
        operands = _operands(args)
        changes = (
            bool(operands)
            and operands[0] in ("stop", "disable", "mask")
            and any(unit.removesuffix(".service") in _FIREWALL_UNITS for unit in operands[1:])
        )
    elif program == "setenforce":
        changes = _subcommand(args).lower() in ("0", "permissive")
    elif program == "pfctl":
        changes = "d" in _short_flags(args)
    return _PATTERNS["firewall-change"].match(context.shown) if changes else None


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


def _check_crontab_remove(context: _Context) -> DangerMatch | None:
    if context.program == "crontab" and "r" in _crontab_options(context.args)[0]:
        return _PATTERNS["crontab-remove"].match(context.shown)
    return None


def _check_crontab_install(context: _Context) -> DangerMatch | None:
    if context.program != "crontab":
        return None
    letters, operands = _crontab_options(context.args)
    if operands and not set(letters) & set("lre"):
        return _PATTERNS["crontab-install"].match(context.shown)
    return None


def _check_shell_startup_file(context: _Context) -> DangerMatch | None:
    for path in _written_paths(context):
        normalized = _normalize_path(path)
        name = posixpath.basename(normalized)
        if (
            name in _STARTUP_NAMES
            or normalized in _STARTUP_PATHS
            or normalized.startswith("/etc/profile.d/")
        ):
            return _PATTERNS["shell-startup-file"].match(_show_words(context.command.words))
    return None


def _check_system_file_write(context: _Context) -> DangerMatch | None:
    for path in _written_paths(context):
        if _normalize_path(path).startswith(_SYSTEM_WRITE_TREES):
            return _PATTERNS["system-file-write"].match(_show_words(context.command.words))
    return None


def _check_account_change(context: _Context) -> DangerMatch | None:
    if context.program in _ACCOUNT_PROGRAMS:
        return _PATTERNS["account-change"].match(context.shown)
    return None


def _check_environment_dump(context: _Context) -> DangerMatch | None:
    program, args = context.program, context.args
    dumps = (
        program == "printenv"
        # `env` is left as the program only when it has no command to run.
        or program == "env"
        or (program in ("export", "declare", "typeset") and all(
            arg.startswith("-") and set(arg[1:]) <= set("px") for arg in args
        ))
        or (program == "set" and not args)
    )  # fmt: skip
    return _PATTERNS["environment-dump"].match(context.shown) if dumps else None


def _check_history_clear(context: _Context) -> DangerMatch | None:
    program, args = context.program, context.args
    if (program == "history" and "c" in _short_flags(args)) or (
        program == "unset" and "HISTFILE" in args
    ):
        return _PATTERNS["history-clear"].match(context.shown)
    return None


def _check_pipe_to_shell(context: _Context) -> DangerMatch | None:
    if context.index > 0 and context.program in SHELL_PROGRAMS and _shell_reads_stdin(context.args):
        return _PATTERNS["pipe-to-shell"].match(_pipeline_shown(context))
    return None


def _check_package_publish(context: _Context) -> DangerMatch | None:
    program, args = context.program, context.args
    operands = _operands(args)
    publishes = (
        (program in _PUBLISHERS and operands[:1] == [_PUBLISHERS[program]])
        or (program == "yarn" and operands[:2] == ["npm", "publish"])
        or (_interpreter(program) == "python" and _python_module(args) == ("twine", "upload"))
    )
    return _PATTERNS["package-publish"].match(context.shown) if publishes else None


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
