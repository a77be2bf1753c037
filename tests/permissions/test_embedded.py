"""Code hidden in arguments, builtins and variables reaches deny rules, danger and approvers.

Each call was found by a review of issue 24's first fixes to delete `src` (or push past
a rule's approvers) with nobody asked, under `allow: [bash]` and `deny: ["bash(rm
*)"]`. None may come out "allow"; where Baton can read the code, the deny rule denies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine import HookDecision
from bot.permissions.embedded import substitutions
from bot.permissions.rules import PermissionRules, Rule
from bot.tools import Workspace
from tests.permissions.judge import judge_command

PUSH_APPROVERS = Rule.parse("bash(git push*)").with_approvers(["U1"])
NO_RM = PermissionRules.parse(allow=["bash"], deny=["bash(rm *)"], ask=[PUSH_APPROVERS])
PUSH_ONLY = PermissionRules.parse(allow=["bash"], ask=[PUSH_APPROVERS])

# Baton reads the code: the deny rule forbids it.
DENIED = [
    "shopt -s expand_aliases\nalias ls='rm -rf src'\nls",
    "let 'a[$(rm -rf src)]'",
    "printf -v 'a[$(rm -rf src)]' x",
    "test -v 'a[$(rm -rf src)]'",
    "[[ 'a[$(rm -rf src)]' -eq 0 ]]",
    "declare -a 'a=($(rm -rf src))'",
    "read 'a[$(rm -rf src)]' <<< x",
    "mapfile -C 'rm -rf src' -c 1 a < f",
    "source /dev/stdin <<< 'rm -rf src'",
    ". /dev/stdin <<EOF\nrm -rf src\nEOF",
    "tar -cf /dev/null README.md --checkpoint=1 --checkpoint-action=exec='rm -rf src'",
    "tar -xf a.tar --to-command='rm -rf src'",
    "tar -I rm -xf a.tar",
    "sed -n '1e rm -rf src' README.md",
    "sed -n '1,5e rm -rf src' README.md",
    "awk 'BEGIN{system(\"rm -rf src\")}'",
    "awk '{print | \"rm -rf src\"}' README.md",
    "split --filter='rm -rf src' README.md",
    "zip -TT 'rm -rf src' -T x.zip README.md",
    "install -s --strip-program=/usr/bin/rm a b",
    "git submodule foreach rm -rf src",
    "git submodule foreach --recursive 'rm -rf src'",
    # a second review: git settings and options that run programs
    "git -c diff.x.textconv='rm -rf src' diff",
    "git -c filter.x.clean='rm -rf src' add -A",
    "git -c gpg.format=ssh -c gpg.ssh.defaultKeyCommand='rm -rf src' commit -S -m x",
    "git -c remote.x.url=. -c remote.x.uploadpack='rm -rf src;:' fetch x",
    "git fetch --upload-pack='rm -rf src;:' .",
    "git clone -u 'rm -rf src;:' . copy",
    "git archive --remote=. --exec='rm -rf src;:' HEAD",
    # option clusters and old-style bundles
    "mapfile -tC 'rm -rf src' -c1 < README.md",
    "readarray -C'rm -rf src' -c1 < README.md",
    "tar cIf 'rm -rf src' x.tar README.md",
]

# Code Baton cannot read, or that may not run: a person decides.
ASKED = [
    "/usr/bin/r[m] -rf src",
    "hash -p /usr/bin/rm ls; ls -rf src",
    "enable -f ./evil.so evil",
    "source <(echo rm -rf src)",
    "bash <(echo 'rm -rf src')",
    "sed -n 's/.*/rm -rf src/e' README.md",
    "awk '{system($0)}' list.txt",
    "LESSOPEN='|rm -rf src %s' less README.md",
    "GIT_EXTERNAL_DIFF='rm -rf src' git diff",
    "VAR='rm -rf src' git --config-env=core.fsmonitor=VAR status",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='rm -rf src' git status",
    "make --eval='x:;rm -rf src' x",
    "ssh -o ProxyCommand='rm -rf src' x",
    "tar -tf a.tar -F ./next-volume.sh",
    # a second review: code kept in a variable and evaluated later
    "x='a[$(rm -rf src)]'; echo $((x))",
    "x='a[$(rm -rf src)]'; (( x ))",
    "x='a[$(rm -rf src)]'; let x",
    "arr=(1); echo \"${arr['$(rm -rf src)']}\"",
    "read GIT_EXTERNAL_DIFF <<< 'rm -rf src'; export GIT_EXTERNAL_DIFF; git diff",
    "GIT_CONFIG_PARAMETERS=\"'core.fsmonitor'='rm -rf src'\" git status",
    "TAR_OPTIONS=\"--to-command='rm -rf src'\" tar -xf x.tar",
    "git -c protocol.ext.allow=always ls-remote 'ext::sh -c rm% -rf% src'",
    "r{m,} -rf src",
    "sh -s < <(echo rm -rf src)",
    # awk running a command it built, or feeding one to a shell
    'awk \'BEGIN{system("true"); c="rm -rf src"; system(c)}\'',
    'awk \'BEGIN{c="rm -rf src"; print c | "sh"}\'',
    'awk \'BEGIN{print "true" | "cat"; c="rm -rf src"; c | getline}\'',
    "echo 'rm -rf src' | awk '{print | \"sh\"}'",
]

# Each pushes: the rule's approvers must hold.
PUSHES = [
    "git -c alias.p=push p -q r.git HEAD:refs/heads/pwn",
    "/usr/lib/git-core/git-push r.git HEAD:refs/heads/pwn",
    "git send-pack r.git HEAD:refs/heads/pwn",
    "git pus[h] origin main",
    "$(echo git) push origin main",
    "G=git; $G push origin main",
    "git $(echo push) origin main",
    "git subtree push --prefix=docs r main",
    # a second review: aliases and configuration a rule cannot see
    "git -c alias.p='-p push' p origin main",
    "git -c alias.a=b -c alias.b=push a origin main",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.p GIT_CONFIG_VALUE_0=push git p origin main",
    "GIT_CONFIG_PARAMETERS=\"'alias.p'='push'\" git p origin main",
    "git -c help.autocorrect=immediate puhs origin main",
    "git -c include.path=$PWD/c p origin main",
    "GIT_CONFIG_GLOBAL=c git p origin main",
    "HOME=. git p origin main",
    "x='a[$(git push origin main)]'; echo $((x))",
]


@pytest.fixture
def repo(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    return Workspace(root)


def decide(workspace: Workspace, command: str, rules: PermissionRules) -> HookDecision:
    return judge_command(workspace, command, rules)


@pytest.mark.parametrize("command", DENIED)
def test_code_baton_can_read_is_denied(repo: Workspace, command: str) -> None:
    decision = decide(repo, command, NO_RM)
    assert decision.action == "deny", (command, decision.reason)
    assert "bash(rm *)" in decision.reason


@pytest.mark.parametrize("command", ASKED)
def test_code_baton_cannot_read_asks(repo: Workspace, command: str) -> None:
    decision = decide(repo, command, NO_RM)
    assert decision.action == "ask", (command, decision.reason)


@pytest.mark.parametrize("command", PUSHES)
def test_a_rule_s_approvers_hold_for_every_spelling_of_a_push(
    repo: Workspace, command: str
) -> None:
    decision = decide(repo, command, PUSH_ONLY)
    assert decision.action == "ask", (command, decision.reason)
    assert ("U1",) in decision.approver_sets, (command, decision)


@pytest.mark.parametrize(
    "command",
    ["let 'n = 1 + 2'", "declare -a 'a=(x y)'", "printf -v out '%s' x", "sed -n 1p README.md",
     "tar -cf - src", "awk '{print $1}' README.md", "LESS=-R less README.md",
     "ssh -o 'StrictHostKeyChecking no' host uptime",
     # a second review found these asking: tests, and prose in options
     "[ -f package.json ] && npm test", "[ -d build ] || mkdir build",
     '[[ -n "$VIRTUAL_ENV" ]]', "[[ $x == *.py ]] && echo py",
     "gh pr create --title x --body 'We no longer rm -rf the cache'",
     "gh issue comment 12 --body 'after git push the CI failed'",
     "echo '$(whoami)'", "git log --oneline -3"],
)  # fmt: skip
def test_ordinary_uses_stay_allowed(repo: Workspace, command: str) -> None:
    assert decide(repo, command, NO_RM).action == "allow", command


def test_substitutions_are_found_inside_quoted_words() -> None:
    assert substitutions("a[$(rm -rf src)]") == ["rm -rf src"]
    assert substitutions("x=$(a $(b))`c`") == ["a $(b)", "c"]
    assert substitutions("$((1 + 2))") == []


@pytest.mark.parametrize(
    "command",
    ["python3 -c 'print(1)' ' '", "npm run x -- ' '", "foo '\t'", "git -c 'alias.p= ' p",
     "env " * 600 + "ls"],
)  # fmt: skip
def test_odd_words_are_judged_not_crashed_on(repo: Workspace, command: str) -> None:
    """A review found these raising out of the checks (an empty split, an empty alias,
    a 600-deep `env` chain): a broken check denies with a generic error."""
    rules = PermissionRules.parse(allow=["bash", "bash(env *)"], deny=["bash(rm *)"])
    decision = decide(repo, command, rules)
    assert "permission check failed" not in decision.reason, decision
