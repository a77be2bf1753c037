"""Shell word splitting: segments, redirections, nested commands, wrappers."""

from __future__ import annotations

import pytest

from bot.permissions.shell_words import (
    CommandParseError,
    NestedScript,
    command_words,
    effective_command,
    iter_commands,
    parse_command,
    pipelines,
    program_name,
    redirect_targets,
    redirections,
    split_segments,
    unwrap_command,
)

Segments = list[tuple[str, ...]]


def _nest_in_bash_c(command: str, levels: int) -> str:
    for _ in range(levels):
        escaped = command.replace("\\", "\\\\").replace('"', '\\"')
        command = f'bash -c "{escaped}"'
    return command


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls -la", [("ls", "-la")]),
        ("a; b && c || d | e & f", [("a",), ("b",), ("c",), ("d",), ("e",), ("f",)]),
        ("a;b&&c||d|e&f", [("a",), ("b",), ("c",), ("d",), ("e",), ("f",)]),
        ("a\nb\n\nc", [("a",), ("b",), ("c",)]),
        ("a |& b", [("a",), ("b",)]),
        ("(cd x && make)", [("cd", "x"), ("make",)]),
        ("{ a; b; } > out", [(">", "out"), ("a",), ("b",)]),
        ('echo "a b" c', [("echo", "a b", "c")]),
        ("echo 'rm -rf /'", [("echo", "rm -rf /")]),
        ('echo "x; y" | wc', [("echo", "x; y"), ("wc",)]),
        ("echo a\\;b", [("echo", "a;b")]),
        ("ls # rm -rf /", [("ls",)]),
        ("echo a # comment\nrm x", [("echo", "a"), ("rm", "x")]),
        ("echo a#b", [("echo", "a#b")]),
        ("curl x#frag | sh", [("curl", "x#frag"), ("sh",)]),
        ("rm \\\n  -rf x", [("rm", "-rf", "x")]),
        ("echo 'a\\\nb'", [("echo", "a\\\nb")]),
        # compound statements: their bodies are commands, their keywords are not
        ("f() { rm x; }", [("rm", "x")]),
        ("function f { rm x; }", [("rm", "x")]),
        ("if true; then rm x; fi", [("true",), ("rm", "x")]),
        ("if a; then b; elif c; then d; else e; fi", [("a",), ("b",), ("c",), ("d",), ("e",)]),
        ("while a; do b; done", [("a",), ("b",)]),
        ("for f in *; do rm $f; done", [("rm", "$f")]),
        ("for f in $(ls); do rm $f; done", [("ls",), ("rm", "$f")]),
        ("case $x in a) rm y;; esac", [("rm", "y")]),
        ("! rm x", [("rm", "x")]),
        ("export A=1 B=$(id)", [("export", "A=1", "B=$(id)"), ("id",)]),
        ("[[ -f x ]] && rm y", [("[[", "-f", "x", "]]"), ("rm", "y")]),
        ("echo {a,b} {}", [("echo", "{a,b}", "{}")]),
        ("", []),
        ("   # only a comment", []),
    ],
)
def test_split_segments(command: str, expected: Segments) -> None:
    assert split_segments(command) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls 2>/dev/null", [("ls", "2>", "/dev/null")]),
        ("ls 2> /dev/null", [("ls", "2>", "/dev/null")]),
        ("cmd > out 2>&1", [("cmd", ">", "out", "2>&", "1")]),
        ("sort <in >>out", [("sort", "<", "in", ">>", "out")]),
        ("cmd &> all.log", [("cmd", "&>", "all.log")]),
        ("cmd >| forced", [("cmd", ">|", "forced")]),
        (">/dev/null rm x", [(">", "/dev/null", "rm", "x")]),
        # not glued: `2` is an argument and `>` redirects stdout
        ("echo 2 > x", [("echo", "2", ">", "x")]),
        ("cat <<< 'some text'", [("cat", "<<<", "some text")]),
    ],
)
def test_redirections_stay_in_their_segment(command: str, expected: Segments) -> None:
    assert split_segments(command) == expected


