"""``find``: its starting points and expression, read as GNU findutils reads them.

``find src -name '*.py'`` only lists, but ``-exec``, ``-execdir``, ``-ok`` and
``-okdir`` run programs, ``-delete`` deletes, and ``-fprint``, ``-fprint0``, ``-fprintf``
and ``-fls`` write files. :func:`find_problem` walks the expression primary by
primary, each with the number of words it takes, so a ``-name -exec`` (a name) is
not taken for ``-exec`` and an ``-exec`` hidden after ``\\;``, ``;`` or ``+`` is still
found. An unknown primary is refused.
"""

from __future__ import annotations

import re

__all__ = ["find_problem"]

# Primaries (tests, options and harmless actions) with how many words they take.
_READS: dict[str, int] = {
    **dict.fromkeys(
        """
        -amin -anewer -atime -cmin -cnewer -ctime -fstype -gid -group -ilname -iname -inum -ipath
        -iregex -iwholename -links -lname -mmin -mtime -name -newer -path -perm -regex -samefile
        -size -type -uid -used -user -wholename -xtype -context -maxdepth -mindepth -regextype
        -printf -files0-from
        """.split(),
        1,
    ),
    **dict.fromkeys(
        """
        -empty -executable -false -nogroup -nouser -readable -true -writable -depth -d -follow
        -ignore_readdir_race -noignore_readdir_race -mount -noleaf -xdev -daystart -warn -nowarn
        -help --help -version --version -print -print0 -ls -prune -quit -not -a -and -o -or ( ) ! ,
        """.split(),
        0,
    ),
}
_RUNS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_WRITES = {"-fprint": 1, "-fprint0": 1, "-fls": 1, "-fprintf": 2}
_GLOBAL = frozenset({"-H", "-L", "-P"})
_NEWER = re.compile(r"-newer[aBcm][aBcmt]")


def find_problem(args: tuple[str, ...], *, open_ended: bool = False) -> str | None:
    """Why ``find ARGS`` is more than a read, or None when it only lists.

    Args:
        args: The words after ``find``.
        open_ended: More words will be appended (``xargs find``): any primary could follow.

    Returns:
        A sentence naming the primary that runs, deletes or writes, or None.
    """
    if open_ended:
        return "find given more arguments by xargs may be given -exec or -delete"
    index = 0
    while index < len(args) and (args[index] in _GLOBAL or args[index][:2] in ("-O", "-D")):
        index += 2 if args[index] == "-D" else 1  # -D DEBUGOPTS, -OLEVEL
    while index < len(args) and not _starts_expression(args[index]):
        index += 1  # starting points
    while index < len(args):
        word = args[index]
        if word in _RUNS:
            return f"find {word} runs a program on what it finds"
        if word == "-delete":
            return "find -delete deletes what it finds"
        if word in _WRITES:
            return f"find {word} writes the file it is given"
        if _NEWER.fullmatch(word):
            index += 2  # -newerXY REFERENCE
            continue
        if word not in _READS:
            return f"find {word}: a primary this check does not know"
        index += 1 + _READS[word]
    return None


def _starts_expression(word: str) -> bool:
    return (word.startswith("-") and word != "-") or word in ("(", ")", "!", ",")
