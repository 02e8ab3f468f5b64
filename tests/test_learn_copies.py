"""Copies of a document (`heatc.learn.text.corpus.copy_groups`) share a cross-validation fold, so
a value they both state is not vouched for by its own copy."""

from __future__ import annotations

from heatc.learn.cells.ranges import range_options
from heatc.learn.text.corpus import copy_groups
from heatc.learn.text.evidence import CellKey, CellValues

NOTE = (
    "The patient is a 54-year-old man seen today for his annual visit. "
    "He reports no chest pain and no shortness of breath at rest. "
    "His blood pressure was taken twice and was normal both times. "
    "We reviewed his medications and made no changes to the regimen. "
)


def test_a_transcription_filed_twice_is_one_copy_group():
    """The same note filed under another specialty (its last line differs) is a copy of the
    first; so is a short one whose sentences but one are the first's. A note that shares one
    stock sentence with another, and one-sentence texts, are no copies."""
    other = (
        "The patient is a 61-year-old woman with a history of asthma. "
        "She was seen in the clinic after three days of wheezing and cough. "
        "We reviewed his medications and made no changes to the regimen. "
    )
    texts = [
        NOTE + "cardiology, annual visit",
        other,
        NOTE + "general medicine, annual visit",  # a copy of 0
        "A single sentence long enough to be counted as one here.",
        "A single sentence long enough to be counted as one here.",
        NOTE.replace("no changes to the regimen", "one change: amlodipine") + "nephrology",  # all but one
    ]
    assert copy_groups(texts) == [0, 1, 0, 3, 4, 0]


def test_a_copy_in_another_fold_does_not_vouch_for_its_own_values():
    """Forty notes write a lab value of 4–6; one note and its copy also write 40. In folds by
    document the copy sits in another fold and vouches for the 40, so a range that rejects it
    looks free out of sample; with copies in one fold, the estimate counts both values."""

    def values(copy_of: dict[int, int]) -> CellValues:
        cv = CellValues(copy_of=copy_of)
        for d in range(40):
            for v in (4.0 + (d % 5) * 0.5, 5.0):
                cv.values.append(v)
                cv.per_document[d].append(v)
        for d in (40, 41):  # 41 is a copy of 40
            cv.values.append(40.0)
            cv.per_document[d].append(40.0)
        return cv

    key = CellKey("lab", "number", "")

    def expected(cv: CellValues) -> float:
        # the narrowest option that accepts every value seen
        return min(
            (o for o in range_options(cv, key, 1.5) if o.rejected == 0), key=lambda o: o.bounds[1] or 1e18
        ).expected

    assert expected(values({})) == 0
    assert expected(values({41: 40})) == 2
