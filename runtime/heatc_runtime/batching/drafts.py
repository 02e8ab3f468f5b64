"""Draft tokens checked in one call (speculative decoding): `Batch.verify(drafts)`, which
`Batch` takes from the `DraftChecks` mixin here.

An engine that drafts several tokens a step (a draft model, prompt lookup, multi-token heads)
asks which of them the rules let through. Every sequence is fed its drafts one position at a
time, all the sequences together (one runtime call a position); a sequence keeps the longest
prefix of its drafts that adds no rejection — the position that adds one is taken back (state
records are fixed-size: a checkpoint is a copy), and so is everything after it. What the kept
tokens published is returned; what the taken-back ones published never happened.

"Adds no rejection" is read as fed, not as guard reads a candidate: a number still being
written ("5", "000" of 5000 before its unit) has not been judged yet. Guard's judgement of a
draft position (the text ended there, probes, years) is `engines.core.Driver.guard_drafts`.

Public surface: `DraftChecks` (`verify(drafts, lengths)`).
"""

from __future__ import annotations

import numpy as np

from ..errors import CheckerClosed, ModuleError, ModuleTrap, SequenceInterrupted  # noqa: F401 (the Raises sections name them)
from ..reports.report import Snapshot


class DraftChecks:
    """`verify`, mixed into `Batch` (it steps the batch through its public methods only)."""

    def verify(self, drafts, lengths=None) -> tuple[np.ndarray, dict[int, list[Snapshot]]]:
        """Speculative decoding's check: sequence i is fed its draft tokens and keeps the
        longest prefix that adds no rejection, the state left there. One runtime call per
        draft position for the whole batch.

        Parameters
        ----------
        drafts : array_like of int, shape (n, d)
            Each sequence's draft token ids, in order.
        lengths : array_like of int, shape (n,), optional
            How many of its drafts sequence i is fed (0 to d); default all of them.

        Returns
        -------
        kept : numpy.ndarray of int64, shape (n,)
            How many drafts each sequence kept.
        published : dict of int to list of Snapshot
            The snapshots the kept tokens published, by sequence.

        Raises
        ------
        ValueError
            `drafts` is not an [n, d] array or `lengths` not n counts from 0 to d.
        TypeError
            The draft ids are not integers.
        ModuleError
            The module's manifest does not say where a state keeps its rejections.
        ModuleTrap
            The step ran out of its budget or trapped.
        SequenceInterrupted
            A sequence was interrupted by an earlier trap.
        CheckerClosed
            The batch or its checker was closed.
        """
        return _verify(self, drafts, lengths)


def _verify(batch, drafts, lengths) -> tuple[np.ndarray, dict[int, list[Snapshot]]]:
    drafts = np.asarray(drafts)
    if drafts.ndim != 2 or drafts.shape[0] != batch.n:
        raise ValueError(f"drafts must be a [{batch.n}, d] array of token ids, got shape {drafts.shape}")
    if drafts.dtype.kind not in "iu":
        raise TypeError(f"draft token ids must be integers, got {drafts.dtype} values")
    n, d = drafts.shape
    lengths = np.full(n, d, np.int64) if lengths is None else np.asarray(lengths, np.int64)
    if lengths.shape != (n,) or (lengths < 0).any() or (lengths > d).any():
        raise ValueError(f"lengths must be {n} counts from 0 to {d}")
    layout = batch.checker.manifest["layout"]
    if "rejections_offset" not in layout:
        raise ModuleError("this module's manifest does not say where a state keeps its rejections: rebuild it")
    at = int(layout["rejections_offset"])
    every = np.arange(n)
    kept = np.zeros(n, np.int64)
    going = lengths > 0
    published: dict[int, list[Snapshot]] = {}
    for j in range(d):
        rows = np.flatnonzero(going)
        if not len(rows):
            break
        saved = batch.copy_states(every)
        pending = [batch.pending(i) for i in range(n)]
        ids = np.where(going, drafts[:, j], drafts[rows[0], j]).astype(np.uint32)  # (the others are put back)
        snaps = batch.feed_ids(ids)
        before = saved[:, at : at + 8].copy().view("<u8").ravel()
        after = batch.copy_states(every)[:, at : at + 8].copy().view("<u8").ravel()
        took = going & (after == before)
        back = np.flatnonzero(~took)
        for i in back.tolist():
            batch.restore(i, (saved[i], pending[i]))
        for i in np.flatnonzero(took).tolist():
            if i in snaps:
                published.setdefault(i, []).extend(snaps[i])
        kept += took
        going = took & (kept < lengths)
    return kept, published
