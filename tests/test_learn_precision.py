"""A range cell's precision (`heatc.learn.cells.precision`): a quantity written to a fixed number of
digits after the point gets `places: P`, whose rule notices a decimal point slipped one place
left ("pulse 7.2" for 72) where no range of real pulses can."""

from __future__ import annotations

import dataclasses

from support.learn_scores import scored as _scored

from heatc.heatmap.build import compile_heatmap
from heatc.learn.cells.budget import CellContext, cell_table
from heatc.learn.cells.precision import CAP_SHARE, CAP_VALUES, capped_options, places_cap
from heatc.learn.cells.ranges import range_options
from heatc.learn.config import CellsConfig
from heatc.learn.text.evidence import CellKey, collect_values
from heatc.learn.text.lexemes import Lexicon
from heatc.verify.backends import run_document


def test_the_cap_is_the_fewest_places_all_but_a_small_share_keep_to():
    assert places_cap([0] * 98 + [1] * 2) == 0  # two stray decimals in a hundred pulses
    assert places_cap([0] * 90 + [1] * 10) == 1  # a tenth written with one: that is the precision
    assert places_cap([1] * 60 + [2] * 5 + [0] * 5) == 2
    assert places_cap([0] * (CAP_VALUES - 1)) is None  # too few values to say
    assert places_cap([4] * 50) is None  # written more precisely than any cap
    n = 200
    assert places_cap([0] * n + [1] * int(CAP_SHARE * n) + [1]) == 1  # one more than the share allows


def _glucose(n: int) -> list[str]:
    """Glucose values from 60 to 450: ten times smaller, the high ones lie among the low ones."""
    return [f"Glucose {60 + (37 * i) % 391} today." for i in range(n)]


def test_a_quantity_written_in_whole_numbers_gets_a_cap_that_notices_a_slipped_point():
    lexicon = Lexicon().with_keywords(["glucose"])
    key = CellKey("glucose", "number", "")
    values = collect_values(lexicon, [key], _glucose(120))
    cv = values[key]
    assert sum(len(p) for p in cv.places.values()) == 120 and {p for ps in cv.places.values() for p in ps} == {0}
    plain = range_options(cv, key)
    capped = [o for o in capped_options(key, cv, plain) if o.places is not None]
    assert len(capped) == len(plain) and all(o.places == 0 for o in capped)
    # a capped range notices what the range does, and every value written ten times smaller
    for o, c in zip(plain, capped, strict=True):
        assert c.power >= o.power and c.rejected == o.rejected and c.unseen > o.unseen
    assert any(c.power > o.power for o, c in zip(plain, capped, strict=True))
    settings = CellsConfig(min_support=5, min_probes=3, sensitivity=0.75)
    [cell] = cell_table(
        values, *_scored({key: 3.5}), dataclasses.replace(settings, places=True), CellContext(sentences=10_000)
    )
    assert cell.places == 0  # "glucose 21.3" for 213 lies within any range of real values
    [cell] = cell_table(values, *_scored({key: 3.5}), settings, CellContext(sentences=10_000))  # off unless asked for
    assert cell.places is None


def test_a_quantity_that_spans_decades_gets_no_cap():
    """Doses in mcg run from 12.5 to 1000 and small ones are written with decimals somewhere
    ("0.25 mcg"), however few of them a corpus shows: no precision is read from them."""
    lexicon = Lexicon().with_keywords(["dose"])
    key = CellKey("dose", "number", "")
    texts = [f"Dose {v} today." for v in (10, 25, 50, 100, 200, 500, 1000, 12, 75, 150) * 8]
    cv = collect_values(lexicon, [key], texts)[key]
    plain = range_options(cv, key)
    assert plain and capped_options(key, cv, plain) == plain


def test_a_learned_cap_lowers_to_a_places_requirement_every_backend_runs(tmp_path):
    heatmap = tmp_path / "vitals.yaml"
    heatmap.write_text(
        """heatmap: 1
name: vitals
tokenizer: {bytes: true}
categories:
  pulse: {kind: keyword, literals: ["pulse"]}
cells:
  - {name: pulse_value, pair: [pulse, number], score: 0.9, range: [null, 195], places: 0}
expects:
  - {text: "Pulse 72.", passes: [pulse_value]}
  - {text: "Pulse 7.2.", rejects: [pulse_value]}
""",
        encoding="utf-8",
    )
    program = compile_heatmap(heatmap)[0]
    for backend in ("reference", "wasm", "native"):
        verdicts = {
            text: str(run_document(backend, program, text.encode())[1]["pulse_value"])
            for text in ("Pulse 72 and BP 120/80.", "Pulse 7.2 and BP 120/80.", "Pulse 72.0.")
        }
        assert verdicts == {
            "Pulse 72 and BP 120/80.": "CONFIRMED",
            "Pulse 7.2 and BP 120/80.": "REJECTED",
            "Pulse 72.0.": "REJECTED",  # written more precisely than the corpus writes pulses
        }, backend
