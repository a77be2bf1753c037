"""The glob dialect of permission rules, turned into regular expressions.

Its own module, depending on nothing of Baton's, so the sandbox (which hides the files
a rule denies reading, and shows those `sandbox.show_secrets` lists, written in the same
dialect) can use it without importing the rules and, through them, the tools.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["glob_to_regex"]


@lru_cache(maxsize=512)
def glob_to_regex(pattern: str, kind: str) -> re.Pattern[str]:
    """Compile a rule's glob.

    For commands `*` matches anything (`git status*`). For paths and patterns `*`
    stays within one directory, `**` crosses directories, and a leading `**/`
    also matches at the top (`**/.env` matches `.env`).
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if kind == "command":
            out.append(".*" if char == "*" else "." if char == "?" else re.escape(char))
            i += 1
            continue
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(char))
            i += 1
    return re.compile("".join(out), re.DOTALL)
