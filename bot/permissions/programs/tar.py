"""``tar``: which mode it runs in, where the archive goes, and the options that run programs.

``tar tf a.tar`` lists and ``tar cf - src`` writes the archive to standard output, but
``tar xf a.tar`` writes files, and ``--to-command``, ``--checkpoint-action=exec=``,
``-I``/``--use-compress-program``, ``--rsh-command``, ``--rmt-command``, ``-F``/
``--info-script`` and an archive named ``host:file`` (a remote archive, reached with
rsh) run programs. :func:`tar_problem` reads both of tar's option styles (``tar cvf
a.tar src`` bundles letters whose values follow in order) and approves listing,
comparing, extracting to standard output and creating to standard output only.
"""

from __future__ import annotations

from bot.permissions.options import ParsedArgs, parse_args, table

__all__ = ["new_style", "tar_problem"]

_TAR = table(
    flags="AcdrtuxaBhiklmMoOpPRsSUvwWzjJZGn",
    values="bCfFgHIKLNTVX",
    longs="catenate concatenate create diff compare delete append list test-label update "
    "extract get check-device no-check-device keep-old-files keep-newer-files skip-old-files "
    "overwrite overwrite-dir no-overwrite-dir recursive-unlink unlink-first remove-files "
    "ignore-command-error no-ignore-command-error to-stdout touch same-owner no-same-owner "
    "numeric-owner same-permissions preserve-permissions no-same-permissions preserve-order "
    "same-order delay-directory-restore no-delay-directory-restore sparse read-full-records "
    "ignore-zeros multi-volume seek no-seek auto-compress no-auto-compress bzip2 xz lzip "
    "lzma lzop zstd gzip gunzip ungzip compress uncompress absolute-names dereference "
    "hard-dereference ignore-failed-read one-file-system no-recursion recursion null no-null "
    "unquote no-unquote verbatim-files-from no-verbatim-files-from anchored no-anchored "
    "ignore-case no-ignore-case wildcards no-wildcards wildcards-match-slash "
    "no-wildcards-match-slash exclude-backups exclude-caches exclude-caches-all "
    "exclude-caches-under exclude-vcs exclude-vcs-ignores acls no-acls selinux no-selinux "
    "xattrs no-xattrs full-time utc verbose interactive confirmation verify "
    "show-defaults show-omitted-dirs show-snapshot-field-ranges show-stored-names "
    "show-transformed-names block-number check-links force-local portability posix "
    "old-archive clamp-mtime keep-directory-symlink help usage version restrict "
    "no-quote-chars",
    long_values="blocking-factor directory file info-script new-volume-script "
    "listed-incremental starting-file newer after-date newer-mtime tape-length label "
    "exclude-from files-from use-compress-program to-command checkpoint-action "
    "index-file rsh-command rmt-command volno-file record-size format group owner mode mtime "
    "group-map owner-map transform xform strip-components exclude exclude-tag "
    "exclude-tag-all exclude-tag-under exclude-ignore exclude-ignore-recursive "
    "add-file quoting-style quote-chars pax-option suffix warning level sort "
    "hole-detection sparse-version xattrs-include xattrs-exclude",
    long_optional="atime-preserve backup checkpoint occurrence one-top-level totals",
    names={
        "A": "catenate",
        "c": "create",
        "d": "diff",
        "r": "append",
        "t": "list",
        "u": "update",
        "x": "extract",
        "b": "blocking-factor",
        "C": "directory",
        "f": "file",
        "F": "info-script",
        "g": "listed-incremental",
        "I": "use-compress-program",
        "O": "to-stdout",
        "K": "starting-file",
        "N": "newer",
        "L": "tape-length",
        "V": "label",
        "T": "files-from",
        "X": "exclude-from",
        "M": "multi-volume",
    },
)
_RUNS = {
    "to-command": "--to-command runs a program on every file",
    "checkpoint-action": "--checkpoint-action can run a program",
    "use-compress-program": "-I/--use-compress-program runs the program it names",
    "rsh-command": "--rsh-command runs the program it names",
    "rmt-command": "--rmt-command runs the program it names",
    "info-script": "-F/--info-script runs the script it names",
    "new-volume-script": "--new-volume-script runs the script it names",
    "index-file": "--index-file writes a file",
    "listed-incremental": "-g/--listed-incremental writes its snapshot file",
    "volno-file": "--volno-file writes a file",
    "remove-files": "--remove-files deletes the files it archived",
}
_READ_MODES = frozenset({"list", "diff", "compare", "test-label", "show-defaults"})
_WRITE_MODES = frozenset({"append", "update", "catenate", "concatenate", "delete"})
# Old-style letters whose value is the next word, in order (`tar cvfb a.tar 20 src`).
_OLD_STYLE_VALUES = frozenset("bCfFgHIKLNTVX")


def tar_problem(args: tuple[str, ...], *, open_ended: bool = False) -> str | None:
    """Why ``tar ARGS`` is more than a read, or None when it only reads and prints.

    Args:
        args: The words after ``tar``.
        open_ended: More words will be appended (``xargs tar ...``): they could be options.

    Returns:
        A sentence naming what writes or runs, or None.
    """
    if open_ended:
        return "tar given more arguments by xargs may be given options that run programs"
    parsed = parse_args(new_style(args), _TAR)
    if (unknown := parsed.unknown()) is not None:
        return f"tar {unknown.word}: an option this check does not know"
    for option in parsed.options:
        if option.name in _RUNS:
            return f"tar {_RUNS[option.name]}"
    if any(":" in archive and archive != "-" for archive in parsed.values("file")) and not (
        parsed.given("force-local")
    ):
        return "tar -f HOST:FILE reaches a remote archive through rsh, which runs a program"
    return _mode_problem(parsed)


def _mode_problem(parsed: ParsedArgs) -> str | None:
    names = parsed.names()
    if names & _WRITE_MODES:
        return "tar changes the archive"
    if "extract" in names:
        return None if "to-stdout" in names else "tar -x writes the files it extracts"
    if "create" in names:
        archives = parsed.values("file")
        if archives and archives[-1] != "-":
            return f"tar -c writes the archive {archives[-1]!r}"
        return None
    if names & _READ_MODES:
        return None
    return "tar without a mode this check knows"


def new_style(args: tuple[str, ...]) -> tuple[str, ...]:
    """``tar cvf a.tar src`` as ``tar -c -v -f a.tar src``; other spellings as they are."""
    if not args or args[0].startswith("-"):
        return args
    letters, rest = args[0], list(args[1:])
    words: list[str] = []
    for letter in letters:
        words.append(f"-{letter}")
        if letter in _OLD_STYLE_VALUES:
            if not rest:
                return args  # a value is missing: tar refuses it; read it as written
            words.append(rest.pop(0))
    return (*words, *rest)
