"""The table of built-in danger patterns, and the match a check reports.

:data:`DANGER_PATTERNS` lists every pattern, most severe first: when a call is
dangerous in several ways, the first pattern in the table is the one reported. A
:class:`DangerPattern` says what kind of action it is and why that needs a human;
:meth:`DangerPattern.match` turns it into a :class:`DangerMatch` naming what was found
(shortened by :func:`shown_text`). The checks live in :mod:`bot.permissions.danger`
(commands) and :mod:`bot.permissions.secret_paths` (paths).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DANGER_PATTERNS", "PATTERN_BY_ID", "DangerMatch", "DangerPattern", "shown_text"]

_SHOWN_LIMIT = 120


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

PATTERN_BY_ID = {pattern.id: pattern for pattern in DANGER_PATTERNS}
"""The patterns of :data:`DANGER_PATTERNS` by id."""


def shown_text(text: str) -> str:
    """Text as shown to the approver: on one line, and past 120 characters cut to end in "..."."""
    text = " ".join(text.split())
    if len(text) > _SHOWN_LIMIT:
        return text[: _SHOWN_LIMIT - 3] + "..."
    return text