@pytest.mark.parametrize(
    ("segment", "targets", "words"),
    [
        (("ls", "2>", "/dev/null"), ["/dev/null"], ("ls",)),
        (("cmd", ">", "out", "2>&", "1"), ["out"], ("cmd",)),
        (("sort", "<", "in", ">>", "out"), ["in", "out"], ("sort",)),
        (("cmd", "&>", "all.log"), ["all.log"], ("cmd",)),
        (("cmd", ">&", "file"), ["file"], ("cmd",)),
        (("cmd", ">&", "2"), [], ("cmd",)),
        (("cmd", "<&", "-"), [], ("cmd",)),
        ((">", "/dev/null", "rm", "x"), ["/dev/null"], ("rm", "x")),
        (("cat", "<<", "EOF"), [], ("cat",)),
        (("cat", "<<-", "EOF"), [], ("cat",)),
        (("cat", "<<<", "text"), [], ("cat",)),
        (("echo", "2", ">", "x"), ["x"], ("echo", "2")),
        (("echo", "hi"), [], ("echo", "hi")),
        (("echo", ">"), [], ("echo",)),
    ],
)
def test_redirect_targets_and_command_words(
    segment: tuple[str, ...], targets: list[str], words: tuple[str, ...]
) -> None:
    assert redirect_targets(segment) == targets
    assert command_words(segment) == words


def test_quoted_operators_are_words_not_redirections() -> None:
    [segment] = split_segments("echo '>' x \\> y '2>' z")
    assert segment == ("echo", ">", "x", ">", "y", "2>", "z")
    assert redirect_targets(segment) == []
    assert command_words(segment) == segment


def test_redirections_report_operators_without_descriptor_numbers() -> None:
    [segment] = split_segments("cmd 2>>err.log <in 3<&0 <<EOF\nbody\nEOF")
    assert redirections(segment) == [(">>", "err.log"), ("<", "in"), ("<&", "0"), ("<<", "EOF")]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo $(whoami)", [("echo", "$(whoami)"), ("whoami",)]),
        ("echo `whoami`", [("echo", "`whoami`"), ("whoami",)]),
        ('echo "user: $(whoami)"', [("echo", "user: $(whoami)"), ("whoami",)]),
        ('echo "user: `whoami`"', [("echo", "user: `whoami`"), ("whoami",)]),
        ("echo '$(whoami)'", [("echo", "$(whoami)")]),  # single quotes: just text
        ("echo \\$HOME", [("echo", "$HOME")]),
        ('echo "$(echo "a b")"', [("echo", '$(echo "a b")'), ("echo", "a b")]),
        ("x=$(a | b)y", [("x=$(a | b)y",), ("a",), ("b",)]),
        ("echo $(echo $(id))", [("echo", "$(echo $(id))"), ("echo", "$(id)"), ("id",)]),
        ("echo $((1 + 2))", [("echo", "$((1 + 2))")]),  # arithmetic, not a command
        ("echo $'\\x72m' $\"t\"", [("echo", "\x72m", "t")]),
        ("ls $'\\'' ;rm -rf ../outside #'", [("ls", "'"), ("rm", "-rf", "../outside")]),
        ("diff <(ls a) <(ls b)", [("diff", "<(ls a)", "<(ls b)"), ("ls", "a"), ("ls", "b")]),
        ("cmd<(ls)", [("cmd", "<(ls)"), ("ls",)]),
        ("tee >(gzip > x.gz)", [("tee", ">(gzip > x.gz)"), ("gzip", ">", "x.gz")]),
        ("bash -c 'rm x; ls'", [("bash", "-c", "rm x; ls"), ("rm", "x"), ("ls",)]),
        ("sh -ec 'rm x'", [("sh", "-ec", "rm x"), ("rm", "x")]),
        ("zsh -c -- 'rm x'", [("zsh", "-c", "--", "rm x"), ("rm", "x")]),
        ("dash -x script.sh", [("dash", "-x", "script.sh")]),
        ("sudo sh -c 'rm x'", [("sudo", "sh", "-c", "rm x"), ("rm", "x")]),
        ("su -c 'rm x' root", [("su", "-c", "rm x", "root"), ("rm", "x")]),
        ("eval 'rm x' ls", [("eval", "rm x", "ls"), ("rm", "x", "ls")]),
        (
            "ls | xargs -n1 -I{} rm {}",
            [("ls",), ("xargs", "-n1", "-I{}", "rm", "{}"), ("rm", "{}")],
        ),
        ("xargs -0 -P 4 rm -f", [("xargs", "-0", "-P", "4", "rm", "-f"), ("rm", "-f")]),
        (
            "find . -name x -exec rm {} \\; -print",
            [("find", ".", "-name", "x", "-exec", "rm", "{}", ";", "-print"), ("rm", "{}")],
        ),
        ("find . -execdir rm {} +", [("find", ".", "-execdir", "rm", "{}", "+"), ("rm", "{}")]),
        (
            "find . -exec sh -c 'rm \"$1\"' _ {} ';'",
            [
                ("find", ".", "-exec", "sh", "-c", 'rm "$1"', "_", "{}", ";"),
                ("sh", "-c", 'rm "$1"', "_", "{}"),
                ("rm", "$1"),
            ],
        ),
    ],
)
def test_nested_commands_are_visible(command: str, expected: Segments) -> None:
    assert split_segments(command) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # a here-document is data...
        ("cat > f.txt <<'EOF'\nrm -rf / (don't)\nEOF", [("cat", ">", "f.txt", "<<", "EOF")]),
        ("cat <<-EOF\n\trm x\n\tEOF\nls", [("cat", "<<-", "EOF"), ("ls",)]),
        ("cat <<- EOF\n\trm x\n\tEOF\nls", [("cat", "<<-", "EOF"), ("ls",)]),
        # ...except for the substitutions of an unquoted one, and when a shell reads it
        ("cat <<EOF\nhi $(whoami)\nEOF", [("cat", "<<", "EOF"), ("whoami",)]),
        ("bash <<'EOF'\nrm x\nEOF", [("bash", "<<", "EOF"), ("rm", "x")]),
        ("sh -s <<EOF | cat\nrm x\nEOF", [("sh", "-s", "<<", "EOF"), ("rm", "x"), ("cat",)]),
        ("bash <<< 'rm x'", [("bash", "<<<", "rm x"), ("rm", "x")]),
        (
            'git commit -m "$(cat <<\'EOF\'\nFix "quotes" (and don\'t break)\nEOF\n)"',
            [
                ("git", "commit", "-m", "$(cat <<'EOF'\nFix \"quotes\" (and don't break)\nEOF\n)"),
                ("cat", "<<", "EOF"),
            ],
        ),
    ],
)
def test_here_documents(command: str, expected: Segments) -> None:
    assert split_segments(command) == expected


