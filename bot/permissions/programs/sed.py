"""``sed``: its options, and every command of its scripts, read as GNU sed reads them.

``sed -n '1,20p' f`` only prints, but ``sed -ni d f`` empties ``f`` (``-i`` hides in
the cluster), ``sed -n '1e touch x' f`` runs a program and ``sed -n 'w x' f`` writes a
file. :func:`sed_problem` parses the options and each script (addresses, ``!``,
blocks, labels, ``s`` with its flags, ``y``, text commands) and refuses ``-i``,
``-f`` (a script this check cannot see), and the commands ``e``, ``w``, ``W`` and the
``s`` flags ``e`` and ``w``. Whatever it cannot parse is refused as well.
"""

from __future__ import annotations

from bot.permissions.options import parse_args, table

__all__ = ["sed_commands_run", "sed_problem"]

_SED = table(
    flags="nErsuzb",
    values="efl",
    optional="i",
    longs="quiet silent regexp-extended separate unbuffered null-data posix debug sandbox "
    "follow-symlinks binary help version",
    long_values="expression file line-length",
    long_optional="in-place",
    names={
        "n": "quiet",
        "e": "expression",
        "f": "file",
        "l": "line-length",
        "i": "in-place",
        "E": "regexp-extended",
        "r": "regexp-extended",
        "s": "separate",
        "u": "unbuffered",
        "z": "null-data",
        "b": "binary",
    },
)

# Commands without arguments (GNU's `l`, `q`, `Q`, `L` take an optional number).
_SIMPLE = frozenset("=dDgGhHlnNpPxzFqQL")
_LABELLED = frozenset("btT:")
_TEXT = frozenset("aic")
_FILE_READS = frozenset("rR")
_RUNS = {"e": "runs the command it is given", "w": "writes a file", "W": "writes a file"}


class _Unreadable(ValueError):
    """The script holds something this parser does not read."""


def sed_problem(args: tuple[str, ...], *, open_ended: bool = False) -> str | None:
    """Why ``sed ARGS`` is more than a read, or None when every part of it only reads.

    Args:
        args: The words after ``sed``.
        open_ended: More words will be appended (``xargs sed ...``): they could be
            options such as ``-i``, unless ``--`` came first.

    Returns:
        A sentence naming what writes or runs, or None.
    """
    parsed = parse_args(args, _SED)
    if (unknown := parsed.unknown()) is not None:
        return f"sed {unknown.word}: an option this check does not know"
    if parsed.given("in-place"):
        return "sed -i/--in-place edits files in place"
    if parsed.given("file"):
        return "sed -f/--file reads its script from a file this check cannot see"
    if open_ended and not parsed.ended:
        return "sed given more arguments by xargs may be given -i (edit in place)"
    scripts = parsed.values("expression")
    if not scripts:
        if not parsed.operands:
            return "sed without a script"
        scripts = [parsed.operands[0]]
    for script in scripts:
        try:
            problem = _script_problem(script)
        except _Unreadable as error:
            return f"sed script {script[:60]!r} could not be read ({error})"
        if problem is not None:
            return problem
    return None


def sed_commands_run(args: tuple[str, ...]) -> tuple[list[str], bool]:
    """The commands ``sed ARGS`` runs with ``e COMMAND``, and whether it runs others.

    The others are lines the script makes (``e`` alone, ``s///e``), a script read from
    a file, or a script this reader cannot parse: code only known when sed runs.
    """
    parsed = parse_args(args, _SED)
    scripts = parsed.values("expression") or list(parsed.operands[:1])
    commands: list[str] = []
    computed = bool(parsed.given("file"))
    for script in scripts:
        try:
            found, made = _commands_run(script)
        except _Unreadable:
            computed = True
            continue
        commands += found
        computed = computed or made
    return commands, computed


def _commands_run(script: str) -> tuple[list[str], bool]:
    reader = _Reader(script)
    commands: list[str] = []
    computed = False
    while True:
        reader.skip(" \t\n;")
        if reader.done():
            return commands, computed
        if reader.peek() in "#}":
            reader.until("\n") if reader.peek() == "#" else reader.take()
            continue
        reader.address_range()
        reader.skip(" \t!")
        command = reader.take()
        if command == "e":
            reader.skip(" \t")
            line = reader.until("\n")
            commands += [line] if line.strip() else []
            computed = computed or not line.strip()
            continue
        if command == "s":
            delimiter = reader.take()
            reader.delimited(delimiter)
            reader.delimited(delimiter)
            flags = reader.until(" \t\n;}w")
            computed = computed or "e" in flags
            if reader.peek() == "w":
                reader.take()
                reader.argument()
        elif command == "y":
            delimiter = reader.take()
            reader.delimited(delimiter)
            reader.delimited(delimiter)
        elif command in _TEXT:
            reader.text()
        elif command in _LABELLED:
            reader.label()
        elif command in _FILE_READS or command in "wWv":
            reader.argument()
        elif command in _SIMPLE:
            reader.skip(" \t0123456789")
        elif command != "{":
            raise _Unreadable(f"unknown command {command!r}")


