"""The ways a command can be named, for the rules that match it: deny, ask, approvers.

A deny rule ``bash(rm *)`` must match ``rm -rf src`` however it is written:
``/bin/rm -rf src``, ``taskset -c 0 rm -rf src``, ``sh -c 'rm -rf src'``, ``trap 'rm
-rf src' EXIT``, ``git -C . push`` for ``bash(git push*)``. :func:`command_spellings`
reads a command once and sorts every spelling of every simple command in it by how
sure Baton is that it runs:

* ``exact``: it runs (the command as written, each part as written, each part as the
  program it really runs through its wrappers, git without its global options);
* ``extended``: it runs with more arguments than it shows (``xargs rm`` runs ``rm``
  with what it reads); a rule matches when it could match some completion;
* ``doubtful``: a program Baton has no reading of may run it (``docker run IMAGE rm
  -rf /`` holds ``rm -rf /``): a deny rule matching it makes the call ask, not deny.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

from bot.permissions.bash_tree import CommandParseError
from bot.permissions.command_names import is_command_name
from bot.permissions.danger_context import CommandContext, command_contexts
from bot.permissions.git_args import GIT_SUBCOMMANDS, split_git
from bot.permissions.shell_words import parse_command

__all__ = ["CommandSpellings", "command_spellings", "git_named_at_run_time"]


@dataclass(slots=True)
class CommandSpellings:
    """Every spelling of a command's parts, sorted by how sure it is that they run.

    Attributes:
        exact: Spellings of what runs, the whole command first.
        extended: Spellings of what runs with arguments not shown.
        doubtful: Each spelling of what may run, with the command holding it (shown).
        contexts: Every simple command, nested ones included (empty when unparsable).
    """

    exact: list[str] = field(default_factory=list)
    extended: list[str] = field(default_factory=list)
    doubtful: list[tuple[str, str]] = field(default_factory=list)
    contexts: list[CommandContext] = field(default_factory=list)

    def all(self) -> list[str]:
        """Every spelling, whatever its certainty: for rules that may only add questions."""
        return list(dict.fromkeys([*self.exact, *self.extended, *(s for s, _ in self.doubtful)]))


def command_spellings(command: str) -> CommandSpellings:
    """Read ``command`` and give the spellings of each of its parts.

    A command that cannot be parsed has only itself as a spelling (the danger check
    makes it ask).
    """
    found = CommandSpellings(exact=[command])
    try:
        script = parse_command(command)
    except CommandParseError:
        return found
    found.contexts = list(command_contexts(script, via=None, parent=None))
    for context in found.contexts:
        texts = [text for text in _texts(context) if text]
        if context.in_tail:
            holder = _holder(context)
            found.doubtful += [(text, holder) for text in texts]
        elif context.open_ended:
            found.extended += texts
        else:
            found.exact += texts
    found.exact = list(dict.fromkeys(found.exact))
    found.extended = list(dict.fromkeys(found.extended))
    found.doubtful = list(dict.fromkeys(found.doubtful))
    return found


def _texts(context: CommandContext) -> list[str]:
    """The part as written, as the program it runs, and (for git) as the subcommand it is."""
    written = " ".join(context.words)
    effective = " ".join(context.argv)
    return [written, effective, *_git_spellings(context.argv)]


# git subcommands that do another's work: rules on `git push` hold for them too.
_GIT_SAME_AS = {"send-pack": "push", "http-push": "push"}


def _git_spellings(argv: tuple[str, ...]) -> list[str]:
    """``git -C . -c x=y push`` as ``git push``; an alias as what it stands for (``-c
    alias.p=push p`` is ``git push``); ``git-push`` and ``git send-pack`` as ``git push``.

    Only for matching deny and ask rules (more matches, never fewer); allow rules read
    the whole command, and git's global options keep them from approving it.
    """
    if not argv:
        return []
    if argv[0].startswith("git-") and len(argv[0]) > 4:
        argv = ("git", argv[0][4:], *argv[1:])
    if len(argv) < 2 or argv[0] != "git":
        return []
    call = split_git(argv[1:])
    if not call.subcommand:
        return []
    found = []
    subcommands = [call.subcommand, *_aliased(call.globals, call.subcommand)]
    if call.subcommand == "subtree" and call.args[:1] == ("push",):
        subcommands.append("push")
    for subcommand in subcommands:
        for name in (subcommand, _GIT_SAME_AS.get(subcommand)):
            if name:
                found.append(" ".join(["git", name, *call.args]))
    return found


def _aliased(globals: tuple[str, ...], subcommand: str) -> list[str]:
    """What ``-c alias.NAME=VALUE`` makes of ``git NAME``: VALUE's first word."""
    found = []
    for index, word in enumerate(globals):
        value = globals[index + 1] if word == "-c" and index + 1 < len(globals) else None
        if value is None and word.startswith("-c") and len(word) > 2:
            value = word[2:]
        key, _, rest = (value or "").partition("=")
        words = rest.split()
        if key.lower() == f"alias.{subcommand}".lower() and words and not rest.startswith("!"):
            found.append(words[0])
    return found


def _holder(context: CommandContext) -> str:
    """The command that holds a tail, as the approver should read it."""
    while context.via == "tail" and context.parent is not None:
        context = context.parent
    return context.shown


# Where git keeps its own commands; a subcommand found neither there nor on PATH (as
# `git-NAME`) is an alias, defined where the command may have set it.
_GIT_EXEC_DIRS = ("/usr/lib/git-core", "/usr/libexec/git-core", "/usr/local/libexec/git-core")
# Settings that change which command `git NAME` is (includes, autocorrect).
_GIT_REDIRECTING = re.compile(r"(?i)(include(if)?\..*path|help\.autocorrect)=")
# Variables that give git configuration a rule cannot see (and HOME, whose .gitconfig).
_GIT_ENVIRONMENT = re.compile(r"(GIT_CONFIG\w*|GIT_EXEC_PATH|GIT_DIR|HOME|XDG_CONFIG_HOME)=")


def git_named_at_run_time(contexts: list[CommandContext]) -> CommandContext | None:
    """A git call whose subcommand is only known when it runs, if any.

    An alias (a subcommand git does not have), a configuration a rule cannot see (an
    included file, autocorrect, configuration from variables or a changed HOME): any
    of them may make `git p` a push.
    """
    variables = any(_GIT_ENVIRONMENT.match(word) for c in contexts for word in c.words)
    for context in contexts:
        if context.program != "git":
            continue
        call = split_git(context.args)
        if not call.subcommand:
            continue
        if variables or any(_GIT_REDIRECTING.match(word) for word in call.globals):
            return context
        if not _git_has(call.subcommand):
            return context
    return None


@functools.cache
def _git_has(subcommand: str) -> bool:
    if subcommand in GIT_SUBCOMMANDS:
        return True
    name = f"git-{subcommand}"
    if any(os.path.exists(os.path.join(d, name)) for d in _GIT_EXEC_DIRS):
        return True
    return is_command_name(name)
