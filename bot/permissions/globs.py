"""The paths a shell word could name once bash expands its braces and globs.

The secrets check compares path components with names (``.ssh``, ``.env``,
``environ``). bash would turn ``~/.ss[h]``, ``.e?v`` or ``/proc/1/{environ,cmdline}``
into those names, so the check must see them too. Expansion is bounded: past
:data:`MAX_SPELLINGS` the word is reported as it is.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
from collections.abc import Iterable

__all__ = ["MAX_SPELLINGS", "expand_braces", "glob_spellings"]

MAX_SPELLINGS = 64
_GLOB_CHARS = frozenset("*?[")
_BRACE_RE = re.compile(r"\{([^{}]*,[^{}]*)\}")


def expand_braces(word: str) -> list[str]:
    """``a{b,c}d`` as bash expands it (``abd``, ``acd``), innermost first, bounded.

    Args:
        word: A shell word after quote removal.

    Returns:
        The expansions, or ``[word]`` when there is nothing to expand.
    """
    found = [word]
    for _ in range(8):
        expanded: list[str] = []
        changed = False
        for text in found:
            match = _BRACE_RE.search(text)
            if match is None:
                expanded.append(text)
                continue
            changed = True
            head, tail = text[: match.start()], text[match.end() :]
            expanded += [head + choice + tail for choice in match.group(1).split(",")]
        found = expanded[:MAX_SPELLINGS]
        if not changed:
            break
    return found


def glob_spellings(word: str, names: Iterable[str]) -> list[str]:
    """The paths a globbing word could name, each glob component replaced by a known name.

    Only components with at least one literal character are expanded (``*`` alone
    matches everything and would flag every glob); a component starting with a glob
    character does not match names starting with ``.``, as in bash.

    Args:
        word: A shell word after quote removal.
        names: The names worth knowing about (secret directories and files).

    Returns:
        Literal paths, the word itself first; bounded by :data:`MAX_SPELLINGS`.
    """
    parts = word.split("/")
    if not any(_GLOB_CHARS & set(part) for part in parts):
        return [word]
    lowered = sorted({name.lower() for name in names})
    choices: list[list[str]] = []
    for part in parts:
        if not _GLOB_CHARS & set(part) or not set(part) - _GLOB_CHARS:
            choices.append([part])
            continue
        pattern = part.lower()
        matching = [
            name
            for name in lowered
            if fnmatch.fnmatchcase(name, pattern) and (part[0] == "." or not name.startswith("."))
        ]
        choices.append([part, *matching])
    spellings = ["/".join(combination) for combination in itertools.product(*choices)]
    return spellings[:MAX_SPELLINGS]
