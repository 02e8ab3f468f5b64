"""Guard on a torch score tensor, and forcing a token: shared by the transformers and vLLM
adapters (both hold scores as a [rows, vocabulary] torch tensor), for the host backends.

One top-k over the scores gives each row's candidates; the driver judges them (`Driver.guard`);
the scores are then changed in place, never copied or reallocated:

- under greedy decoding only the refused candidates are set to -inf: the largest score left
  is the best candidate that passed (a row whose best passing candidate ties with the k-th
  score, where a token outside the top k could win the tie, is confined as under sampling);
- under sampling each guarded row is confined to the candidates that passed (every other
  score -inf): sampling cannot reach a token that was not tried;
- a row the driver forces (the next token of the marker, or an end-of-sequence token) gets
  -inf everywhere but that token; a row it leaves (exhausted, `on_exhausted="pass"`) is left.

Public surface: `guard_scores(driver, scores, rows, index, eos, greedy, drafts)`, `force_eos(scores,
index, eos)`, `force_token(scores, index, token)`.
"""

from __future__ import annotations

import numpy as np
import torch

from .core import FORCE_EOS, Driver

_NEG = float("-inf")


def force_eos(scores: torch.Tensor, index: int, eos: list[int]) -> None:
    """Make row `index` of `scores` choose an end-of-sequence token (in place)."""
    scores[index] = _NEG
    scores[index, eos] = 0.0  # (not the EOS's own score: a min-length rule may have set it to -inf)


def force_token(scores: torch.Tensor, index: int, token: int) -> None:
    """Make row `index` of `scores` choose `token` (in place)."""
    scores[index] = _NEG
    scores[index, token] = 0.0


def guard_scores(driver: Driver, scores: torch.Tensor, rows: np.ndarray, index: np.ndarray | None,
                 eos: list[list[int]], greedy: bool = False, drafts: list | None = None) -> torch.Tensor:  # fmt: skip
    """Guard the driver's rows `rows`, held by rows `index` of `scores` (all of them, in order,
    when None); `eos[i]` are the end-of-sequence ids of `rows[i]`; `drafts[i]`, when given, the
    tokens the engine proposes after what `rows[i]` was fed (the scores are for the position
    after them: `Driver.guard_drafts`). Changes `scores` in place and returns it."""
    k = min(driver.max_k(rows), scores.shape[1])
    whole = index is None
    sub = scores if whole else scores[torch.from_numpy(index)]
    values, ids = torch.topk(sub, k, dim=-1)
    vals, cands = values.numpy(force=True), ids.numpy(force=True)
    usable = np.isfinite(vals)
    if drafts is None:
        step = driver.guard(rows, cands, usable, greedy)
    else:
        step = driver.guard_drafts(rows, drafts, cands, usable, greedy)
    ok, force, leave = step.ok, step.force, step.leave
    if (
        greedy
        and ok[:, 0].all()
        and force.max(initial=-1) < 0
        and not leave.any()
        and (k == 1 or (vals[:, 1] < vals[:, 0]).all())
    ):
        return scores  # (the common greedy step: every row's first choice passed, and nothing ties with it)
    untried = step.untried if step.untried is not None else np.zeros_like(ok)
    at = np.arange(len(rows)) if whole else index
    special = (force != -1) | leave
    refused = usable & ~ok & ~untried & ~special[:, None]
    passing = ok.any(axis=1)
    if greedy:
        # masking the refused in place leaves the best that passed on top — unless a token not
        # judged ties with it (the next candidate, or, for the k-th, one outside the top k)
        first = ok.argmax(axis=1)
        lines = np.arange(len(rows))
        best = vals[lines, first]
        confine = ~special & passing & (vals[lines, np.minimum(first + 1, k - 1)] >= best)
    else:
        confine = ~special & passing
    if not (confine.any() or refused.any() or special.any()):
        return scores  # (the common step: every row's first choice passed)
    dev = scores.device
    if confine.any():
        rows_c = np.flatnonzero(confine)
        keep = ok[rows_c]
        scores.index_fill_(0, torch.from_numpy(at[rows_c]).to(dev), _NEG)
        r, j = np.nonzero(keep)
        if len(r):
            rr, jj = torch.from_numpy(rows_c[r]), torch.from_numpy(j)
            scores[torch.from_numpy(at[rows_c][r]).to(dev), ids[rr, jj]] = values[rr, jj]
        refused[rows_c] = False
    if refused.any():
        r, j = np.nonzero(refused)
        scores[torch.from_numpy(at[r]).to(dev), ids[torch.from_numpy(r), torch.from_numpy(j)]] = _NEG
    for i in np.flatnonzero(force != -1).tolist():
        if force[i] == FORCE_EOS:
            if eos[i]:
                force_eos(scores, int(at[i]), eos[i])
        else:
            force_token(scores, int(at[i]), int(force[i]))
    return scores
