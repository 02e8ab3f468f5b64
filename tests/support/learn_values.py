"""A cell's values as the learner collects them, spread evenly over documents, for the range
tests (numpy only: no teacher, no torch)."""

from __future__ import annotations

from heatc.learn.text.evidence import CellValues


def spread_values(values: list[float], documents: int = 40) -> CellValues:
    cv = CellValues()
    for i, v in enumerate(values):
        cv.values.append(v)
        cv.per_document[i % documents].append(v)
    return cv
