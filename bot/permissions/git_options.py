"""Read a git subcommand's options the way git's parse-options does.

Looking for a letter in the words is not enough: git bundles short options (``-dxf``),
lets a short option take the rest of its word as value (``-en`` is ``--exclude=n``,
not ``-e -n``), accepts any unambiguous prefix of a long option (``--no-dry`` for
``--no-dry-run``), negates with ``--no-``, and lets the last of ``-n``/``--no-dry-run``
win. It parses options after operands too, until ``--`` or ``--end-of-options``.
:func:`parse_options` reads a subcommand's arguments with those rules, given the
subcommand's option table (:class:`OptionSpec`), so a check can ask "is dry-run on
at the end?" and get git's answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["UNKNOWN", "OptionSpec", "ParsedOptions", "parse_options"]

UNKNOWN = "?"  # the name recorded for an option the table does not know


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One subcommand's options, as its ``git help`` page lists them.

    Attributes:
        flags: Short letters that take no value, mapped to their long name (or to
            themselves when they have none), e.g. ``{"n": "dry-run", "x": "x"}``.
        short_values: Short letters that take a value (the rest of the word or the
            next word), mapped likewise, e.g. ``{"e": "exclude"}``.
        short_optional: Short letters whose value may only be attached (``-n5``).
        longs: Long names without a value (``--force``); ``--name=value`` is refused
            by git, so it is read as unknown.
        long_values: Long names that need a value (``--exclude=x`` or ``--exclude x``).
        long_optional: Long names whose value may only follow ``=`` (``--track=direct``).
    """

    flags: dict[str, str] = field(default_factory=dict)
    short_values: dict[str, str] = field(default_factory=dict)
    short_optional: dict[str, str] = field(default_factory=dict)
    longs: frozenset[str] = frozenset()
    long_values: frozenset[str] = frozenset()
    long_optional: frozenset[str] = frozenset()

    def all_longs(self) -> frozenset[str]:
        """Every long name the subcommand accepts."""
        return self.longs | self.long_values | self.long_optional


@dataclass(frozen=True, slots=True)
class ParsedOptions:
    """The options in the order given, and the operands.

    Attributes:
        options: ``(name, on, value)`` for each option, ``on`` False for a ``--no-``
            form; an abbreviation git would find ambiguous appears once per candidate,
            and an option the table does not know as :data:`UNKNOWN`.
        operands: The words that are not options, those before ``--`` first.
        after_dashes: The operands that followed ``--`` (always paths for git).
    """

    options: tuple[tuple[str, bool, str | None], ...]
    operands: tuple[str, ...]
    after_dashes: tuple[str, ...]

    def final(self, *names: str) -> bool:
        """Whether the last of ``names`` given (or negated) leaves it on: git's "last one wins"."""
        state = False
        for name, on, _ in self.options:
            if name in names:
                state = on
        return state

    def given(self, *names: str) -> bool:
        """Whether any of ``names`` appears switched on, whatever follows."""
        return any(name in names and on for name, on, _ in self.options)

    def values(self, name: str) -> list[str]:
        """The values given to ``name``, in order."""
        return [value for option, on, value in self.options if option == name and on and value]

    @property
    def unknown(self) -> bool:
        """Whether some option is not in the table (git would refuse it, or the table is short)."""
        return any(name == UNKNOWN for name, _, _ in self.options)


def parse_options(args: Sequence[str], spec: OptionSpec) -> ParsedOptions:
    """Split ``args`` into options and operands with git's rules and ``spec``.

    Args:
        args: The words after the subcommand.
        spec: The subcommand's option table.

    Returns:
        The options in order and the operands.

    Example:
        >>> spec = OptionSpec(flags={"n": "dry-run", "f": "force"}, longs=frozenset(
        ...     {"dry-run", "force"}), short_values={"e": "exclude"})
        >>> parse_options(["-n", "--no-dry", "-fen"], spec).final("dry-run")
        False
    """
    options: list[tuple[str, bool, str | None]] = []
    operands: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg in ("--", "--end-of-options"):
            rest = tuple(args[index:])
            return ParsedOptions(tuple(options), (*operands, *rest), rest)
        if arg.startswith("--"):
            found, takes_next = _long(arg[2:], spec)
            if takes_next and index < len(args):
                found = [(name, on, args[index]) for name, on, _ in found]
                index += 1
            options.extend(found)
        elif arg.startswith("-") and arg != "-":
            found, takes_next = _short(arg[1:], spec)
            if takes_next and index < len(args):
                name, on, _ = found[-1]
                found[-1] = (name, on, args[index])
                index += 1
            options.extend(found)
        else:
            operands.append(arg)
    return ParsedOptions(tuple(options), tuple(operands), ())


def _short(letters: str, spec: OptionSpec) -> tuple[list[tuple[str, bool, str | None]], bool]:
    """A cluster such as ``dxf`` or ``fen``; True when its last option takes the next word."""
    found: list[tuple[str, bool, str | None]] = []
    for position, letter in enumerate(letters):
        if letter in spec.short_values:
            value = letters[position + 1 :]
            found.append((spec.short_values[letter], True, value or None))
            return found, not value
        if letter in spec.short_optional:
            found.append((spec.short_optional[letter], True, letters[position + 1 :] or None))
            return found, False
        found.append((spec.flags.get(letter, UNKNOWN), True, None))
    return found, False


def _long(written: str, spec: OptionSpec) -> tuple[list[tuple[str, bool, str | None]], bool]:
    """``--name[=value]``, abbreviated or negated; True when it takes the next word."""
    name, equals, value = written.partition("=")
    known = spec.all_longs()
    candidates = _matches(name, known, on=True)
    if not candidates and name.startswith("no-"):
        candidates = _matches(name[3:], known, on=False)
    if not candidates:
        return [(UNKNOWN, True, None)], False
    found: list[tuple[str, bool, str | None]] = []
    takes_next = False
    for option, on in candidates:
        if equals and option in spec.longs:
            found.append((UNKNOWN, True, None))  # git refuses a value here
            continue
        found.append((option, on, value if equals else None))
        takes_next = takes_next or (on and not equals and option in spec.long_values)
    return found, takes_next


def _matches(name: str, known: frozenset[str], *, on: bool) -> list[tuple[str, bool]]:
    """The options ``name`` names: itself if exact, else every option it abbreviates.

    An option spelled ``no-x`` in the table is negated by ``--x``, as in git.
    """
    if not name:
        return []
    if name in known:
        return [(name, on)]
    if f"no-{name}" in known:
        return [(f"no-{name}", not on)]
    return [(option, on) for option in sorted(known) if option.startswith(name)]