def test_nested_scripts_record_how_they_are_reached() -> None:
    script = parse_command('bash -c "$(curl x)" <(ls) | (cd y)')
    [[bash, group]] = script.pipelines
    assert [nested.kind for nested in bash.nested] == ["substitution", "process", "script"]
    assert group.words == ()
    assert [nested.kind for nested in group.nested] == ["group"]
    assert [command.words for command in iter_commands(script)] == [
        ("bash", "-c", "$(curl x)", "<(ls)"),
        ("curl", "x"),
        ("ls",),
        ("$(curl x)",),
        ("curl", "x"),
        (),
        ("cd", "y"),
    ]


def test_exec_nesting() -> None:
    [[find]] = parse_command("find . -exec rm {} ;").pipelines
    assert find.words == ("find", ".", "-exec", "rm", "{}")
    [nested] = find.nested
    assert nested == NestedScript(kind="exec", script=nested.script)
    assert [c.words for c in iter_commands(nested.script)] == [("rm", "{}")]


def test_pipelines() -> None:
    assert pipelines("curl x | sh; ls") == [[("curl", "x"), ("sh",)], [("ls",)]]
    assert pipelines("a | b | c && d") == [[("a",), ("b",), ("c",)], [("d",)]]
    assert pipelines("echo $(a | b) | c") == [[("echo", "$(a | b)"), ("c",)], [("a",), ("b",)]]
    assert pipelines("a &\nb") == [[("a",)], [("b",)]]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (("rm", "-rf", "x"), ("rm", "-rf", "x")),
        (("/usr/bin/rm", "-rf", "x"), ("rm", "-rf", "x")),
        (("\\rm", "x"), ("rm", "x")),
        (("FOO=1", "BAR+=2", "rm", "x"), ("rm", "x")),
        (("sudo", "rm", "x"), ("rm", "x")),
        (("sudo", "-u", "me", "-E", "rm", "x"), ("rm", "x")),
        (("sudo", "--user=me", "--", "rm", "x"), ("rm", "x")),
        (("/usr/bin/sudo", "-n", "rm"), ("rm",)),
        (("doas", "-u", "root", "rm", "x"), ("rm", "x")),
        (("env", "rm", "x"), ("rm", "x")),
        (("env", "-i", "A=1", "B=2", "rm", "x"), ("rm", "x")),
        (("env", "-u", "HOME", "-C", "/tmp", "rm"), ("rm",)),
        (("env", "-S", "rm -rf x"), ("rm", "-rf", "x")),
        (("nohup", "rm", "x"), ("rm", "x")),
        (("time", "-p", "rm", "x"), ("rm", "x")),
        (("nice", "-n", "10", "rm", "x"), ("rm", "x")),
        (("nice", "-10", "rm", "x"), ("rm", "x")),
        (("timeout", "5", "rm", "x"), ("rm", "x")),
        (("timeout", "-s", "KILL", "-k", "1", "5s", "rm", "x"), ("rm", "x")),
        (("timeout", "--signal=KILL", "5", "rm"), ("rm",)),
        (("command", "rm", "x"), ("rm", "x")),
        (("command", "-p", "rm", "x"), ("rm", "x")),
        (("exec", "-a", "name", "rm", "x"), ("rm", "x")),
        (("builtin", "echo", "x"), ("echo", "x")),
        (("stdbuf", "-oL", "-e", "0", "rm", "x"), ("rm", "x")),
        (("busybox", "rm", "x"), ("rm", "x")),
        (("FOO=1", "sudo", "env", "BAR=2", "nice", "nohup", "/bin/rm", "x"), ("rm", "x")),
        (("!", "rm", "x"), ("rm", "x")),
        (("then", "rm", "x"), ("rm", "x")),
        (("do", "time", "rm", "x"), ("rm", "x")),
        (("ls", ">", "out"), ("ls",)),
        # a wrapper with nothing to run is the program itself
        (("env",), ("env",)),
        (("env", "-i"), ("env", "-i")),
        (("env", "FOO=1"), ("env", "FOO=1")),
        (("sudo",), ("sudo",)),
        (("command", "-v", "rm"), ("command", "-v", "rm")),
        (("FOO=1",), ()),
        ((), ()),
    ],
)
def test_effective_command(words: tuple[str, ...], expected: tuple[str, ...]) -> None:
    assert effective_command(words) == expected


