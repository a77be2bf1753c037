"""Option tables of the programs whose options alone say what an allow rule may vouch for.

For each program: every option its manual lists (so an option it does not know is
recognised as such and never vouched for), and the ones that make it write, run a
program or read its instructions from elsewhere, with the sentence an approver reads.
The tables follow GNU coreutils 9, grep 3, diffutils 3, ripgrep 14, jq 1.7, less 6xx,
util-linux more and man-db 2.11.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from bot.permissions.options import OptionTable, ParsedArgs, table

__all__ = ["SIMPLE_PROGRAMS", "SimpleProgram"]


@dataclass(frozen=True, slots=True)
class SimpleProgram:
    """A program judged by its options (and, for a few, by the shape of its operands).

    Attributes:
        options: Its option table.
        unsafe: Options (canonical names) that make a call more than a read, each with
            why, as the approver reads it after the program's name.
        operands: A check on the parsed call for what options cannot show (``uniq IN
            OUT`` writes OUT); None when operands are only read.
        plus_words: Whether ``+...`` operands are instructions (``less +!cmd``): each
            must pass :func:`_harmless_plus`.
    """

    options: OptionTable
    unsafe: Mapping[str, str] = field(default_factory=dict)
    operands: Callable[[ParsedArgs], str | None] | None = None
    plus_words: bool = False


def _uniq_operands(parsed: ParsedArgs) -> str | None:
    if len(parsed.operands) > 1:
        return f"writes its output to the file {parsed.operands[1]!r}"
    return None


_LS = table(
    flags="aAbBcCdDfFgGhHiklLmnNopqQrRsStuUvxXZ1",
    values="ITw",
    longs="all almost-all author escape ignore-backups directory dired file-type full-time "
    "group-directories-first no-group human-readable si dereference-command-line "
    "dereference-command-line-symlink-to-dir inode kibibytes dereference literal "
    "numeric-uid-gid hide-control-chars show-control-chars quote-name recursive reverse "
    "size context zero help version",
    long_values="block-size format hide ignore indicator-style quoting-style sort tabsize "
    "time time-style width",
    long_optional="color colour classify hyperlink",
    names={
        "a": "all",
        "A": "almost-all",
        "b": "escape",
        "B": "ignore-backups",
        "d": "directory",
        "D": "dired",
        "F": "classify",
        "G": "no-group",
        "h": "human-readable",
        "H": "dereference-command-line",
        "i": "inode",
        "k": "kibibytes",
        "L": "dereference",
        "N": "literal",
        "n": "numeric-uid-gid",
        "q": "hide-control-chars",
        "Q": "quote-name",
        "R": "recursive",
        "r": "reverse",
        "s": "size",
        "Z": "context",
        "I": "ignore",
        "T": "tabsize",
        "w": "width",
    },
)

_CAT = table(
    flags="AbeEnstTuv",
    longs="show-all number-nonblank show-ends number squeeze-blank show-tabs "
    "show-nonprinting help version",
)

_HEAD = table(
    flags="qvz",
    values="cn",
    longs="quiet silent verbose zero-terminated help version",
    long_values="bytes lines",
    names={"c": "bytes", "n": "lines", "q": "quiet", "v": "verbose", "z": "zero-terminated"},
    numbers=True,
)

_TAIL = table(
    flags="fFqvz",
    values="cns",
    longs="quiet silent verbose zero-terminated retry help version",
    long_values="bytes lines max-unchanged-stats pid sleep-interval",
    long_optional="follow",
    names={
        "c": "bytes",
        "n": "lines",
        "s": "sleep-interval",
        "f": "follow",
        "q": "quiet",
        "v": "verbose",
        "z": "zero-terminated",
    },
    numbers=True,
)

_WC = table(
    flags="cmlLw",
    longs="bytes chars lines max-line-length words help version",
    long_values="files0-from total",
)

_SORT = table(
    flags="bdfghiMnRrVcCmsuz",
    values="koStT",
    longs="ignore-leading-blanks dictionary-order ignore-case general-numeric-sort "
    "ignore-nonprinting month-sort human-numeric-sort numeric-sort random-sort reverse "
    "version-sort merge stable unique zero-terminated debug help version",
    long_values="key output buffer-size field-separator temporary-directory compress-program "
    "files0-from batch-size parallel random-source sort",
    long_optional="check",
    names={
        "c": "check",
        "C": "check",
        "k": "key",
        "o": "output",
        "S": "buffer-size",
        "t": "field-separator",
        "T": "temporary-directory",
    },
)

_UNIQ = table(
    flags="cdDiuz",
    values="fsw",
    longs="count repeated ignore-case unique zero-terminated help version",
    long_values="skip-fields skip-chars check-chars",
    long_optional="all-repeated group",
    numbers=True,
)

_CUT = table(
    flags="nsz",
    values="bcdf",
    longs="complement only-delimited zero-terminated help version",
    long_values="bytes characters delimiter fields output-delimiter",
)

_TR = table(flags="cCdst", longs="complement delete squeeze-repeats truncate-set1 help version")

_DIFF = table(
    flags="qscuenylprNiEZbwBatTdvpP",
    values="CUWFxXSID",
    longs="normal brief report-identical-files ed rcs side-by-side left-column "
    "suppress-common-lines show-c-function expand-tabs initial-tab suppress-blank-empty "
    "paginate recursive no-dereference new-file unidirectional-new-file "
    "ignore-file-name-case no-ignore-file-name-case ignore-case ignore-tab-expansion "
    "ignore-trailing-space ignore-space-change ignore-all-space ignore-blank-lines text "
    "strip-trailing-cr minimal speed-large-files help version",
    long_values="width show-function-line label tabsize exclude exclude-from starting-file "
    "from-file to-file ignore-matching-lines ifdef old-group-format new-group-format "
    "unchanged-group-format changed-group-format line-format old-line-format "
    "new-line-format unchanged-line-format horizon-lines palette",
    long_optional="context unified color",
    numbers=True,
)

_JQ = table(
    flags="cnesrjaSCMRhV",
    values="fL",
    longs="seq stream stream-errors slurp raw-input null-input compact-output tab "
    "ascii-output unbuffered sort-keys color-output monochrome-output raw-output "
    "raw-output0 join-output exit-status args jsonargs help version build-configuration",
    long_values="indent from-file",
    long_pairs="arg argjson slurpfile rawfile",
    abbreviations=False,
)

_GREP = table(
    flags="EFGPiywxzsvVcLloqbHhnTZaIrRU",
    values="efmABCdD",
    longs="extended-regexp fixed-strings basic-regexp perl-regexp ignore-case "
    "no-ignore-case word-regexp line-regexp null-data no-messages invert-match version "
    "help count files-without-match files-with-matches only-matching quiet silent "
    "byte-offset with-filename no-filename line-number line-buffered initial-tab null text "
    "recursive dereference-recursive binary no-group-separator",
    long_values="regexp file max-count label after-context before-context context "
    "group-separator binary-files devices directories exclude exclude-from exclude-dir "
    "include",
    long_optional="color colour",
    numbers=True,
)

_RG = table(
    flags="abcFHhIiLlNnopqSsUuVvwxz0.P",
    values="ABCeEfgjmMrtTd",
    longs="binary no-binary block-buffered no-block-buffered byte-offset case-sensitive "
    "column no-column count count-matches crlf no-crlf debug trace files "
    "files-with-matches files-without-match fixed-strings no-fixed-strings follow no-follow "
    "glob-case-insensitive no-glob-case-insensitive heading no-heading help hidden "
    "no-hidden ignore-case ignore-file-case-insensitive no-ignore-file-case-insensitive "
    "include-zero no-include-zero invert-match json no-json line-buffered "
    "no-line-buffered line-number no-line-number line-regexp max-columns-preview "
    "no-max-columns-preview mmap no-mmap multiline no-multiline multiline-dotall "
    "no-multiline-dotall no-config ignore no-ignore ignore-dot no-ignore-dot ignore-exclude "
    "no-ignore-exclude ignore-files no-ignore-files ignore-global no-ignore-global "
    "ignore-messages no-ignore-messages ignore-parent no-ignore-parent ignore-vcs "
    "no-ignore-vcs messages no-messages require-git no-require-git unicode no-unicode null "
    "null-data one-file-system no-one-file-system only-matching passthru passthrough pcre2 "
    "no-pcre2 pcre2-version pretty quiet search-zip no-search-zip smart-case sort-files "
    "no-sort-files stats no-stats stop-on-nonmatch text no-text trim no-trim type-list "
    "unrestricted vimgrep with-filename no-filename word-regexp auto-hybrid-regex "
    "no-auto-hybrid-regex no-pre no-context-separator no-encoding version",
    long_values="after-context before-context context context-separator colors color "
    "dfa-size-limit encoding engine field-context-separator field-match-separator file "
    "generate glob hostname-bin hyperlink-format iglob ignore-file max-columns max-count "
    "max-depth maxdepth max-filesize path-separator pre pre-glob regex-size-limit regexp "
    "replace sort sortr threads type type-not type-add type-clear",
    names={
        "z": "search-zip",
        "e": "regexp",
        "f": "file",
        "g": "glob",
        "r": "replace",
        "t": "type",
        "T": "type-not",
    },
)

_LESS = table(
    flags="?aABcCdeEfFgGiIJKLmMnNqQrRsSuUVwWX~",
    values="bhjkoOpPtTxyz#D",
    longs="help search-skip-screen SEARCH-SKIP-SCREEN auto-buffers clear-screen "
    "CLEAR-SCREEN dumb quit-at-eof QUIT-AT-EOF force quit-if-one-screen hilite-search "
    "HILITE-SEARCH ignore-case IGNORE-CASE status-column no-keypad long-prompt LONG-PROMPT "
    "line-numbers LINE-NUMBERS quiet silent QUIET SILENT raw-control-chars "
    "RAW-CONTROL-CHARS squeeze-blank-lines chop-long-lines underline-special "
    "UNDERLINE-SPECIAL version hilite-unread HILITE-UNREAD no-init tilde follow-name "
    "incsearch mouse MOUSE no-histdups no-number-headers no-search-headers no-vbell "
    "save-marks status-line use-backslash use-color exit-follow-on-close file-size "
    "wordwrap redraw-on-quit show-preproc-errors",
    long_values="buffers max-back-scroll jump-target lesskey-file lesskey-src "
    "lesskey-content log-file LOG-FILE pattern prompt tag tag-file tabs max-forw-scroll "
    "window shift color header line-num-width rscroll status-col-width quotes intr "
    "proc-backspace proc-return proc-tab",
    names={"k": "lesskey-file", "o": "log-file", "O": "LOG-FILE"},
)

_MORE = table(
    flags="dflcpsue",
    values="n",
    longs="silent logical no-pause print-over clean-print squeeze plain exit-on-eof help version",
    long_values="lines",
    numbers=True,
)

_MAN = table(
    flags="dDfkKwWiIa7ZthVcluR",
    values="CLmMSsePrEp",
    optional="THX",
    longs="debug default whatis apropos global-apropos where path location where-cat "
    "location-cat local-file catman ignore-case match-case regex wildcard names-only all "
    "update no-subpages ascii no-hyphenation nh no-justification nj troff ditroff help "
    "usage version",
    long_values="config-file locale systems manpath sections extension pager prompt "
    "encoding preprocessor recode",
    long_optional="warnings troff-device html gxditview",
    names={
        "C": "config-file",
        "P": "pager",
        "H": "html",
        "X": "gxditview",
        "c": "catman",
        "u": "update",
    },
)

_BASE64 = table(
    flags="di",
    values="w",
    longs="decode ignore-garbage help version",
    long_values="wrap",
)

_RM = table(
    flags="fiIrRdv",
    longs="force one-file-system no-preserve-root recursive dir verbose help version",
    long_optional="interactive preserve-root",
    names={"f": "force", "r": "recursive", "R": "recursive", "d": "dir", "v": "verbose"},
)

_WRITES = "writes the file it is given"

SIMPLE_PROGRAMS: dict[str, SimpleProgram] = {
    "ls": SimpleProgram(_LS),
    "cat": SimpleProgram(_CAT),
    "head": SimpleProgram(_HEAD),
    "tail": SimpleProgram(_TAIL),
    "wc": SimpleProgram(_WC),
    "sort": SimpleProgram(
        _SORT,
        {
            "output": f"-o/--output {_WRITES}",
            "compress-program": "--compress-program runs the program it names",
            "temporary-directory": "-T/--temporary-directory writes temporary files there",
        },
    ),
    "uniq": SimpleProgram(_UNIQ, operands=_uniq_operands),
    "cut": SimpleProgram(_CUT),
    "tr": SimpleProgram(_TR),
    "diff": SimpleProgram(_DIFF),
    "jq": SimpleProgram(_JQ),
    "grep": SimpleProgram(_GREP),
    "egrep": SimpleProgram(_GREP),
    "fgrep": SimpleProgram(_GREP),
    "rg": SimpleProgram(
        _RG,
        {
            "pre": "--pre runs a program on every file it searches",
            "search-zip": "-z/--search-zip runs decompression programs on the files it finds",
            "hostname-bin": "--hostname-bin runs the program it names",
        },
    ),
    "less": SimpleProgram(
        _LESS,
        {
            "lesskey-file": "-k/--lesskey-file binds keys, shell commands included",
            "lesskey-src": "--lesskey-src binds keys, shell commands included",
            "lesskey-content": "--lesskey-content binds keys, shell commands included",
            "log-file": f"-o/--log-file {_WRITES}",
            "LOG-FILE": f"-O/--LOG-FILE {_WRITES}",
        },
        plus_words=True,
    ),
    "more": SimpleProgram(_MORE, plus_words=True),
    "base64": SimpleProgram(_BASE64),
    "base32": SimpleProgram(_BASE64),
    # An allow rule for rm vouches for deleting the files it names, one by one; the
    # forced and recursive forms are how destructive deletes are written (Codex's
    # dangerous-command check flags every forced rm).
    "rm": SimpleProgram(
        _RM,
        {
            "force": "-f/--force deletes without a question, whatever it finds",
            "recursive": "-r/--recursive deletes whole directory trees",
            "no-preserve-root": "--no-preserve-root lets it delete /",
        },
    ),
    "man": SimpleProgram(
        _MAN,
        {
            "config-file": "-C/--config-file reads a configuration that names programs to run",
            "pager": "-P/--pager runs the program it names",
            "html": "-H/--html runs a browser",
            "gxditview": "-X/--gxditview runs a viewer",
            "catman": "-c/--catman writes cat pages",
            "update": "-u/--update writes the manual page index",
        },
    ),
}
"""The programs judged by their options, by name."""
