"""Read a program's command line the way its option parser does (getopt_long and kin).

A word is not an option because it starts with ``-``: ``sed -ni`` is ``-n -i``, ``sort
-ofile`` writes ``file``, ``rg --pr=sh`` may be ``--pre=sh``, and GNU programs read
options after operands too (``grep x file -r``). :func:`parse_args` splits a command's
arguments with a program's :class:`OptionTable`: short clusters, values attached or in
the next word, ``--name=value``, unique abbreviations of long names, ``--`` ending the
options. What the table does not know is reported as :data:`UNKNOWN`, so a caller can
refuse to vouch for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["UNKNOWN", "OptionTable", "ParsedArgs", "parse_args", "skip_options", "table"]

UNKNOWN = "?"
"""The name an option gets when the program's table does not know it."""


@dataclass(frozen=True, slots=True)
class OptionTable:
    """A program's options, as its manual lists them.

    Short letters map to a canonical name (the long name when there is one), so a
    check names an option once: ``-o`` and ``--output`` are both ``output``.

    Attributes:
        flags: Short letters that take no value.
        short_values: Short letters that take a value: the rest of the word, or the next.
        short_optional: Short letters whose value can only be attached (``-i.bak``).
        longs: Long names without a value.
        long_values: Long names that need a value (``--name=v`` or ``--name v``).
        long_optional: Long names whose value can only follow ``=``.
        long_pairs: Long names that take the next two words (jq's ``--arg NAME VALUE``).
        abbreviations: Whether a unique prefix of a long name names it (getopt_long).
        permute: Whether options may follow operands (GNU); else the first operand ends them.
        numbers: Whether ``-NUM`` is an option (``head -5``, ``uniq -2``), named ``number``.
    """

    flags: Mapping[str, str] = field(default_factory=dict)
    short_values: Mapping[str, str] = field(default_factory=dict)
    short_optional: Mapping[str, str] = field(default_factory=dict)
    longs: frozenset[str] = frozenset()
    long_values: frozenset[str] = frozenset()
    long_optional: frozenset[str] = frozenset()
    long_pairs: frozenset[str] = frozenset()
    abbreviations: bool = True
    permute: bool = True
    numbers: bool = False

    def all_longs(self) -> frozenset[str]:
        """Every long name the program accepts."""
        return self.longs | self.long_values | self.long_optional | self.long_pairs


def table(
    *,
    flags: str = "",
    values: str = "",
    optional: str = "",
    longs: str = "",
    long_values: str = "",
    long_optional: str = "",
    long_pairs: str = "",
    names: Mapping[str, str] | None = None,
    abbreviations: bool = True,
    permute: bool = True,
    numbers: bool = False,
) -> OptionTable:
    """An :class:`OptionTable` from compact strings: letters, and space-separated long names.

    Args:
        flags: Short letters without a value, e.g. ``"nrs"``.
        values: Short letters with a value.
        optional: Short letters with an attached-only value.
        longs: Long names without a value, e.g. ``"quiet silent"``.
        long_values: Long names with a value.
        long_optional: Long names with an ``=``-only value.
        long_pairs: Long names taking two words.
        names: The long name each short letter stands for (``{"o": "output"}``); a
            letter without one is named by itself.
        abbreviations: See :class:`OptionTable`.
        permute: See :class:`OptionTable`.
        numbers: See :class:`OptionTable`.
    """
    named = dict(names or {})

    def letters(text: str) -> dict[str, str]:
        return {letter: named.get(letter, letter) for letter in text}

    return OptionTable(
        flags=letters(flags),
        short_values=letters(values),
        short_optional=letters(optional),
        longs=frozenset(longs.split()),
        long_values=frozenset(long_values.split()),
        long_optional=frozenset(long_optional.split()),
        long_pairs=frozenset(long_pairs.split()),
        abbreviations=abbreviations,
        permute=permute,
        numbers=numbers,
    )


@dataclass(frozen=True, slots=True)
class Option:
    """One option as given: its canonical name, its value, and the word it was read from."""

    name: str
    value: str | None
    word: str


@dataclass(frozen=True, slots=True)
class ParsedArgs:
    """A command's options in order, and its operands.

    Attributes:
        options: Each option; an abbreviation that could mean several options appears
            once per candidate, an unknown one as :data:`UNKNOWN`.
        operands: The words that are not options, in order.
        ended: Whether ``--`` ended the options (so words appended later are operands).
    """

    options: tuple[Option, ...]
    operands: tuple[str, ...]
    ended: bool

    def names(self) -> set[str]:
        """The canonical names of every option given."""
        return {option.name for option in self.options}

    def given(self, *names: str) -> Option | None:
        """The first option given under any of ``names``, or None."""
        return next((option for option in self.options if option.name in names), None)

    def values(self, name: str) -> list[str]:
        """The values given to ``name``, in order."""
        return [o.value for o in self.options if o.name == name and o.value is not None]

    def unknown(self) -> Option | None:
        """The first option the table does not know, or None."""
        return self.given(UNKNOWN)


