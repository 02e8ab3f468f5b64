"""Heatmaps: malformed files get errors naming the file, field and line; lowering follows
the documented margin policy."""

from pathlib import Path

import pytest

from heatc.errors import HeatError
from heatc.heatmap.build import compile_heatmap
from heatc.heatmap.format import Stats, load_heatmap
from heatc.heatmap.lower import lower, margin_range
from heatc.lang.unparse import format_file

HERE = Path(__file__).parent / "heatmaps"
GOOD = (HERE / "good.yaml").read_text()


def _write(tmp_path: Path, text: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


MALFORMED = [
    # (name, change to the good heatmap, line, field in the message, message)
    (
        "wrong_type",
        ("score: 0.9", "score: high"),
        11,
        "cells[0].score",
        "expected a number between 0 and 1, got 'high'",
    ),
    (
        "unknown_category",
        ("pair: [glucose, number], unit", "pair: [glucos, number], unit"),
        11,
        "cells[0].pair[0]",
        "unknown category 'glucos' (did you mean 'glucose'?)",
    ),
    (
        "threshold_out_of_range",
        ("cells:", "thresholds: {sensitivity: 1.5}\ncells:"),
        10,
        "thresholds.sensitivity",
        "expected a number between 0 and 1, got '1.5'",
    ),
    (
        "missing_tokenizer",
        ("tokenizer: {bytes: true}\n", ""),
        1,
        "tokenizer",
        "missing: the tokenizer the token table is built for",
    ),
    (
        "unknown_field",
        ("support: 10,", "suport: 10,"),
        11,
        "cells[0].suport",
        "unknown field (did you mean 'support'?)",
    ),
    ("version", ("heatmap: 1", "heatmap: 2"), 1, "heatmap", "format version 2 is not supported"),
    ("empty_range", ("range: [1, 2]", "range: [2, 1]"), 12, "cells[1].range", "empty: low 2 is above high 1"),
    (
        "no_literals",
        ("mg_dl: {kind: unit, literals: [mg/dL]}", "mg_dl: {kind: unit}"),
        7,
        "categories.mg_dl.literals",
        "a category needs at least one literal",
    ),
    ("unknown_check", ("score: 0.5,", "score: 0.5, check: median,"), 12, "cells[1].check", "unknown check 'median'"),
    (
        "tokenizer_file_missing",
        ("tokenizer: {bytes: true}", "tokenizer: {file: nowhere/tokenizer.json}"),
        4,
        "tokenizer.file",
        "'nowhere/tokenizer.json' does not exist",
    ),
    ("bad_name", ("glucose: {kind", "glucose-level: {kind"), 6, "categories.glucose-level", "is not a valid name"),
    ("unknown_kind", ("kind: keyword", "kind: adjective"), 6, "categories.glucose.kind", "unknown kind 'adjective'"),
    ("stats_not_numbers", ("q01: 45", "q01: lots"), 11, "cells[0].stats.q01", "expected a number, got 'lots'"),
    ("unknown_trigger_class", ("at: [period]", "at: [comma]"), 9, "triggers.at[0]", "unknown category 'comma'"),
    (
        "lone_category_not_a_value",
        ("pair: [glucose, number], score: 0.5", "pair: [glucose], score: 0.5"),
        12,
        "cells[1].pair",
        "expected two categories (or a value category alone), got 1",
    ),
    (
        "range_cell_without_values",
        ("range: [1, 2]", "gap: 2"),
        12,
        "cells[1]",
        "a range cell needs stats (the values seen) or an explicit range",
    ),
]


@pytest.mark.parametrize("name,change,line,field,message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_heatmap(tmp_path, name, change, line, field, message):
    old, new = change
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(HeatError) as info:
        load_heatmap(path)
    d = next(d for d in info.value.diagnostics if d.message.startswith(field))
    assert message in d.message, d.render()
    assert d.line == line, d.render()
    rendered = d.render()
    assert rendered.startswith(f"{path}:{line}:") and "Traceback" not in rendered


def test_invalid_yaml_points_at_the_problem(tmp_path):
    path = _write(tmp_path, GOOD.replace("cells:\n", "cells:\n  - {pair: [glucose\n"))
    with pytest.raises(HeatError) as info:
        load_heatmap(path)
    d = info.value.diagnostics[0]
    assert d.message.startswith("not valid YAML") and d.line == 12


def test_rule_file_that_does_not_parse(tmp_path):
    (tmp_path / "extra.heat").write_text("rule r {\n  match glucose ..3 v:number\n  require v in [1, oops]\n}\n")
    path = _write(tmp_path, GOOD + "rules: [extra.heat]\n")
    with pytest.raises(HeatError) as info:
        compile_heatmap(path)
    d = info.value.diagnostics[0]
    assert (d.path, d.line, d.column) == (str(tmp_path / "extra.heat"), 3, 20)
    assert 'expected a number, found "oops"' in d.message


def test_a_compile_error_in_a_cell_points_at_the_heatmap(tmp_path):
    path = _write(tmp_path, GOOD.replace("literals: [mg/dL]", "literals: [mg/dL, glucose]"))
    with pytest.raises(HeatError) as info:
        compile_heatmap(path)
    d = info.value.diagnostics[0]
    assert d.path == str(path) and d.line == 7 and 'literal "glucose" is declared twice' in d.message


def test_several_errors_at_once(tmp_path):
    path = _write(tmp_path, GOOD.replace("score: 0.9", "score: 9").replace("score: 0.5", "score: -1"))
    with pytest.raises(HeatError) as info:
        load_heatmap(path)
    assert [d.line for d in info.value.diagnostics] == [11, 12]


# -- lowering ---------------------------------------------------------------------------


def test_margin_policy():
    assert margin_range(Stats(q01=45, q99=610, min=38), 0.5, 2.0) == (22.5, 1220)
    assert margin_range(Stats(min=2.5, max=6.0), 0.5, 2.0) == (1.25, 12.0)  # min/max stand in
    assert margin_range(Stats(q01=0, q99=12, min=0), 0.5, 2.0) == (0.0, 18.0)  # reaches zero: additive
    assert margin_range(Stats(q01=-4, q99=6, min=-5), 0.5, 2.0) == (-9.0, 11.0)


def test_lowering_follows_the_threshold():
    hm = load_heatmap(HERE / "good.yaml")
    lowered = lower(hm)
    text = format_file(lowered.tree)
    assert "rule glucose_mg_dl" in text and "require v in [22.5, 1220]" in text
    assert "match glucose ..3 v:number mg_dl" in text
    assert [c.id for c, _ in lowered.skipped] == ["glucose×number"]
    assert lowered.source_cell == {"glucose_mg_dl": "glucose×number×mg_dl"}


def test_a_date_cell_alone_bounds_every_date(tmp_path):
    """`pair: [date]`: every date, a year written alone too; a range open below (a date
    that names no year reads 0) rejects a year past the bound wherever it is written."""
    text = GOOD.replace(
        "expects:", "  - {pair: [date], score: 0.9, support: 40, range: [null, 2050]}\nexpects:"
    ).replace("rejects: [glucose_mg_dl]}", 'rejects: [glucose_mg_dl]}\n  - {text: "in 2119.", rejects: [any_date]}')
    hm = load_heatmap(_write(tmp_path, text, "dates.yaml"))
    assert hm.cells[-1].pair == ("date", "")
    source = format_file(lower(hm).tree)
    assert "match v:date\n" in source and "require v <= 2050" in source
    program, _lowered, _hm = compile_heatmap(tmp_path / "dates.yaml")
    from heatc.verify.backends import run_document
    from heatc.verify.expect import check_expects

    assert check_expects(program, lambda p, d: run_document("reference", p, d)[:2]) == []
    text = b"Between 2017 and 2019, on 09/05, in December 2069."
    events = run_document("reference", program, text)[0]
    assert [(text[e.start : e.end], e.verdict.name) for e in events if e.name == "any_date"] == [
        (b"2017", "CONFIRMED"), (b"2019", "CONFIRMED"), (b"09/05", "CONFIRMED"), (b"December 2069", "REJECTED")
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["medical", "finance", "legal"])
def test_shipped_heatmaps_compile_and_keep_their_examples(name):
    program, _lowered, hm = compile_heatmap(Path(__file__).parent.parent / "heatmaps" / f"{name}.yaml")
    assert len(program.rules) >= 8 and hm.tokenizer.kind == "embedded"
    assert len(program.expects) >= 5
    from heatc.verify.backends import run_document
    from heatc.verify.expect import check_expects

    assert check_expects(program, lambda p, d: run_document("reference", p, d)[:2]) == []


def test_a_punct_unit_reads_only_a_bare_value_ending_an_item(tmp_path):
    """A keyword cell whose `unit` is a `punct` category reads a value written bare: that
    category or the barrier right after it ("sodium 138, potassium 4.0."), never a value a
    unit follows ("sodium bicarbonate 650 mg,") — so its range can be the lab value's."""
    text = (
        GOOD.replace("  period:", '  sodium: {kind: keyword, literals: [sodium]}\n  mg: {kind: unit, literals: [mg]}\n'
                     '  comma: {kind: punct, literals: [","]}\n  period:')
        .replace("cells:\n", "cells:\n  - {pair: [sodium, number], unit: comma, score: 0.9, support: 40, range: [97, 169]}\n")
    )  # fmt: skip
    hm = load_heatmap(_write(tmp_path, text, "bare.yaml"))
    assert "match sodium ..3 v:number (comma | period)\n" in format_file(lower(hm).tree)
    program, _lowered, _hm = compile_heatmap(tmp_path / "bare.yaml")
    from heatc.verify.backends import run_document

    doc = b"Sodium 1380, potassium 4. Sodium 138. Sodium 13.8 today. Sodium bicarbonate 650 mg, sodium 14."
    for backend in ("reference", "wasm"):
        events = run_document(backend, program, doc)[0]
        got = [(doc[e.start : e.end].decode(), e.verdict.name) for e in events if e.name == "sodium_comma"]
        assert got == [("Sodium 1380,", "REJECTED"), ("Sodium 138.", "CONFIRMED"), ("sodium 14.", "REJECTED")]
