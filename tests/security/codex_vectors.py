"""Codex CLI's command-safety test vectors, as plain data for Baton's regression battery.

Vectors ported from Codex CLI's tests. Source: repository openai/codex
(https://github.com/openai/codex), commit 9ca99b51713066681cce211184c0ff9035496979
(main, 2026-08-19), licensed Apache-2.0 (Copyright 2025 OpenAI). That commit is the last
on main with the known-safe allowlist: the next, #39630 "Retire the untrusted approval
policy", deletes is_safe_command.rs. is_dangerous_command.rs is unchanged after it.

Tests read (paths under codex-rs/):
- shell-command/src/command_safety/is_safe_command.rs: is_known_safe_command.
- shell-command/src/command_safety/is_dangerous_command.rs: dangerous_command_match.
- shell-command/src/bash.rs: two tests that assert !is_known_safe_command.
- core/src/tools/handlers/shell_tests.rs: one test that asserts is_known_safe_command.

Verdicts: "safe" means is_known_safe_command is true; "unsafe" means it is false (not
auto-approved); "dangerous" means dangerous_command_match returns Some (the successor of
command_might_be_dangerous); "not_dangerous" means it returns None. Codex asserts nothing
else about a not_dangerous vector, which may be safe or unsafe.

Commands: an argv is joined as shlex.join would; a [bash|zsh, -lc|-c, SCRIPT] argv is
recorded as SCRIPT, the line Baton's bash tool receives. Tests that loop over shells and
flags (bash/zsh, -c/-lc) appear once per script.

Left out: Windows and PowerShell tests (windows_powershell_full_path_is_safe,
windows_git_full_path_is_not_safe, direct_powershell_words_use_windows_safelist,
non_windows_safe_classification_does_not_spawn_repo_powershell_path,
direct_powershell_words_return_other_match_on_windows, and those in
windows_safe_commands.rs, windows_dangerous_commands.rs, powershell_parser.rs and
powershell_tree_sitter_tests.rs), the PowerShell half of the shell_tests.rs test, and
bash.rs's parser-only tests (they assert parse results, not verdicts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["safe", "unsafe", "dangerous", "not_dangerous"]


@dataclass(frozen=True, slots=True)
class CodexVector:
    """One command from a Codex test and the verdict that test asserts."""

    command: str  # one bash command line (argv joined with shlex.join, or the -lc script)
    verdict: Verdict
    test: str  # the Codex test function name


SAFE: tuple[CodexVector, ...] = (
    # is_known_safe_command(...) is true.
    # known_safe_examples
    CodexVector("ls", "safe", "known_safe_examples"),
    CodexVector("base64", "safe", "known_safe_examples"),
    CodexVector("sed -n 1,5p file.txt", "safe", "known_safe_examples"),
    CodexVector("nl -nrz Cargo.toml", "safe", "known_safe_examples"),
    CodexVector("find . -name file.txt", "safe", "known_safe_examples"),
    # Linux only: on other systems Codex asserts this one is unsafe.
    CodexVector("numfmt 1000", "safe", "known_safe_examples"),
    # Linux only: on other systems Codex asserts this one is unsafe.
    CodexVector("tac Cargo.toml", "safe", "known_safe_examples"),
    # zsh_lc_safe_command_sequence
    CodexVector("ls", "safe", "zsh_lc_safe_command_sequence"),
    # bash_lc_safe_examples
    CodexVector("ls", "safe", "bash_lc_safe_examples"),
    CodexVector("ls -1", "safe", "bash_lc_safe_examples"),
    CodexVector('grep -R "Cargo.toml" -n', "safe", "bash_lc_safe_examples"),
    CodexVector("sed -n 1,5p file.txt", "safe", "bash_lc_safe_examples"),
    CodexVector("sed -n '1,5p' file.txt", "safe", "bash_lc_safe_examples"),
    CodexVector("find . -name file.txt", "safe", "bash_lc_safe_examples"),
    # bash_lc_safe_examples_with_operators
    CodexVector('grep -R "Cargo.toml" -n || true', "safe", "bash_lc_safe_examples_with_operators"),
    CodexVector("ls && pwd", "safe", "bash_lc_safe_examples_with_operators"),
    CodexVector("echo 'hi' ; ls", "safe", "bash_lc_safe_examples_with_operators"),
    CodexVector("ls | wc -l", "safe", "bash_lc_safe_examples_with_operators"),
    # ripgrep_rules
    CodexVector("rg Cargo.toml -n", "safe", "ripgrep_rules"),
    # commands_generated_by_shell_command_handler_can_be_matched_by_is_known_safe_command
    CodexVector(
        "ls -la",
        "safe",
        "commands_generated_by_shell_command_handler_can_be_matched_by_is_known_safe_command",
    ),
)

UNSAFE: tuple[CodexVector, ...] = (
    # is_known_safe_command(...) is false: Codex does not auto-approve these.
    # git_commands_are_not_known_safe
    CodexVector("git status --short", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("git log -p -1", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("git diff", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("git show HEAD", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("git branch", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("git branch --show-current", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("git --version", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("/usr/bin/git status", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("git status", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("cd nested && git status", "unsafe", "git_commands_are_not_known_safe"),
    CodexVector("git diff | head -20", "unsafe", "git_commands_are_not_known_safe"),
    # cargo_check_is_not_safe
    CodexVector("cargo check", "unsafe", "cargo_check_is_not_safe"),
    # unknown_or_partial
    CodexVector("foo", "unsafe", "unknown_or_partial"),
    CodexVector("git fetch", "unsafe", "unknown_or_partial"),
    CodexVector("sed -n xp file.txt", "unsafe", "unknown_or_partial"),
    CodexVector("find . -name file.txt -exec rm '{}' ';'", "unsafe", "unknown_or_partial"),
    CodexVector("find . -name '*.py' -execdir python3 '{}' ';'", "unsafe", "unknown_or_partial"),
    CodexVector("find . -name file.txt -ok rm '{}' ';'", "unsafe", "unknown_or_partial"),
    CodexVector("find . -name '*.py' -okdir python3 '{}' ';'", "unsafe", "unknown_or_partial"),
    CodexVector("find . -delete -name file.txt", "unsafe", "unknown_or_partial"),
    CodexVector("find . -fls /etc/passwd", "unsafe", "unknown_or_partial"),
    CodexVector("find . -fprint /etc/passwd", "unsafe", "unknown_or_partial"),
    CodexVector("find . -fprint0 /etc/passwd", "unsafe", "unknown_or_partial"),
    CodexVector("find . -fprintf /root/suid.txt '%#m %u %p\n'", "unsafe", "unknown_or_partial"),
    # base64_output_options_are_unsafe
    CodexVector("base64 -o out.bin", "unsafe", "base64_output_options_are_unsafe"),
    CodexVector("base64 --output out.bin", "unsafe", "base64_output_options_are_unsafe"),
    CodexVector("base64 --output=out.bin", "unsafe", "base64_output_options_are_unsafe"),
    CodexVector("base64 -ob64.txt", "unsafe", "base64_output_options_are_unsafe"),
    # bash_lc_unsafe_examples
    CodexVector("bash -lc git status", "unsafe", "bash_lc_unsafe_examples"),
    CodexVector("'git status'", "unsafe", "bash_lc_unsafe_examples"),
    CodexVector("find . -name file.txt -delete", "unsafe", "bash_lc_unsafe_examples"),
    CodexVector("ls && rm -rf /", "unsafe", "bash_lc_unsafe_examples"),
    CodexVector("(ls)", "unsafe", "bash_lc_unsafe_examples"),
    CodexVector("ls || (pwd && echo hi)", "unsafe", "bash_lc_unsafe_examples"),
    CodexVector("ls > out.txt", "unsafe", "bash_lc_unsafe_examples"),
    # ripgrep_rules
    CodexVector("rg --search-zip files", "unsafe", "ripgrep_rules"),
    CodexVector("rg -z files", "unsafe", "ripgrep_rules"),
    CodexVector("rg --pre pwned files", "unsafe", "ripgrep_rules"),
    CodexVector("rg --pre=pwned files", "unsafe", "ripgrep_rules"),
    CodexVector("rg --hostname-bin pwned files", "unsafe", "ripgrep_rules"),
    CodexVector("rg --hostname-bin=pwned files", "unsafe", "ripgrep_rules"),
    # rejects_runtime_expansion_in_plain_words
    CodexVector("find . -{delete,print}", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector(
        "rg --pre{=,=sh} pattern payload.sh", "unsafe", "rejects_runtime_expansion_in_plain_words"
    ),
    CodexVector("find . -del*", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("find . -delet?", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("find . -delet[e]", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("find . -de\\lete", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("echo ~", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("echo ~HOME", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("echo HEAD~1", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("echo HEAD^", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("echo file~", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("echo =sh", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("echo foo^bar", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("echo foo#bar", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    CodexVector("l* -l", "unsafe", "rejects_runtime_expansion_in_plain_words"),
    # rejects_double_quoted_escapes
    CodexVector('echo "\\$HOME\\`\\"\\\\\\n"', "unsafe", "rejects_double_quoted_escapes"),
    CodexVector('find . "-de\\\nlete"', "unsafe", "rejects_double_quoted_escapes"),
    CodexVector('echo "\\\\"', "unsafe", "rejects_double_quoted_escapes"),
)

DANGEROUS: tuple[CodexVector, ...] = (
    # dangerous_command_match(...) is Some (ForcedRm unless noted).
    # rm_rf_is_dangerous
    CodexVector("rm -rf /", "dangerous", "rm_rf_is_dangerous"),
    # rm_f_is_dangerous
    CodexVector("rm -f /", "dangerous", "rm_f_is_dangerous"),
    # forced_rm_variants_are_dangerous
    CodexVector("/bin/rm -fr /tmp/example", "dangerous", "forced_rm_variants_are_dangerous"),
    CodexVector("rm -r -f /tmp/example", "dangerous", "forced_rm_variants_are_dangerous"),
    CodexVector("rm --force /tmp/example", "dangerous", "forced_rm_variants_are_dangerous"),
    CodexVector("rm /tmp/example -f", "dangerous", "forced_rm_variants_are_dangerous"),
    CodexVector("sudo rm -rf /tmp/example", "dangerous", "forced_rm_variants_are_dangerous"),
    CodexVector(
        "env TARGET=/tmp/example rm -rf /tmp/example",
        "dangerous",
        "forced_rm_variants_are_dangerous",
    ),
    # deeply_nested_command_wrappers_fail_closed
    # 8 `env` wrappers: ForcedRm.
    CodexVector(
        "env env env env env env env env rm -rf /tmp/example",
        "dangerous",
        "deeply_nested_command_wrappers_fail_closed",
    ),
    # 9 wrappers, past MAX_DANGEROUS_COMMAND_WRAPPER_DEPTH (8): Other.
    CodexVector(
        "env env env env env env env env env rm -rf /tmp/example",
        "dangerous",
        "deeply_nested_command_wrappers_fail_closed",
    ),
    # forced_rm_in_complex_shell_syntax_is_dangerous
    CodexVector(
        "printf x | rm -rf /tmp/example",
        "dangerous",
        "forced_rm_in_complex_shell_syntax_is_dangerous",
    ),
    CodexVector(
        "if test -d /tmp/example; then rm --force /tmp/example; fi",
        "dangerous",
        "forced_rm_in_complex_shell_syntax_is_dangerous",
    ),
    CodexVector(
        'rm -rf "$TARGET" >/dev/null', "dangerous", "forced_rm_in_complex_shell_syntax_is_dangerous"
    ),
    CodexVector(
        'for target in /tmp/a /tmp/b; do rm -r -f "$target"; done',
        "dangerous",
        "forced_rm_in_complex_shell_syntax_is_dangerous",
    ),
    CodexVector(
        'echo "$(rm -rf /tmp/example)"',
        "dangerous",
        "forced_rm_in_complex_shell_syntax_is_dangerous",
    ),
    CodexVector(
        "bash -c 'rm -rf /tmp/example'",
        "dangerous",
        "forced_rm_in_complex_shell_syntax_is_dangerous",
    ),
    CodexVector(
        "trap 'rm -rf /tmp/example' EXIT",
        "dangerous",
        "forced_rm_in_complex_shell_syntax_is_dangerous",
    ),
    CodexVector(
        (
            "for a in '-C5a25KeRr' '--' '--json' '--bogus'; do HOME=$(mktemp"
            " -d) MDE_URL=http://127.0.0.1:1 MDE_TOKEN=x node cli/mde.cjs ls"
            ' "$a" >/tmp/mde-review-out 2>/tmp/mde-review-err; code=$?;'
            " printf '%s\\t%s\\t%s\\n' \"$a\" \"$code\" \"$(tr '\\n' ' '"
            ' </tmp/mde-review-err)"; rm -rf "$HOME"; done'
        ),
        "dangerous",
        "forced_rm_in_complex_shell_syntax_is_dangerous",
    ),
)

NOT_DANGEROUS: tuple[CodexVector, ...] = (
    # dangerous_command_match(...) is None; Codex's tests say nothing more about them.
    # non_forced_or_non_literal_rm_is_not_dangerous
    CodexVector(
        "rm -r /tmp/example", "not_dangerous", "non_forced_or_non_literal_rm_is_not_dangerous"
    ),
    CodexVector("rm -- -f", "not_dangerous", "non_forced_or_non_literal_rm_is_not_dangerous"),
    CodexVector(
        "echo 'rm -rf /tmp/example'",
        "not_dangerous",
        "non_forced_or_non_literal_rm_is_not_dangerous",
    ),
    CodexVector(
        "cmd=rm; $cmd -rf /tmp/example",
        "not_dangerous",
        "non_forced_or_non_literal_rm_is_not_dangerous",
    ),
    CodexVector(
        "if then rm -rf /tmp/example",
        "not_dangerous",
        "non_forced_or_non_literal_rm_is_not_dangerous",
    ),
    CodexVector(
        "env TARGET=/tmp/example rm -r /tmp/example",
        "not_dangerous",
        "non_forced_or_non_literal_rm_is_not_dangerous",
    ),
    CodexVector(
        "trap 'echo rm -rf /tmp/example' EXIT",
        "not_dangerous",
        "non_forced_or_non_literal_rm_is_not_dangerous",
    ),
)