def _script_problem(script: str) -> str | None:
    """The first command of ``script`` that writes or runs, as a sentence."""
    reader = _Reader(script)
    while True:
        reader.skip(" \t\n;")
        if reader.done():
            return None
        if reader.peek() == "#":
            reader.until("\n")
            continue
        if reader.peek() == "}":
            reader.take()
            continue
        reader.address_range()
        reader.skip(" \t")
        while reader.peek() == "!":
            reader.take()
            reader.skip(" \t")
        command = reader.take()
        if command == "{":
            continue
        if command in _RUNS:
            return f"sed command {command!r} {_RUNS[command]}"
        if command == "s":
            if problem := reader.substitution():
                return problem
        elif command == "y":
            delimiter = reader.take()
            reader.delimited(delimiter)
            reader.delimited(delimiter)
        elif command in _TEXT:
            reader.text()
        elif command in _LABELLED:
            reader.label()
        elif command in _FILE_READS or command == "v":
            reader.argument()
        elif command in _SIMPLE:
            reader.skip(" \t")
            while reader.peek().isdigit():
                reader.take()
        else:
            raise _Unreadable(f"unknown command {command!r}")
        reader.end_of_command()


class _Reader:
    """A cursor over one sed script."""

    def __init__(self, script: str) -> None:
        self.text_ = script
        self.at = 0

    def done(self) -> bool:
        return self.at >= len(self.text_)

    def peek(self) -> str:
        return self.text_[self.at] if self.at < len(self.text_) else ""

    def take(self) -> str:
        if self.done():
            raise _Unreadable("the script ends in the middle of a command")
        char = self.text_[self.at]
        self.at += 1
        return char

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.at += 1

    def until(self, stop: str) -> str:
        start = self.at
        while self.peek() and self.peek() not in stop:
            self.at += 1
        return self.text_[start : self.at]

    def address_range(self) -> None:
        if self.address():
            self.skip(" \t")
            if self.peek() == ",":
                self.take()
                self.skip(" \t")
                if self.peek() in ("+", "~"):
                    self.take()
                    self.number()
                elif not self.address():
                    raise _Unreadable("an address range without its end")

    def address(self) -> bool:
        char = self.peek()
        if char.isdigit():
            self.number()
            if self.peek() == "~":
                self.take()
                self.number()
            return True
        if char == "$":
            self.take()
            return True
        if char in ("/", "\\"):
            self.take()
            delimiter = self.take() if char == "\\" else "/"
            self.delimited(delimiter)
            while self.peek() in ("I", "M"):
                self.take()
            return True
        return False

    def number(self) -> None:
        if not self.peek().isdigit():
            raise _Unreadable("a number was expected")
        while self.peek().isdigit():
            self.take()

    def delimited(self, delimiter: str) -> str:
        """Text up to an unescaped ``delimiter`` (consumed); a newline ends nothing here."""
        if delimiter in ("", "\\", "\n"):
            raise _Unreadable("a bad delimiter")
        out: list[str] = []
        while True:
            char = self.take()
            if char == "\\":
                out.append(char + self.take())
            elif char == delimiter:
                return "".join(out)
            else:
                out.append(char)

    def substitution(self) -> str | None:
        delimiter = self.take()
        self.delimited(delimiter)
        self.delimited(delimiter)
        while True:
            flag = self.peek()
            if flag and (flag in "gpiImM" or flag.isdigit()):
                self.take()
            elif flag == "e":
                return "sed s///e runs the result as a command"
            elif flag == "w":
                return "sed s///w writes a file"
            else:
                return None

    def text(self) -> None:
        """The text of ``a``, ``i``, ``c``: ``a\\`` and lines, or GNU's one-line ``a text``."""
        self.skip(" \t")
        if self.peek() == "\\":
            self.take()
            self.skip(" \t")
            if self.peek() == "\n":
                self.take()
        while not self.done():
            char = self.take()
            if char == "\\":
                if not self.done():
                    self.take()
            elif char == "\n":
                return

    def label(self) -> None:
        """A label: GNU sed 4.9 ends it at whitespace or `;`, and reads on after it."""
        self.skip(" \t")
        self.until(" \t\n;")

    def argument(self) -> None:
        """A label or file name: to the end of the line (``;`` ends labels for GNU too)."""
        self.skip(" \t")
        self.until("\n;")

    def end_of_command(self) -> None:
        self.skip(" \t")
        if self.peek() == "}":
            return
        if self.peek() and self.peek() not in ";\n#":
            raise _Unreadable(f"unexpected {self.peek()!r} after a command")
