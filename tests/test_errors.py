"""Malformed rule files: each gets a specific message at the right line:column, with the
source line and a caret — never a traceback from inside a library."""

import pytest

from heatc.errors import HeatError
from heatc.lang.compiler import compile_source

GOOD_HEAD = 'class glucose keyword = "glucose"\nclass mg_dl unit = "mg/dL"\n'

CASES = [
    # (name, source, line, column, message)
    (
        "missing_number",
        "rule r {\n  match glucose\n  require v in [10, abc]\n}\n",
        3,
        21,
        'expected a number, found "abc"',
    ),
    ("unterminated_string", 'class a unit = "mg\n', 1, 16, "unterminated string"),
    ("bad_character", "rule r @ {}\n", 1, 8, "unexpected character '@'"),
    ("reserved_word", 'class number unit = "x"\n', 1, 7, '"number" is a reserved word'),
    ("unexpected_eof", "rule r {\n  match glucose\n", 2, 16, "unexpected end of file, expected"),
    ("bad_escape", 'class a unit = "a\\qb"\n', 1, 18, 'unknown escape "\\q"'),
    ("unknown_class", GOOD_HEAD + "rule r {\n  match glucos ..3 v:number\n}\n", 4, 9, 'unknown class "glucos"'),
    (
        "unknown_capture",
        GOOD_HEAD + "rule r {\n  match glucose ..3 v:number\n  require w < 5\n}\n",
        5,
        11,
        'capture "w" is used but never bound',
    ),
    (
        "duplicate_rule",
        GOOD_HEAD + "rule r { match glucose }\nrule r { match mg_dl }\n",
        4,
        6,
        'rule "r" is declared twice',
    ),
    ("duplicate_class", GOOD_HEAD + 'class glucose unit = "g"\n', 3, 7, 'class "glucose" is declared twice'),
    (
        "duplicate_literal",
        GOOD_HEAD + 'class sugar keyword = "GLUCOSE"\n',
        3,
        23,
        'literal "GLUCOSE" is declared twice',
    ),
    (
        "empty_range",
        GOOD_HEAD + "rule r {\n  match glucose v:number\n  require v in [10, 5]\n}\n",
        5,
        3,
        "the range [10, 5] is empty",
    ),
    (
        "impossible_requirements",
        GOOD_HEAD + "rule r {\n  match glucose v:number\n  require v > 10\n  require v < 5\n}\n",
        6,
        3,
        'requirements on "v" in rule "r" can never all hold',
    ),
    (
        "capture_bound_twice",
        GOOD_HEAD + "rule r {\n  match glucose v:number v:number\n}\n",
        4,
        26,
        'capture "v" is bound twice',
    ),
    (
        "class_capture_compared",
        GOOD_HEAD + "rule r {\n  match k:glucose v:number\n  require k > 3\n}\n",
        5,
        11,
        '"k" holds a class name, not a number',
    ),
    ("literal_reads_as_number", 'class bad unit = "12"\n', 1, 18, 'literal "12" reads as a number'),
    ("heat_out_of_range", GOOD_HEAD + "rule r heat 1.5 { match glucose }\n", 3, 13, "heat must be between 0 and 1"),
    (
        "gap_too_large",
        GOOD_HEAD + "rule r { match glucose ..65 mg_dl }\n",
        3,
        26,
        "a gap must be a whole number from 0 to 64",
    ),
    (
        "gap_before_first",
        GOOD_HEAD + "rule r { match ..2 glucose }\n",
        3,
        18,
        "a gap before the first element means nothing",
    ),
    ("no_match", GOOD_HEAD + "rule r { require 1 < 2 }\n", 3, 6, 'rule "r" has no match statement'),
    ("unknown_anchor", GOOD_HEAD + "rule r { when covered match glucose }\n", 3, 15, 'unknown anchor "covered"'),
    ("anchor_with_digits", 'anchor a = "Regulation 12"\n', 1, 12, 'anchor term "Regulation 12" contains'),
    ("unknown_option", "options { chinese_number }\n", 1, 11, 'unknown option "chinese_number"'),
    (
        "per_needs_class",
        GOOD_HEAD + "rule r {\n  match glucose a:number b:number\n  consistent a per b\n}\n",
        5,
        20,
        '"per b" needs a class capture',
    ),
    (
        "mixed_capture",
        GOOD_HEAD + "rule r { match x:(glucose | number) }\n",
        3,
        16,
        'capture "x" would hold a number or a class name',
    ),
    (
        "channel_kinds",
        GOOD_HEAD + "rule a { match k:glucose\n lock ch = k }\nrule b { match v:number\n lock ch = v }\n",
        6,
        12,
        'channel "ch" holds class values elsewhere',
    ),
    (
        "unknown_expect_rule",
        GOOD_HEAD + 'rule r { match glucose }\nexpect "glucose" passes q\n',
        4,
        25,
        'unknown rule "q"',
    ),
    ("literal_conflict", 'class a unit = "a  b"\nclass b unit = "A B"\n', 2, 16, "declared twice"),
    ("window_zero", "triggers { every 0 }\n", 1, 18, "every N needs a whole number"),
    ("literal_whitespace", 'class a unit = " mg"\n', 1, 16, "starts or ends with whitespace"),
    ("constants_only", GOOD_HEAD + "rule r { match glucose require 1 < 2 }\n", 3, 24, "compares constants only"),
]


@pytest.mark.parametrize("name,source,line,column,message", CASES, ids=[c[0] for c in CASES])
def test_malformed_rule_file(name, source, line, column, message):
    with pytest.raises(HeatError) as info:
        compile_source(source, "bad.heat")
    d = info.value.diagnostics[0]
    assert message in d.message, d.render()
    assert (d.line, d.column) == (line, column), d.render()
    rendered = d.render()
    assert rendered.startswith(f"bad.heat:{line}:{column}: error: ")
    # The offending line is shown with a caret under the column.
    src_line = source.splitlines()[line - 1]
    assert src_line in rendered
    caret_line = rendered.splitlines()[2]
    assert caret_line.endswith("^")


def test_several_errors_are_reported_together():
    with pytest.raises(HeatError) as info:
        compile_source(GOOD_HEAD + "rule r { match foo }\nrule s { match bar }\n", "bad.heat")
    assert [d.line for d in info.value.diagnostics] == [3, 4]


def test_suggestions_for_misspelled_names():
    with pytest.raises(HeatError) as info:
        compile_source(GOOD_HEAD + "rule r { match glucos }\n", "bad.heat")
    assert 'did you mean "glucose"?' in info.value.render()


def test_not_utf8(tmp_path):
    from heatc.lang.compiler import compile_file

    path = tmp_path / "latin1.heat"
    path.write_bytes(b'class a unit = "caf\xe9"\n')
    with pytest.raises(HeatError) as info:
        compile_file(path)
    d = info.value.diagnostics[0]
    assert (d.line, d.column, d.message) == (1, 20, "the file is not valid UTF-8")


def test_missing_file(tmp_path):
    from heatc.lang.compiler import compile_file

    with pytest.raises(HeatError) as info:
        compile_file(tmp_path / "nope.heat")
    assert "cannot read file" in info.value.render()