def parse_args(args: Sequence[str], spec: OptionTable) -> ParsedArgs:
    """Split ``args`` into options and operands as the program's parser would.

    Args:
        args: The words after the program name.
        spec: The program's option table.

    Returns:
        The options and operands.

    Example:
        >>> sed = table(flags="n", optional="i", longs="quiet", long_optional="in-place",
        ...             names={"n": "quiet", "i": "in-place"})
        >>> sorted(parse_args(["-ni", "1d", "f"], sed).names())
        ['in-place', 'quiet']
    """
    options: list[Option] = []
    operands: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        index += 1
        if word == "--":
            return ParsedArgs(tuple(options), (*operands, *args[index:]), True)
        if word.startswith("--"):
            found, takes = _long(word, spec)
            if takes and index + takes <= len(args):
                value = " ".join(args[index : index + takes])
                found = [Option(o.name, value, word) for o in found]
                index += takes
            elif takes:
                found = [Option(UNKNOWN, None, word)]  # its value is missing: an error
                index = len(args)
            options.extend(found)
        elif word.startswith("-") and word != "-":
            found, takes_next = _short(word, spec)
            if takes_next:
                if index < len(args):
                    found[-1] = Option(found[-1].name, args[index], word)
                    index += 1
                else:
                    found[-1] = Option(UNKNOWN, None, word)
            options.extend(found)
        else:
            operands.append(word)
            if not spec.permute:
                return ParsedArgs(tuple(options), (*operands, *args[index:]), False)
    return ParsedArgs(tuple(options), tuple(operands), False)


def _short(word: str, spec: OptionTable) -> tuple[list[Option], bool]:
    """A cluster such as ``-nE`` or ``-ofile``; True when its last option takes the next word."""
    letters = word[1:]
    if spec.numbers and letters.isdigit():
        return [Option("number", letters, word)], False
    found: list[Option] = []
    for position, letter in enumerate(letters):
        if letter in spec.short_values:
            value = letters[position + 1 :]
            found.append(Option(spec.short_values[letter], value or None, word))
            return found, not value
        if letter in spec.short_optional:
            value = letters[position + 1 :] or None
            found.append(Option(spec.short_optional[letter], value, word))
            return found, False
        found.append(Option(spec.flags.get(letter, UNKNOWN), None, word))
    return found, False


def _long(word: str, spec: OptionTable) -> tuple[list[Option], int]:
    """``--name[=value]``; the number of following words its value takes (0, 1 or 2)."""
    name, equals, value = word[2:].partition("=")
    candidates = _candidates(name, spec)
    if not candidates:
        return [Option(UNKNOWN, None, word)], 0
    found: list[Option] = []
    takes = 0
    for option in candidates:
        if equals and option in spec.longs:
            found.append(Option(UNKNOWN, None, word))  # getopt refuses a value here
            continue
        if option in spec.long_pairs:
            takes = max(takes, 2 - bool(equals))
            found.append(Option(option, value if equals else None, word))
            continue
        found.append(Option(option, value if equals else None, word))
        if not equals and option in spec.long_values:
            takes = max(takes, 1)
    return found, takes


def _candidates(name: str, spec: OptionTable) -> list[str]:
    """The long options ``name`` names: itself when exact, else each it abbreviates."""
    if not name:
        return []
    known = spec.all_longs()
    if name in known:
        return [name]
    if not spec.abbreviations:
        return []
    return sorted(option for option in known if option.startswith(name))


def skip_options(
    args: Sequence[str], *, short: str = "", long: frozenset[str] = frozenset()
) -> int:
    """Index of the first operand, skipping options and the values they take.

    For programs that stop reading options at their first operand (the command a
    wrapper runs): everything from the returned index on is that command.

    Args:
        args: The arguments after the program name.
        short: Short options that take a value (attached, ``-n5``, or the next word).
        long: Long options that take the next word as value unless written ``--x=v``.

    Returns:
        The index of the first word that is not an option (or ``len(args)``).
    """
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return index + 1
        if arg.startswith("--"):
            index += 1
            if "=" not in arg and arg in long:
                index += 1
        elif arg.startswith("-") and len(arg) > 1:
            index += 1
            for position, letter in enumerate(arg[1:], start=2):
                if letter in short:
                    if position == len(arg):
                        index += 1
                    break
        else:
            return index
    return index
