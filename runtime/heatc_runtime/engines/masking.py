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
        step = driver.guard(rows, cands.astype(np.int64), usable)
    else:
        step = driver.guard_drafts(rows, drafts, cands.astype(np.int64), usable)
    ok, force, leave = step.ok, step.force, step.leave
    at = np.arange(len(rows)) if whole else index
    special = (force != -1) | leave
    refused = usable & ~ok & ~special[:, None]
    dead = ~ok.any(axis=1) & ~special  # (the driver forces or leaves these; kept for safety)
    if greedy:
        # a row whose best passing candidate is tied with the k-th score is confined: an
        # untried token of that score could win argmax
        best = np.where(ok, vals, -np.inf).max(axis=1, initial=-np.inf)
        confine = ~special & ~dead & (best <= vals[:, -1]) & refused.any(axis=1)
    else:
        confine = ~special & ~dead
    dev = scores.device
    if confine.any():
        rows_c = np.flatnonzero(confine)
        keep = ok[rows_c]
        target = torch.from_numpy(at[rows_c]).to(dev)
        scores.index_fill_(0, target, _NEG)
        r, j = np.nonzero(keep)
        if len(r):
            scores[torch.from_numpy(at[rows_c][r]).to(dev), ids[torch.from_numpy(rows_c[r]), torch.from_numpy(j)]] = (
                values[torch.from_numpy(rows_c[r]), torch.from_numpy(j)]
            )
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
