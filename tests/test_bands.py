"""Magnitude bands: `consistent v within factor F` in the language, the heatmap's `band:`
field, and the learner's choice of a band (`heatc.learn.cells.bands`), whose simulation of a
document must reject exactly what the reference interpreter rejects."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import compile_cached

from heatc.errors import HeatError
from heatc.heatmap.build import compile_heatmap
from heatc.heatmap.format import load_heatmap
from heatc.heatmap.lower import lower
from heatc.lang.unparse import format_file
from heatc.learn.cells.bands import BAND_FACTORS, band_alarms, band_options, slips_noticed
from heatc.learn.text.evidence import CellKey, CellValues
from heatc.semantics.reference import scan
from heatc_runtime import Verdict

BAND_RULES = """
ruleset amounts
class million unit = "million"
rule m heat 0.9 {
  match v:number million
  consistent v within factor %d
}
"""


def test_band_alarms_by_hand():
    # 4 then 0.001 (4 / 0.001 = 4000 > 1000: rejected, not kept), then 3000 (3000 / 4 = 750: inside)
    assert band_alarms([[4, 0.001, 3000]], 1000) == (1, 2)
    # the band widens both ways: 10, 50, 5 inside a factor 10; 60 > 5 x 10
    assert band_alarms([[10, 50, 5, 60]], 10) == (1, 3)
    # values <= 0 are not compared; the first positive value of a document compares with nothing
    assert band_alarms([[0, 7, 0], [9]], 10) == (0, 0)
    assert band_alarms([[0, 7, 0, 8]], 10) == (0, 1)


def test_slips_noticed_by_hand():
    # 1 and 2 within 10x: 1 x 1000 > 2 x 10 and 2 x 1000 > 1 x 10 (up); 1 / 1000 x 10 < 2 and
    # 2 / 1000 x 10 < 1 (down): all four slips noticed
    assert slips_noticed([[1, 2]], 10) == 4
    # a band of 999 around 1 and 500: 500 x 1000 > 999 (up), 1 x 1000 > 500 x 999? no;
    # down: 1 / 1000 x 999 < 500 yes, 500 / 1000 x 999 < 1? no (499.5)
    assert slips_noticed([[1, 500]], 999) == 2


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.sampled_from([0, 0.5, 1, 2, 3.5, 10, 42, 99, 100, 500, 1000, 2500, 9999]), max_size=8),
    factor=st.sampled_from([2, 10, 100, 999]),
)
def test_the_learner_simulates_what_the_rule_rejects(values, factor):
    """band_alarms reads a document as the reference interpreter runs the band's rule."""
    program = compile_cached(BAND_RULES % factor)
    text = " ; ".join(f"{v:g} million" for v in values) + "."
    events, _, _ = scan(program, text.encode())
    rejected = sum(e.verdict is Verdict.REJECTED for e in events if e.kind == "match")
    assert rejected == band_alarms([values], factor)[0]


def _cell_values(per_document: dict[int, list[float]]) -> CellValues:
    cv = CellValues()
    for d, vs in per_document.items():
        cv.per_document[d].extend(vs)
        cv.values.extend(vs)
    return cv


def test_band_options_take_the_factors_the_corpus_allows():
    key = CellKey("", "number", "scale_million")
    # every document spans at most 30x: every factor from 50 holds with no false alarm; 10 and
    # 20 reject values of every document
    docs = {d: [1.0 + d, 30.0 + 30 * d, 5.0 + d] for d in range(10)}
    offered = band_options(key, _cell_values(docs))
    assert [f for f, _, _ in offered] == [f for f in BAND_FACTORS if f >= 50]
    assert all(rejected == 0 for _, rejected, _ in offered)
    # too few documents that state the cell twice, or no unit to tell a scale: no band
    assert band_options(key, _cell_values({d: docs[d] for d in range(4)})) == []
    assert band_options(CellKey("revenues", "number", ""), _cell_values(docs)) == []
    # a unit that is no scale word: its slips are tenfold, which a range notices ("1.75 years"
    # and a director's "76 years" in one 10-K are no scale slip)
    assert band_options(CellKey("", "number", "years"), _cell_values(docs)) == []
    assert band_options(CellKey("currency", "number", "scale_billion"), _cell_values(docs))


def _heatmap(tmp_path, cell: str):
    path = tmp_path / "hm.yaml"
    path.write_text(
        "heatmap: 1\nname: bands\ntokenizer: {bytes: true}\n"
        "categories:\n  scale_million: {kind: unit, literals: [million]}\n"
        f"cells:\n{cell}",
        encoding="utf-8",
    )
    return path


def test_a_band_cell_lowers_to_a_band(tmp_path):
    path = _heatmap(
        tmp_path,
        "  - {pair: [number, scale_million], score: 0.9, range: [0.01, 90000], band: 500, name: amounts}\n",
    )
    assert "consistent v within factor 500" in format_file(lower(load_heatmap(path)).tree)
    program, _, _ = compile_heatmap(path)
    events, verdicts, _ = scan(program, b"Revenue 328.8 million, costs 0.3288 million.")
    assert verdicts["amounts"] is Verdict.REJECTED
    assert [e.conflict.channel for e in events if e.conflict] == ["amounts.v (largest)"]


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (
            "  - {pair: [number, scale_million], score: 0.9, range: [1, 9], band: 1}\n",
            "cells[0].band: expected a whole number between 2",
        ),
        (
            "  - {pair: [number, scale_million], score: 0.9, range: [1, 9], band: 2.5}\n",
            "cells[0].band: expected a whole number",
        ),
        (
            "  - {pair: [number, scale_million], score: 0.9, check: consistent, band: 10}\n",
            "only a range cell takes a band",
        ),
    ],
)
def test_a_bad_band_is_refused(tmp_path, cell, message):
    with pytest.raises(HeatError) as err:
        load_heatmap(_heatmap(tmp_path, cell))
    assert message in str(err.value)


def test_the_manifest_marks_a_bands_channels():
    """A band's channels carry `band: true` in the module's manifest, and the conflicts layer
    reads that mark, not their names: a band states a magnitude, not a term, so a rule set
    whose only consistency is a band has none to compare across chunks."""
    from heatc.verify.backends import module_info, wasm_checker
    from heatc_runtime.reports.conflicts import NoConsistencyRulesError

    both = compile_cached(
        'ruleset t\nclass fee keyword = "fee"\nclass usd unit = "USD"\n'
        "rule fee_usd { match k:fee ..3 v:number usd\n  consistent v within factor 100 per k\n  consistent v }\n"
    )
    assert both.band_slots() == {0, 1}  # smallest and largest per key class (one: fee); then the exact channel
    info = module_info(both)
    assert info.bands == {both.channels[0].name, both.channels[1].name}
    assert [name for name, _ in info.channels if name not in info.bands] == [both.channels[2].name]
    alone = compile_cached(
        'ruleset t\nclass fee keyword = "fee"\nrule f { match fee ..3 v:number\n  consistent v within factor 10 }\n'
    )
    with pytest.raises(NoConsistencyRulesError, match="other than magnitude bands"):
        wasm_checker(alone).conflicts(["fee 5", "fee 6"])
