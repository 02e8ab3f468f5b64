"""Cell scores for the learner's tests, without a teacher: (scores, strengths) as
`heatc.learn.cells.couplings.Couplings` gives them for cells coupled this strongly with their
keyword, `probes` times each, at a distance where the baseline is 1."""

from __future__ import annotations

from heatc.learn.cells.couplings import Couplings


def scored(strengths: dict, probes: int = 3) -> tuple[dict, dict]:
    c = Couplings()
    c.by_distance[-1] = [1.0]
    for key, x in strengths.items():
        c.evidence[key] = [((x, -1),)] * probes
    return c.scores(strengths, probes), {k: c.strength(k) for k in strengths}
