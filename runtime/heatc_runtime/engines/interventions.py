"""What guard does where it refused a candidate — the row's policy (`withhold`, `stop`,
`steer`), the checkpoint of each value a guard row writes (kept each step before the token
is fed: `_tails_step`), the value taken back out of what the rules read, the interventions
a report lists — at the step being decided, or tentatively at a draft position (assisted and speculative
decoding judge a position per draft token; what was decided there applies when the engine
takes exactly those drafts). `Driver` (engines/core.py) has these methods from
`Interventions`; they read its rows, states and tails.

Public surface: `GuardStep`, `FORCE_EOS`; `Interventions` for `Driver`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..reports.report import Snapshot
from . import guarding
from .guarding import MASK_ALLOWED, MASK_UNTRIED
from .options import RowOptions
from .reports import Intervention, Refusal

FORCE_EOS = -2
"""`GuardStep.force`: the row must end now (the adapter writes its end-of-sequence token)."""


@dataclass
class GuardStep:
    """What guard decided for rows × K candidates: `ok` — the candidates that passed;
    `force` — per row, the token it must take (the next marker token), `FORCE_EOS`, or -1;
    `leave` — rows whose scores stay as the model wrote them (exhausted, on_exhausted="pass")."""

    ok: np.ndarray
    force: np.ndarray
    leave: np.ndarray
    untried: np.ndarray | None = None  # greedy: candidates below a row's first that passed
    clear: bool = False  # every row's first candidate passed; nothing forced, nothing left


class _Masked:
    """A step where guard masked candidates below the model's first choice, which stood: kept
    as the ids alone, made an Intervention ("masked") when the report is built."""

    __slots__ = ("refused", "step")
    action = "masked"

    def __init__(self, step: int, refused: np.ndarray):
        self.step, self.refused = step, refused


class _Row:
    __slots__ = ("exhausted_at", "interventions", "marker", "options", "prompt", "prompt_snaps", "snaps", "stopped_at")  # fmt: skip

    def __init__(self, options: RowOptions, marker: tuple[int, ...]):
        self.options = options
        self.marker = marker  # the marker's token ids
        self.prompt = b""
        self.prompt_snaps: list[Snapshot] = []
        self.snaps: list[Snapshot] = []
        self.stopped_at: int | None = None
        self.interventions: list[Intervention] = []
        self.exhausted_at: int | None = None


class Interventions:
    """`Driver`'s policies and draft positions (a mixin: every attribute is the driver's)."""

    @staticmethod
    def _marker_start(r: _Row) -> int:
        """The step at which the row's last withheld value's marker began."""
        return next(iv.step for iv in reversed(r.interventions) if iv.action == "withheld")

    def guard_drafts(self, rows: np.ndarray, drafts: Sequence[Sequence[int]], candidates: np.ndarray,
                     usable: np.ndarray, greedy: bool = False) -> GuardStep:  # fmt: skip
        """Guard's decision at the text of each row continued by its drafts (token ids the engine
        proposes and has not taken yet: assisted and speculative decoding judge a position per
        draft token). The sequences do not change; what the policies decide is kept, and applies
        when the engine takes exactly those drafts (`feed`).

        Parameters
        ----------
        rows : numpy.ndarray of int
            The rows judged.
        drafts : sequence of sequence of int
            Each row's draft token ids.
        candidates : numpy.ndarray of int
            The candidates at the position after the drafts, rows × K, best first.
        usable : numpy.ndarray of bool
            The candidates the engine could sample at all.
        greedy : bool
            Whether the engine decodes greedily.

        Returns
        -------
        GuardStep
            Guard's decision at that position.
        """
        rows = np.asarray(rows, dtype=np.int64)
        n, width = candidates.shape
        if self._draft is None:
            c = self.checker
            batch = type(c).batch(c, self.capacity)  # (not an attached Metrics' wrapper: no traffic)
            self._draft = (batch, [None])
        batch, look = self._draft
        for i, row in enumerate(rows.tolist()):
            batch.fork_from(i, self.batch, row)
        tails = self._tails[rows].copy()
        view = np.full(self.capacity, self.null_id, np.uint32)
        for p in range(max((len(d) for d in drafts), default=0)):
            has = np.array([i for i, d in enumerate(drafts) if p < len(d)], np.int64)
            ids = np.array([drafts[i][p] for i in has.tolist()], np.int64)
            self._check_ids(ids, "a draft token")
            view.fill(self.null_id)
            view[has] = ids
            batch.feed_ids(view)
            tails[has] = self._table.advance(tails[has], ids)
        force = np.array([self._draft_force(row, list(d)) for row, d in zip(rows.tolist(), drafts, strict=True)])
        usable = usable & (np.arange(width)[None, :] < self._k[rows][:, None]) & (force < 0)[:, None]
        cands = np.where(usable, candidates, -1).astype(np.int64)

        def lookahead():
            if look[0] is None:
                from ..batching.lookahead import Lookahead

                look[0] = Lookahead(batch)
            return look[0]

        mask = self._decide(batch, lookahead, np.arange(n, dtype=np.int64), cands, usable, np.ascontiguousarray(tails),
                            greedy)  # fmt: skip
        ok = mask == MASK_ALLOWED
        untried = mask == MASK_UNTRIED
        leave = np.zeros(n, bool)
        masked = usable & ~ok & ~untried
        acted = np.flatnonzero(masked.any(axis=1) | (~ok.any(axis=1) & (force < 0)))
        for i in acted.tolist():
            row = int(rows[i])
            start = int(self._len[row])
            pos = start + len(drafts[i])
            iv, force[i], leave[i] = self._policy(self._rows[row], pos, tails[i], cands[i], usable[i], ok[i], masked[i])
            self._tentative.setdefault(row, {})[pos] = (start, tuple(int(t) for t in drafts[i]), iv, int(force[i]))
        return GuardStep(ok, force, leave, untried)

    def _draft_force(self, row: int, drafts: list[int]) -> int:
        """The token the row is forced to at the position after its drafts: the marker goes on
        while the drafts follow it (a draft that leaves it will not be taken)."""
        r = self._rows[row]
        c = int(self._len[row])
        start = self._marker_start(r) if self._force[row] >= 0 else None
        pending = self._tentative.get(row, {})
        for q, t in enumerate(drafts):
            entry = pending.get(c + q)
            if entry is not None and entry[0] == c and entry[1] == tuple(drafts[:q]) and entry[2].action == "withheld":
                start = c + q
            if start is not None and (c + q - start >= len(r.marker) or t != r.marker[c + q - start]):
                start = None
        pos = c + len(drafts)
        if start is not None and pos - start < len(r.marker):
            return r.marker[pos - start]
        return -1

    def _take_tentative(self, rows: np.ndarray) -> None:
        """Before a step is fed: what guard decided at a draft position that the engine took."""
        for row in rows.tolist():
            pending = self._tentative.get(row)
            if not pending:
                continue
            pos = int(self._len[row])
            entry = pending.pop(pos, None)
            if entry is None:
                continue
            start, before, iv, force = entry
            if tuple(self._tokens(row)[start:pos]) == before:
                self._apply(row, self._rows[row], iv, force)

    def _tails_step(self, rows: np.ndarray, ids: np.ndarray) -> None:
        """Before a step: the rows' tails past `ids`, and for guard rows the checkpoints of
        their values — where one begins, the row's state and undelivered events, its
        snapshots so far, its tail; where one ends, none. One native call (numpy on WASM)."""
        n = len(rows)
        marks = np.empty(n, np.uint8)
        if self.backend == "native":
            rows = np.ascontiguousarray(rows, dtype=np.int64)
            ids = np.ascontiguousarray(ids, dtype=np.int64)
            c = self.checker
            with c.lock:
                c.check_open()
                begun = c._native.tails(self.capacity, rows, n, ids, self._tails, marks, self.batch.states,
                                        self._guard_rows, self._len, self._ck_step, self._ck_token, self._ck_tail,
                                        self._ck_state)  # fmt: skip
            if not begun:
                return
            at = rows[(marks == guarding.VALUE_BEGINS) & self._guard_rows[rows].astype(bool)]
        else:
            before = self._tails[rows]
            new, ended = self._table.value_marks(before, ids)
            self._tails[rows] = self._table.advance(before, ids)
            guarded = self._guard_rows[rows].astype(bool)
            self._ck_step[rows[ended & guarded]] = -1
            new &= guarded
            if not new.any():
                return
            at = rows[new]
            self._ck_step[at] = self._len[at]
            self._ck_token[at] = ids[new]
            self._ck_tail[at] = before[new]
            self._ck_state[at] = self.batch.copy_states(at)
        self._ck_snaps[at] = self._nsnaps[at]
        for row in at.tolist():
            self._ck_pending[row] = self.batch.pending(row)

    def _took_forced(self, rows: np.ndarray, ids: np.ndarray, forced: np.ndarray) -> None:
        """Rows writing the marker: the next marker token, or done (or abandoned, when the
        engine wrote another token than the one forced)."""
        for i in np.flatnonzero(forced >= 0).tolist():
            row = int(rows[i])
            r = self._rows[row]
            written = int(self._len[row]) - 1 - (self._marker_start(r))
            if ids[i] == forced[i] and 0 <= written + 1 < len(r.marker):
                self._force[row] = r.marker[written + 1]
            else:
                self._force[row] = -1

    def _act(self, rows, cands, usable, ok, masked, acted, force, leave) -> None:
        """The policies of the rows guard refused something for (a Python loop over those
        rows only); each gets an Intervention."""
        top_passed = ok[acted, 0] | ~usable[acted, 0]
        for i, passed in zip(acted.tolist(), top_passed.tolist(), strict=True):
            row = int(rows[i])
            r = self._rows[row]
            if passed:  # (the model's first choice stands: only what it passed over is kept, built at the end)
                r.interventions.append(_Masked(int(self._len[row]), cands[i][masked[i]]))
                continue
            iv, force[i], leave[i] = self._policy(r, int(self._len[row]), self._tails[row], cands[i], usable[i], ok[i],
                                                  masked[i])  # fmt: skip
            self._apply(row, r, iv, int(force[i]))
        self._count_masks(masked, ok, acted)

    def _policy(
        self, r: _Row, step: int, tail: np.ndarray, cands, usable, ok, masked
    ) -> tuple[Intervention, int, bool]:
        """What the row's policy does where guard refused something: (the intervention, the
        token forced or -1 or FORCE_EOS, whether the step is left as the model wrote it)."""
        o = r.options
        refused = [Refusal(int(t), self._text(int(t))) for t in cands[masked].tolist()]
        top = bool(usable[0] and not ok[0])
        exhausted = not ok.any()
        force, leave, action = -1, False, "steered" if top else "masked"
        if top and o.policy == "stop":
            action, force = "stopped", FORCE_EOS
        elif top and o.policy == "withhold" and self._at_value(tail, int(cands[0])):
            action, force = ("withheld", r.marker[0]) if r.marker else ("stopped", FORCE_EOS)
        elif exhausted:
            action = "exhausted"
            if o.on_exhausted == "stop":
                force = FORCE_EOS
            else:
                leave = True
        return Intervention(step, action, top, refused, exhausted), force, leave

    def _apply(self, row: int, r: _Row, iv: Intervention, force: int) -> None:
        if iv.exhausted and r.exhausted_at is None:
            r.exhausted_at = iv.step
        self._force[row] = force if force >= 0 else -1
        r.interventions.append(iv)
        if iv.action in ("withheld", "stopped"):
            self._take_back(row, r, iv)

    def _take_back(self, row: int, r: _Row, iv: Intervention) -> None:
        """The value being written goes back out of what the rules read: the row returns to
        where it began (the bytes of its first token before it fed again); a stopped row
        reads the marker in its place. The model's own text keeps what it wrote."""
        step = int(self._ck_step[row])
        if step >= 0:
            self._ck_step[row] = -1
            token = int(self._ck_token[row])
            keep = self._bytes[token][: int(self._table.value_at[token])]
            self.batch.restore(row, (self._ck_state[row], self._ck_pending[row]))
            del r.snaps[int(self._ck_snaps[row]) :]
            self._nsnaps[row] = len(r.snaps)
            iv.value_from, iv.keep = step, keep
            tail = self._ck_tail[row].copy()
            self._tails[row] = tail
            if keep:
                self._add_snaps(row, r, self.batch.feed_text(row, keep))
                self._tails[row] = guarding.tail_after(tail, keep)
        if iv.action == "stopped":
            marker = r.options.marker.encode()
            self._add_snaps(row, r, self.batch.feed_text(row, marker))
            self._tails[row] = guarding.tail_after(self._tails[row], marker)

    def _add_snaps(self, row: int, r: _Row, snaps: list[Snapshot]) -> None:
        r.snaps += snaps
        self._nsnaps[row] += len(snaps)

    def _count_masks(self, masked: np.ndarray, ok: np.ndarray, acted: np.ndarray) -> None:
        if self.metrics is not None:
            name = self.checker.module_info.name
            self.metrics.count_guard_masks(int(masked[acted].sum()), module=name)
            for _ in range(int((~ok[acted].any(axis=1)).sum())):
                self.metrics.count_guard_masks(0, exhausted=True, module=name)

    def _text(self, token: int) -> str:
        return self._bytes[token].decode("utf-8", errors="replace")

    def _at_value(self, tail: np.ndarray, top: int) -> bool:
        """Whether a refusal of `top` after text ending in `tail` is about a value: the text
        ends in a number (maybe spaces after it), or the candidate writes digits."""
        if self._table.has_digit[top]:
            return True
        t = bytes(tail).rstrip(b" \t")
        return bool(t) and (t[-1:].isdigit() or (t[-1:] in (b".", b",") and t[-2:-1].isdigit()))
