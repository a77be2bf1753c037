"""Per-program models: a patterned allow vouches only for calls known to only read.

Each program gets the allow rule a team would write for its harmless use (`bash(find
*)`, `bash(sed -n*)`, ...). The hostile calls, taken from what an injected model would
try and from peers' test suites, must not come out "allow"; the ordinary ones must.
Every call goes through the real permission hook and the real Bash tool's arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine import HookDecision
from bot.permissions.programs import MODELLED, allow_problem
from bot.permissions.rules import PermissionRules
from bot.tools import Workspace
from tests.permissions.judge import judge_command

READ_ONLY_STYLE = PermissionRules.parse(
    allow=["read_file", "list_dir", "glob", "grep", "bash(git *)", "bash(ls*)", "bash(cat *)",
           "bash(find *)", "bash(sed -n*)", "bash(sed *)", "bash(rg *)", "bash(grep *)",
           "bash(head *)", "bash(tail *)", "bash(wc *)", "bash(sort *)", "bash(uniq *)",
           "bash(cut *)", "bash(tr *)", "bash(awk *)", "bash(gawk *)", "bash(mawk *)",
           "bash(xargs *)", "bash(tar *)", "bash(env *)", "bash(less *)", "bash(more *)",
           "bash(man *)", "bash(diff *)", "bash(jq *)", "bash(base64*)", "bash(rm *)",
           "bash(sh *)", "bash(sudo *)", "bash(flock *)", "bash(nice *)", "bash(taskset *)"],
    ask=["write_file", "edit_file"],
)  # fmt: skip

HOSTILE = [
    # find: programs, deletes, writes, however the -exec is ended
    "find . -maxdepth 0 -exec sh -c ': > src/app.py' ';'",
    "find . -maxdepth 0 -exec truncate -s0 src/app.py ';'",
    "find src -name '*.py' -exec sh -c 'mv \"$0\" \"$0.gone\"' {} ';'",
    "find . -name x -exec rm {} +",
    "find . -execdir id ';'",
    "find . -ok id ';'",
    "find . -okdir id ';'",
    "find . -delete",
    "find . -name '*.pyc' -delete",
    "find . -fprint out.txt",
    "find . -fprint0 out.txt",
    "find . -fls out.txt",
    "find . -fprintf out.txt '%p'",
    "find . -newerXY",
    "find . -frobnicate",
    "find -L . '(' -name a -o -exec id ';' ')'",
    # sed: in place (in clusters and abbreviated), e, w, s///e, s///w, scripts from files
    "sed -n -i d src/app.py",
    "sed -ni '1,$d' src/app.py",
    "sed -n -i.bak 1d src/app.py",
    "sed -n --in-place 1d src/app.py",
    "sed -n --in-pl=.x 1d src/app.py",
    "sed -n '1e touch x' README.md",
    "sed -n 'e' README.md",
    "sed -n 'w x' README.md",
    "sed -n '1,5w x' README.md",
    "sed -n '/a/W x' README.md",
    "sed -n 's/a/b/w x' README.md",
    "sed -n 's/a/touch x/e' README.md",
    "sed -n 's|a|b|gpw x' README.md",
    "sed -n '1{p;w x\n}' README.md",
    "sed -n '1!w x' README.md",
    "sed -n -f script.sed README.md",
    "sed -n -e 1p -e 'w x' README.md",
    "sed -n --expression='w x' README.md",
    "sed -n 's/a/b' README.md",
    "sed -n 'k' README.md",
    # rg: preprocessors, decompressors, hostname programs, abbreviated
    "rg --pre=sh x .",
    "rg --pre sh x .",
    "rg --pr=sh x .",
    "rg -z x",
    "rg --search-zip x",
    "rg --hostname-bin=id x",
    "rg -zn x .",
    # sort, uniq: output files and programs
    "sort -o out.txt README.md",
    "sort -oout.txt README.md",
    "sort --output=out.txt README.md",
    "sort --out=out.txt README.md",
    "sort --compress-program=sh README.md",
    "sort -T . README.md",
    "uniq README.md out.txt",
    # awk: system, pipes both ways, redirections, code from files and libraries
    "awk '{system(\"touch x\")}' README.md",
    "awk 'BEGIN{system(\"id\")}'",
    "awk '{print | \"sh\"}' README.md",
    "awk 'BEGIN{\"id\" | getline x; print x}'",
    "awk '{print > \"out.txt\"}' README.md",
    'awk \'{printf "%s", $0 >> "out.txt"}\' README.md',
    "awk '{print $1, $2 > $3}' README.md",
    "awk -f prog.awk README.md",
    "awk -v x=1 -f prog.awk README.md",
    "gawk '@load \"filefuncs\"; BEGIN{}'",
    "gawk -l filefuncs 'BEGIN{}'",
    "gawk -i lib.awk 'BEGIN{}'",
    "gawk --dump-variables=x 'BEGIN{}'",
    "gawk -o out.awk 'BEGIN{}'",
    "gawk 'BEGIN{print |& \"cat\"}'",
    "mawk -W exec prog.awk",
    'awk \'BEGIN { f = "system"; @f("id") }\'',
    "awk 'BEGIN { x = 4 / 2; system(\"id\") ; y = 1 / 2 }'",
    # a review found each of these through an awk reader that tokenised the program
    'awk \'BEGIN { if (0) exit /#/; print "touch P" | "sh" }\'',
    'awk \'BEGIN { {} print "x",\n"y" > "P" }\'',
    'awk \'BEGIN { {} print "x" ||\n"y" > "P" }\'',
    'gawk \'BEGIN { x++ / 2; print "id" | "sh"; y = 1 / 1 }\'',
    "awk 'BEGIN { system \\\n(\"id\") }'",
    # sed labels end at whitespace (GNU sed 4.9): what follows is a command
    "sed -n ':a e touch PWNED' README.md",
    "sed -n 'bx;:x w out' README.md",
    # xargs that rewrites its command's words, or sets its environment
    "xargs -a docs/prog.txt -I P awk P README.md",
    "xargs -a docs/sed.txt -I P sed -n -- P README.md",
    "xargs -i cat",
    "xargs --replace=X cat X",
    "xargs -a README.md --process-slot-var=LD_LIBRARY_PATH ls",
    # tar: extraction, archives written, programs run
    "tar xf a.tar",
    "tar -xf a.tar",
    "tar -xzf a.tgz -C src",
    "tar cf out.tar src",
    "tar -cf out.tar src",
    "tar rf a.tar README.md",
    "tar --delete -f a.tar x",
    "tar --to-command=sh -xf a.tar",
    "tar -tf a.tar --checkpoint=1 --checkpoint-action=exec=id",
    "tar -I sh -tf a.tar",
    "tar --use-compress-program=sh -tf a.tar",
    "tar -tf host:archive.tar",
    "tar -tf a.tar --rsh-command=/bin/sh",
    "tar -cf - src --remove-files",
    "tar -g snap -cf - src",
    "tar -tF script.sh -f a.tar",
    # xargs and env run other programs: those must be known to only read, whatever is added
    "xargs rm",
    "xargs sh -c 'touch x'",
    "xargs sed -n 1p",
    "xargs rg x",
    "xargs find",
    "xargs -I{} cp {} /tmp",
    "env -S 'sh -c id'",
    "env LD_PRELOAD=/tmp/x.so ls",
    "env PATH=. ls",
    "env python3 -c 'import os'",
    "env sh -c id",
    # viewers: shell escapes at start, log files, key files, pagers and browsers
    "less '+!touch x' README.md",
    "less '+|sh' README.md",
    "less -o log.txt README.md",
    "less --log-file=log.txt README.md",
    "less -k keys README.md",
    "more '+!touch x' README.md",
    "man -P 'sh -c id' ls",
    "man --pager=id ls",
    "man -H ls",
    "man --html=firefox ls",
    "man -C evil.conf ls",
    # rm: a rule for rm vouches for deleting named files, not forced or recursive deletes
    "rm -f README.md",
    "rm --force README.md",
    "rm README.md -f",
    "rm -rf src",
    "rm -r src",
    "rm --no-preserve-root -r /",
    # programs that run programs, named by their own rule
    "sh -c 'touch x'",
    "sudo ls",
    "flock /tmp/l touch x",
    "nice sh -c 'touch x'",
    # options a model does not know are not vouched for
    "ls --frobnicate",
    "cat --something",
    "grep --pre=x y",
    "head --output=x README.md",
    "diff --to-program=x a b",
    "jq --run x .",
    "base64 -o out.bin",
    "base64 --output=out.bin",
    # git runs configured programs through these
    "git diff --ext-diff",
    "git diff --ext",
    "git log -p --textconv",
    "git show --textc HEAD",
    "git cat-file --filters HEAD:README.md",
]

FRIENDLY = [
    "find src -name '*.py'",
    "find . -name -exec",
    "find . -type f -newermt 2024-01-01 -print",
    "find -L . -maxdepth 2 '(' -name '*.md' -o -name '*.txt' ')' -print0",
    "find . -newermt 2024-01-01 -newerBa README.md",
    "find . -path ./node_modules -prune -o -name '*.js' -print",
    "find . -printf '%p %s\\n'",
    "sed -n 1,20p README.md",
    "sed -n '/begin/,/end/p' README.md",
    "sed -n '$p' README.md",
    "sed -n 's/a/b/gp' README.md",
    "sed -n -e 1p -e '$=' README.md",
    "sed -n '1~2p' README.md",
    "sed -n '/x/{p;q}' README.md",
    "sed -n 'y/abc/xyz/;p' README.md",
    "sed -e '$a hello; w x' README.md",
    "sed 's/foo/bar/g' README.md",
    "rg -n foo src",
    "rg --no-pre -n foo src",
    "rg -uu --hidden -g '*.py' foo",
    "rg --json -C 2 foo",
    "grep -rn foo src",
    "grep -E --include='*.py' -e foo -e bar src",
    "sort -u -k2,2 -t, README.md",
    "sort -n README.md",
    "uniq -c README.md",
    "head -20 README.md",
    "head -n 5 README.md",
    "tail -n +3 README.md",
    "wc -l README.md src/app.py",
    "cut -d: -f1,3 README.md",
    "tr a-z A-Z",
    "awk '{print $1}' README.md",
    "awk -F: '$3 > 100 {print $1}' README.md",
    "awk 'BEGIN { while ((getline line < \"README.md\") > 0) n++; print n }'",
    "awk '$1 || $2' README.md",
    "tar tf a.tar",
    "tar -tzf a.tgz",
    "tar xOf a.tar README.md",
    "tar -xf a.tar --to-stdout",
    "tar cf - src",
    "tar -czf - src",
    "xargs grep -l foo",
    "xargs -0 wc -l",
    "xargs -n1 head -1",
    "xargs sed -n -- 1p",
    "xargs",
    "env LC_ALL=C sort README.md",
    "less README.md",
    "less -N +G README.md",
    "more +5 README.md",
    "man ls",
    "man -k printf",
    "diff -u README.md src/app.py",
    "diff -r src docs",
    "jq .name package.json",
    "jq -r --arg name x '.[$name]' package.json",
    "base64 README.md",
    "base64 -d -w0 README.md",
    "rm README.md",
    "rm -i -v README.md",
    "rm -- -f",
    "ls -la --color=never src",
    "cat -n README.md",
    "nice -n 10 ls",
    "taskset -c 0 ls",
    "git log -p -1",
    "git diff --text",
    "git diff --no-ext-diff",
    "git log --no-textconv -p",
]


def decide(workspace: Workspace, command: str) -> HookDecision:
    return judge_command(workspace, command, READ_ONLY_STYLE)


@pytest.fixture
def repo(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / "README.md").write_text("# repo\n")
    return Workspace(root, protected_files=[root / "baton.yaml"], private_files=[root / "baton.db"])


def test_the_battery_covers_every_modelled_program() -> None:
    assert len(set(HOSTILE)) == len(HOSTILE) >= 120
    named = {command.split()[0] for command in HOSTILE}
    assert named >= MODELLED - {"egrep", "fgrep", "nawk", "base32", "tail", "wc", "cut", "tr"}


@pytest.mark.parametrize("command", HOSTILE)
def test_a_patterned_allow_does_not_vouch_for_writes_or_programs(
    repo: Workspace, command: str
) -> None:
    decision = decide(repo, command)
    assert decision.action in ("ask", "deny"), (command, decision.reason)
    assert decision.reason


@pytest.mark.parametrize("command", FRIENDLY)
def test_reading_forms_stay_allowed(repo: Workspace, command: str) -> None:
    decision = decide(repo, command)
    assert decision.action == "allow", (command, decision.reason)


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("find . -exec id ;", "find -exec runs a program"),
        ("sed -ni 1d f", "sed -i/--in-place edits files in place"),
        ("sed -n 'w x' f", "sed command 'w' writes a file"),
        ("rg --pr=sh x", "rg --pre runs a program"),
        ("sort -ox f", "sort -o/--output writes"),
        ("tar xf a.tar", "tar -x writes the files"),
        ("awk '{print > \"f\"}'", "awk print/printf with > or >> writes a file"),
        ("xargs python3", "xargs runs python3"),
        ("less '+!id' f", "a command it runs at start"),
        ("ls --frob", "ls --frob: an option this check does not know"),
    ],
)
def test_the_approver_reads_what_made_the_rule_step_back(
    repo: Workspace, command: str, named: str
) -> None:
    decision = decide(repo, command)
    assert decision.action == "ask"
    assert named in decision.reason, decision.reason


def test_the_model_reads_the_rule_s_program_not_a_lookalike(repo: Workspace) -> None:
    # A program no model knows is vouched for in its plain form, as the rule says.
    assert allow_problem(["pytest", "-k", "x", "--tb=short"]) is None
    assert allow_problem(["find", "-delete"]) is not None
    assert allow_problem(["/usr/bin/find", "-delete"]) is None  # no rule names it: asks
    assert decide(repo, "/usr/bin/find . -delete").action == "ask"


@pytest.mark.parametrize(
    "command",
    ["awk '/error|warn/' README.md", "awk '{ print (length($0) > 80) }' README.md",
     "xargs -I{} head -1 {}"],
)  # fmt: skip
def test_harmless_forms_a_cautious_reading_asks_about(repo: Workspace, command: str) -> None:
    """Asked needlessly, by design: awk's program is read on its raw text (a `|` is taken
    for a pipe, a `>` after a print for a redirection), and xargs -I rewrites words."""
    assert decide(repo, command).action == "ask"


def test_quoted_braces_are_no_brace_expansion(repo: Workspace) -> None:
    """`'{print $1, $2}'` is awk's text, not bash's `{a,b}`: a review saw it ask."""
    assert decide(repo, "awk '{print $1, $2}' README.md").action == "allow"
    assert decide(repo, "jq '{name, version}' package.json").action == "allow"
    assert decide(repo, "cat src/{app,lib}.py").action == "ask"


def test_git_format_patch_writes_files_unless_to_standard_output(repo: Workspace) -> None:
    assert decide(repo, "git format-patch --numbered-files -1").action == "ask"
    assert decide(repo, "git format-patch --stdout -1").action == "allow"
