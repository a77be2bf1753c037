"""Which words name a program, and which programs never run their arguments.

A program Baton has no reading of may run the rest of its line (``docker run IMAGE rm
-rf /``, ``npx rm -rf src``, a wrapper nobody listed): so the deny rules, the danger
patterns and per-rule approvers are also matched against every tail of its words
that starts with a command name (see :mod:`bot.permissions.shell_words`, "tail").
:data:`NON_RUNNERS` are the programs known never to do that, whose words are only
data (``echo rm -rf x``, ``grep -r rm .``); :func:`is_command_name` says whether a word
names something a shell could run: a bash builtin or keyword, or a program on the
sandbox's ``PATH``.
"""

from __future__ import annotations

import functools
import os
import re

from bot.sandbox.environment import DEFAULT_PATH

__all__ = ["BUILTINS", "NON_RUNNERS", "is_command_name"]

BUILTINS = frozenset(
    """
    . : [ alias bg bind break builtin caller cd command compgen complete compopt continue coproc
    declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs
    kill let local logout mapfile popd printf pushd pwd read readarray readonly return set shift
    shopt source suspend test time times trap true type typeset ulimit umask unalias unset wait
    """.split()
)
"""bash's builtins and the keywords that start a command."""

# coreutils that only handle data and files
_COREUTILS = """
    [ b2sum base32 base64 basename basenc cat chgrp chmod chown cksum comm cp csplit cut date dd df
    dir dircolors dirname du echo expand expr factor false fmt fold groups head hostid id install
    join link ln logname ls md5sum mkdir mkfifo mknod mktemp mv nl nproc numfmt od paste pathchk pr
    printenv printf ptx pwd readlink realpath rm rmdir seq sha1sum sha224sum sha256sum sha384sum
    sha512sum shred shuf sleep sort split stat stty sum sync tac tail tee test touch tr true
    truncate tsort tty uname unexpand uniq unlink users vdir wc who whoami yes
"""
# text tools and viewers Baton reads options of, and their kin
_TEXT_TOOLS = """
    awk gawk mawk nawk cmp diff diff3 egrep fgrep grep jq less more man rg sed tar column file
    hexdump look rev strings tree xxd zcat gzip gunzip bzip2 bunzip2 xz unxz zstd unzip zip which
"""
# shell builtins whose words are data
_DATA_BUILTINS = """
    alias cd declare dirs export getopts hash help history jobs let local mapfile popd pushd read
    readarray readonly return set shift shopt type typeset ulimit umask unalias unset wait exit
    break continue
"""
# programs with a reading of their own (git's subcommands, URLs for downloaders)
_OWN_READINGS = """
    git curl wget
"""
NON_RUNNERS = frozenset((_COREUTILS + _TEXT_TOOLS + _DATA_BUILTINS + _OWN_READINGS).split())
"""Programs whose arguments are never a command they run (their words are data)."""

_NOT_A_NAME = re.compile(r"[\s=]|^-|^$")


@functools.cache
def _programs_on_path() -> frozenset[str]:
    """The names a sandboxed command can run without a path: what its ``PATH`` holds."""
    names: set[str] = set()
    for directory in DEFAULT_PATH.split(":"):
        try:
            names.update(os.listdir(directory))
        except OSError:
            continue
    return frozenset(names)


def is_command_name(word: str) -> bool:
    """Whether ``word`` names something bash would run: a builtin, or a program on PATH.

    A path (``/bin/rm``, ``./x/rm``) counts by its last component.
    """
    if _NOT_A_NAME.search(word):
        return False
    name = word.lstrip("\\").rsplit("/", 1)[-1]
    return bool(name) and (name in BUILTINS or name in _programs_on_path())