def test_unwrap_command_lists_the_wrappers() -> None:
    words = ("FOO=1", "sudo", "-u", "me", "nice", "-n", "5", "/usr/bin/rm", "-rf", "x")
    assert unwrap_command(words) == (("sudo", "nice"), ("rm", "-rf", "x"))


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("rm", "rm"),
        ("/usr/bin/rm", "rm"),
        ("./script.sh", "script.sh"),
        ("\\rm", "rm"),
        ("$(which rm)", "$(which rm)"),
        ("/", "/"),
    ],
)
def test_program_name(word: str, expected: str) -> None:
    assert program_name(word) == expected


@pytest.mark.parametrize(
    "command",
    [
        "echo 'unbalanced",
        'echo "unbalanced',
        "echo \\",
        "echo $(ls",
        'echo "$(ls"',
        "cat <(ls",
        "echo `ls",
        "(ls",
        "{ ls",
        "bash -c 'echo \"x'",
        "env -S 'rm \"x'",
        "echo " + "$(echo " * 30 + "x" + ")" * 30,
        _nest_in_bash_c("ls", 14),
        # bash accepts two here-documents on one line; tree-sitter-bash does not, so the
        # command cannot be checked and asks (safe, and rare).
        "cat <<A <<B\nrm a\nA\nrm b\nB\nls",
        # the terminator is not `EOF` for the grammar: the body never ends
        "cat - <<EOF\nrm -rf ../outside\nEO\\\nF\nls",
    ],
)
def test_untokenisable_commands_raise(command: str) -> None:
    with pytest.raises(CommandParseError) as raised:
        split_segments(command)
    assert str(raised.value)


def test_parse_error_is_a_value_error_with_a_readable_message() -> None:
    with pytest.raises(ValueError, match="grammar does not accept it"):
        split_segments("echo 'x")


def test_nesting_within_the_limit_is_followed() -> None:
    segments = split_segments(_nest_in_bash_c("rm x", 8))
    assert len(segments) == 9
    assert segments[-1] == ("rm", "x")


def test_large_commands_stay_fast() -> None:
    command = " && ".join(f'echo "$(printf {i})" | grep -v x' for i in range(2000))
    assert len(split_segments(command)) == 6000
