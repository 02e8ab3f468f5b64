"""Guard's masking of a torch score tensor, and forcing EOS: shared by the transformers and
vLLM adapters (both hold scores as a [rows, vocabulary] torch tensor).

Public surface: `guard_scores(driver, scores, rows, eos)`, `force_eos(scores, index, eos)`.
"""

from __future__ import annotations

import numpy as np
import torch

from .core import Driver

_NEG = float("-inf")


def force_eos(scores: torch.Tensor, index: int, eos: list[int]) -> None:
    """Make row `index` of `scores` choose an end-of-sequence token (in place)."""
    scores[index] = _NEG
    scores[index, eos] = 0.0  # (not the EOS's own score: a min-length rule may have set it to -inf)


def guard_scores(
    driver: Driver, scores: torch.Tensor, rows: np.ndarray, index: list[int] | None, eos: list[list[int]]
) -> torch.Tensor:
    """Mask the candidates guard refuses. `scores` rows `index` (all of them when None) hold
    the driver's rows `rows`; `eos[i]` are the end-of-sequence ids of `rows[i]`. Only the
    top-k candidates that pass keep their scores: sampling cannot reach a token that was
    not tried. Returns the scores (changed in place where `index` is given)."""
    sub = scores if index is None else scores[index]
    k = min(driver.max_k(rows), sub.shape[1])
    values, ids = torch.topk(sub, k, dim=-1)
    usable = torch.isfinite(values).cpu().numpy()
    ok = driver.guard(rows, ids.cpu().numpy(), usable)
    kept = torch.where(torch.from_numpy(ok).to(values.device), values, _NEG)
    out = torch.full_like(sub, _NEG).scatter_(1, ids, kept)
    for i in np.flatnonzero(~ok.any(axis=1)).tolist():
        row_eos = eos[i]
        if driver.on_exhausted(int(rows[i])) == "stop" and row_eos:
            force_eos(out, i, row_eos)
        else:  # "pass" (or no EOS to end it with): this step is left as the model wrote it
            out[i] = sub[i]
    if index is None:
        return out
    scores[index] = out
    return scores
