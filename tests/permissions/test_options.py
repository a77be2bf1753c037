"""Reading a program's options as its parser does: clusters, values, abbreviations, `--`."""

from __future__ import annotations

from bot.permissions.options import UNKNOWN, parse_args, table

SORTISH = table(
    flags="rnu",
    values="ok",
    optional="i",
    longs="reverse numeric-sort unique",
    long_values="output key",
    long_optional="in-place check",
    long_pairs="arg",
    names={"o": "output", "r": "reverse", "i": "in-place", "k": "key"},
)


def names(args: list[str]) -> list[str]:
    return [option.name for option in parse_args(args, SORTISH).options]


def test_a_cluster_is_read_letter_by_letter_until_one_takes_a_value() -> None:
    parsed = parse_args(["-rnofile", "in"], SORTISH)
    assert [(o.name, o.value) for o in parsed.options] == [
        ("reverse", None), ("n", None), ("output", "file"),
    ]  # fmt: skip
    assert parsed.operands == ("in",)


def test_a_value_may_be_the_next_word_even_when_it_looks_like_an_option() -> None:
    parsed = parse_args(["-o", "-r", "in"], SORTISH)
    assert parsed.values("output") == ["-r"]
    assert "reverse" not in parsed.names()


def test_an_optional_value_is_only_ever_attached() -> None:
    parsed = parse_args(["-i", ".bak"], SORTISH)
    assert parsed.values("in-place") == []
    assert parsed.operands == (".bak",)
    assert parse_args(["-i.bak"], SORTISH).values("in-place") == [".bak"]


def test_long_options_take_values_after_equals_or_in_the_next_word() -> None:
    assert parse_args(["--output=x"], SORTISH).values("output") == ["x"]
    assert parse_args(["--output", "x"], SORTISH).values("output") == ["x"]
    assert parse_args(["--check", "x"], SORTISH).operands == ("x",)


def test_unique_abbreviations_name_the_option_and_ambiguous_ones_name_every_candidate() -> None:
    assert names(["--out=x"]) == ["output"]
    assert names(["--rev"]) == ["reverse"]
    assert sorted(names(["--u"])) == ["unique"]
    no_abbreviations = table(longs="output", abbreviations=False)
    assert [o.name for o in parse_args(["--out"], no_abbreviations).options] == [UNKNOWN]


def test_a_value_given_to_an_option_that_takes_none_is_unknown() -> None:
    assert names(["--reverse=yes"]) == [UNKNOWN]


def test_unknown_letters_and_names_are_reported_with_their_word() -> None:
    parsed = parse_args(["-rz", "--nope"], SORTISH)
    unknown = parsed.unknown()
    assert unknown is not None and unknown.word == "-rz"
    assert [o.word for o in parsed.options if o.name == UNKNOWN] == ["-rz", "--nope"]


def test_options_after_operands_count_unless_the_program_stops_at_the_first() -> None:
    assert "output" in parse_args(["in", "-o", "x"], SORTISH).names()
    posix = table(values="o", names={"o": "output"}, permute=False)
    stopped = parse_args(["in", "-o", "x"], posix)
    assert stopped.options == ()
    assert stopped.operands == ("in", "-o", "x")


def test_double_dash_ends_the_options() -> None:
    parsed = parse_args(["--", "-o", "x"], SORTISH)
    assert parsed.options == ()
    assert parsed.operands == ("-o", "x")
    assert parsed.ended


def test_a_missing_value_is_unknown_not_silently_dropped() -> None:
    assert names(["-o"]) == [UNKNOWN]
    assert names(["--output"]) == [UNKNOWN]


def test_pairs_take_two_words() -> None:
    parsed = parse_args(["--arg", "name", "value", "prog"], SORTISH)
    assert parsed.values("arg") == ["name value"]
    assert parsed.operands == ("prog",)


def test_numbers_as_options() -> None:
    head = table(values="n", names={"n": "lines"}, numbers=True)
    parsed = parse_args(["-20", "f"], head)
    assert parsed.values("number") == ["20"]
    assert parsed.operands == ("f",)
