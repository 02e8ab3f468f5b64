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

import functools

import numpy as np
import torch

from ..backends.extension import native_extension
from ..errors import ModuleError
from .core import FORCE_EOS, Driver

_NEG = float("-inf")


def best_k(scores: torch.Tensor, index: np.ndarray | None, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best scores of rows `index` of `scores` (all rows when None) and their token ids,
    best first (numpy, rows × k). Float32 scores on the CPU go through the native core's scan
    (~4 µs a row of 49,152 where torch.topk takes ~80; equal scores by the lower id, as an
    argmax takes them); any other tensor through torch.topk."""
    if scores.device.type == "cpu" and scores.dtype == torch.float32 and scores.is_contiguous() and scores.dim() == 2:
        topk = _native_topk()
        if topk is not None:
            n = scores.shape[0] if index is None else len(index)
            vals, ids = np.empty((n, k), np.float32), np.empty((n, k), np.int64)
            at = None if index is None else np.ascontiguousarray(index, dtype=np.int64)
            topk(scores.detach().numpy(), scores.shape[0], scores.shape[1], at, n, k, vals, ids)
            return vals, ids
    sub = scores if index is None else scores[torch.from_numpy(np.asarray(index, dtype=np.int64)).to(scores.device)]
    values, ids = torch.topk(sub, k, dim=-1)
    return values.numpy(force=True), ids.numpy(force=True)


def _uniform(scores: torch.Tensor) -> bool:
    """All of a row's scores equal, in every row (asked when each row's k best are): three
    columns compared first, the whole rows only when those are."""
    if scores.device.type != "cpu" or scores.shape[1] < 2:
        return False
    s = scores.detach()
    s = s.numpy() if s.dtype in (torch.float32, torch.float64, torch.float16) else s.float().numpy()
    a = s[:, 0]
    if not ((s[:, 1] == a).all() and (s[:, -1] == a).all()):
        return False
    return bool((s.max(axis=-1) == s.min(axis=-1)).all())


@functools.cache
def _native_topk():
    try:
        return native_extension().topk
    except (ModuleError, AttributeError):  # (no extension: torch.topk)
        return None


def force_eos(scores: torch.Tensor, index: int, eos: list[int]) -> None:
    """Make row `index` of `scores` choose an end-of-sequence token (in place)."""
    scores[index] = _NEG
    scores[index, eos] = 0.0  # (not the EOS's own score: a min-length rule may have set it to -inf)


def force_token(scores: torch.Tensor, index: int, token: int) -> None:
    """Make row `index` of `scores` choose `token` (in place)."""
    scores[index] = _NEG
    scores[index, token] = 0.0


def guard_scores(driver: Driver, scores: torch.Tensor, rows: np.ndarray, index: np.ndarray | None,
                 eos: list[list[int]], greedy: bool = False, drafts: list | None = None,
                 uniform_passes: bool = False) -> torch.Tensor:  # fmt: skip
    """Guard the driver's rows `rows`, held by rows `index` of `scores` (all of them, in order,
    when None); `eos[i]` are the end-of-sequence ids of `rows[i]`; `drafts[i]`, when given, the
    tokens the engine proposes after what `rows[i]` was fed (the scores are for the position
    after them: `Driver.guard_drafts`). With `uniform_passes`, scores equal across every row
    (no model wrote them: transformers' prompt lookup asks so whether a draft is forbidden) are
    left as they are. Changes `scores` in place and returns it."""
    k = min(driver.max_k(rows), scores.shape[1])
    whole = index is None
    vals, cands = best_k(scores, index, k)
    if uniform_passes and (vals[:, 0] == vals[:, -1]).all() and _uniform(scores):
        return scores
    usable = np.isfinite(vals)
    if drafts is None:
        step = driver.guard(rows, cands, usable, greedy)
    else:
        step = driver.guard_drafts(rows, drafts, cands, usable, greedy)
    ok, force, leave = step.ok, step.force, step.leave
    if step.clear and greedy and (k == 1 or (vals[:, 1] < vals[:, 0]).all()):
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
            rr, jj = rows_c[r], j
            scores[torch.from_numpy(at[rows_c][r]).to(dev), torch.from_numpy(cands[rr, jj]).to(dev)] = torch.from_numpy(
                vals[rr, jj]
            ).to(dev, scores.dtype)
        refused[rows_c] = False
    if refused.any():
        r, j = np.nonzero(refused)
        scores[torch.from_numpy(at[r]).to(dev), torch.from_numpy(cands[r, j]).to(dev)] = _NEG
    for i in np.flatnonzero(force != -1).tolist():
        if force[i] == FORCE_EOS:
            if eos[i]:
                force_eos(scores, int(at[i]), eos[i])
        else:
            force_token(scores, int(at[i]), int(force[i]))
    return scores
