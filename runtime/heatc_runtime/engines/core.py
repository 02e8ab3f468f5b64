"""The engine-independent part of checking inside a decode loop on a host backend (native or
WASM), shared by the transformers and vLLM adapters so that they cannot disagree: which bytes
each token id adds, one runtime call per step for the whole batch, the three modes, guard's
decision and policies, and the reports.

Modes (per sequence, `options.RowOptions`):

- **observe**: the scores are untouched; the sequence's report holds its snapshots as they
  were published, its events (spans in the checked stream) and its final verdicts.
- **stop**: the sequence ends at the first snapshot that holds a rejection the prompt did
  not have (with the prompt unseen: the first REJECTED snapshot), and not before.
- **guard**: before each token is chosen, the top-k candidates are judged
  (`guarding`: one native call for the whole batch, or a constant number of WASM calls) and
  those that would add a rejection are refused. When the model's own first choice is refused
  the row's policy decides: `withhold` writes the marker where a value was being written,
  `stop` ends the sequence, `steer` takes the best candidate that passed. Every refusal is
  an `Intervention` of the report.

What guard guarantees: a sequence that guard ends with EOS, having found an acceptable
candidate at every step, has no rejection in `Checker.scan()` of its text beyond those of the
prompt. When no top-k candidate passes the sequence is *exhausted*: by default it is ended
there, or with `on_exhausted="pass"` the step is left as the model wrote it.

The per-step work is numpy over the whole batch: no Python loop over the rows, except over
the rows that published a snapshot or that guard refused something for.

Public surface: `Driver`, `GuardStep`, `FORCE_EOS`, and (re-exported) `MODES`, `PROBES`,
`AS_NUMBER`, `year_shaped`, `GenerationReport`, `TokenTableError`, `TokenIdError`,
`open_module`, `check_options`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..report import Snapshot
from . import guarding
from .guarding import AS_NUMBER, MASK_ALLOWED, MASK_UNTRIED, PROBES, TAIL, year_shaped
from .options import MODES, RowOptions, TokenIdError, TokenTableError, open_module
from .reports import GenerationReport, Intervention, Refusal, finish_interventions, rules_text
from .tokens import TokenTable

__all__ = [
    "AS_NUMBER", "FORCE_EOS", "MODES", "PROBES", "Driver", "GenerationReport", "GuardStep", "TokenIdError",
    "TokenTableError", "check_options", "open_module", "year_shaped",
]  # fmt: skip

FORCE_EOS = -2
"""`GuardStep.force`: the row must end now (the adapter writes its end-of-sequence token)."""
_FREE, _OBSERVE, _STOP, _GUARD = -1, 0, 1, 2
_MODE_CODE = {"observe": _OBSERVE, "stop": _STOP, "guard": _GUARD}


def check_options(mode: str, k: int, on_exhausted: str, policy: str = "withhold", marker: str | None = None) -> None:
    """Raise ValueError with the reason when the options are wrong."""
    RowOptions(mode, k, policy, marker or RowOptions.marker, on_exhausted)


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


class Driver:
    """`capacity` sequences of one module, stepped together: one runtime call per step.

    The checker's token table becomes the model's (`table`, padded with empty entries to
    `vocab_size`, the width of the model's scores), followed by an empty token that rows with
    nothing to feed are fed, and what the WASM decision feeds (`PROBES`, `AS_NUMBER`). With
    `metrics` (`heatc_runtime.metrics.Metrics`) the checker is attached to it, and each
    sequence ended adds its audit report (source "stream") and each guard step its masks."""

    def __init__(self, checker, table: TokenTable, capacity: int, vocab_size: int = 0, metrics=None):
        tokens = list(table.tokens)
        tokens += [b""] * (max(vocab_size, len(tokens)) - len(tokens))
        v = len(tokens)
        self.vocab_size = v
        self.null_id = v
        self._probe_ids = np.arange(v + 1, v + 1 + len(PROBES), dtype=np.int64)
        self._as_number_id = v + 1 + len(PROBES)
        self._probe_numbers = np.arange(len(PROBES), dtype=np.int64) + self._as_number_id + 1
        self._all = [*tokens, b"", *PROBES, AS_NUMBER, *(p + AS_NUMBER for p in PROBES)]
        checker.set_token_table(self._all)
        if metrics is not None:
            metrics.attach(checker)  # (before the batch is made: its steps are counted)
        self.metrics = metrics
        self.checker = checker
        self.backend = getattr(checker, "backend", "wasm")
        self._bytes = tokens
        self.capacity = capacity
        self.batch = checker.batch(capacity)
        self._ids = np.full(capacity, self.null_id, np.uint32)
        self._rows: list[_Row | None] = [None] * capacity
        self._mode = np.full(capacity, _FREE, np.int8)
        self._k = np.zeros(capacity, np.int64)
        self._len = np.zeros(capacity, np.int64)
        self._every = np.arange(capacity, dtype=np.int64)  # (feed's fast path: every row, in order)
        self._every.flags.writeable = False  # (handed out as `every`: nobody may change it)
        # every step's ids, the whole batch's (one array copy a step; a row's tokens are read
        # back when it ends): steps from _hist0 on, each row's first at _start[row]
        self._hist: list[np.ndarray] = []
        self._hist0 = 0
        self._start = np.zeros(capacity, np.int64)
        self._tails = np.zeros((capacity, TAIL), np.uint8)
        self._base = np.zeros(capacity, np.uint64)
        self._force = np.full(capacity, -1, np.int64)
        self._guarding = 0  # rows in guard mode
        self._table: guarding.Tails | None = None
        self._look = None
        # drafts: a second state array, and what guard decided at draft positions, by row and
        # position: (the position drafts start at, the drafts before it, intervention, force)
        self._draft: tuple | None = None
        # guard rows writing a value: where it began (the token's index, the state and
        # undelivered events before that token, the snapshots kept, the token's bytes before
        # the value, the tail then), for the withhold and stop policies to take it back
        self._ck_step = np.full(capacity, -1, np.int64)  # -1: none
        self._ck_token = np.zeros(capacity, np.int64)
        self._ck_snaps = np.zeros(capacity, np.int64)
        self._ck_tail = np.zeros((capacity, TAIL), np.uint8)
        self._ck_state = np.zeros((capacity, self.batch.checker.state_size), np.uint8)
        self._ck_pending: list[list] = [[] for _ in range(capacity)]
        self._guard_rows = np.zeros(capacity, np.uint8)  # 1: the row is in guard mode
        self._nsnaps = np.zeros(capacity, np.int64)  # each row's snapshots so far (r.snaps)
        self._tentative: dict[int, dict[int, tuple[int, tuple[int, ...], Intervention, int]]] = {}

    @property
    def every(self) -> np.ndarray:
        """Every row, in order (int64): passed as `rows`, feed needs no comparison to know it."""
        return self._every

    def _lookahead(self):
        if self._look is None:
            from ..lookahead import Lookahead

            self._look = Lookahead(self.batch)
        return self._look

    def _tails_table(self) -> guarding.Tails:
        if self._table is None:
            self._table = guarding.Tails(self._all)
        return self._table

    # -- rows -----------------------------------------------------------------------------

    def start(self, row: int, options: RowOptions | str = "observe", prompt: Sequence[int] | None = None,
              marker: Sequence[int] = ()) -> None:  # fmt: skip
        """Begin a sequence in `row` (`options`: a RowOptions, or a mode's name); the rules
        read the prompt first when `options.see_prompt`. `marker`: the marker's token ids
        (guard's withhold policy; without them a withheld value is stopped instead)."""
        if isinstance(options, str):
            options = RowOptions(options)
        if self._rows[row] is not None:
            self.end(row)
        r = _Row(options, tuple(int(i) for i in marker))
        self.batch.reset(row)
        self._len[row] = 0
        self._nsnaps[row] = 0
        self._ck_step[row] = -1
        self._start[row] = self._hist0 + len(self._hist)
        self._tails[row] = 0
        self._force[row] = -1
        self._base[row] = 0
        if options.see_prompt and prompt is not None and len(prompt):
            ids = np.asarray(prompt, dtype=np.int64)
            self._check_ids(ids, f"the prompt of sequence {row}")
            r.prompt = b"".join([self._bytes[i] for i in ids.tolist()])
            r.prompt_snaps = self.batch.feed_text(row, r.prompt)
            self._base[row] = self._lookahead().rejections([row])[0]
            self._tails[row] = np.frombuffer(r.prompt[-TAIL:].rjust(TAIL, b"\0"), np.uint8)
        self._rows[row] = r
        self._mode[row] = _MODE_CODE[options.mode]
        self._k[row] = options.k
        if options.mode == "guard":
            self._guarding += 1
            self._guard_rows[row] = 1
            self._tails_table()

    def live(self, row: int) -> bool:
        return self._rows[row] is not None

    def mode(self, row: int) -> str:
        r = self._rows[row]
        return r.options.mode if r is not None else ""

    def options(self, row: int) -> RowOptions:
        return self._rows[row].options

    def end(self, row: int, error: str | None = None) -> GenerationReport:
        """End the sequence in `row` (its final snapshot) and free the row."""
        r = self._rows[row]
        if r is None:
            raise ValueError(f"row {row} holds no sequence")
        final = self.batch.finish_one(row)
        r.snaps += final
        self._rows[row] = None
        if self._mode[row] == _GUARD:
            self._guarding -= 1
            self._guard_rows[row] = 0
        self._mode[row] = _FREE
        self._force[row] = -1
        self.batch.reset(row)
        self._ck_step[row] = -1
        self._tentative.pop(row, None)
        tokens = self._tokens(row)
        self._trim()
        r.interventions = [
            Intervention(iv.step, "masked", False, [Refusal(int(t), self._text(int(t))) for t in iv.refused.tolist()])
            if isinstance(iv, _Masked)
            else iv
            for iv in r.interventions
        ]
        raw = b"".join([self._bytes[i] for i in tokens])
        o = r.options
        stream = r.prompt + rules_text(raw, tokens, self._bytes.__getitem__, r.interventions, o.marker)
        verdicts = dict(final[-1].verdicts) if final else {}
        guard = o.mode == "guard"
        report = GenerationReport(
            o.mode, stream, len(r.prompt), tokens, r.snaps, verdicts, r.prompt_snaps, r.stopped_at,
            r.exhausted_at, error, o.policy if guard else None, o.marker if guard else None, r.interventions,
            self.backend, raw,
        )  # fmt: skip
        if r.interventions:
            checker = self.checker
            scan = type(checker).scan  # (not an attached Metrics' wrapper: these scans are no traffic)
            # a refusal is explained by the rejections guard acts on: not an observe-only rule's
            observe = checker.module_info.observe
            finish_interventions(r.interventions, r.prompt, tokens, self._bytes.__getitem__,
                                 lambda text: [e for e in scan(checker, text).events if e.name not in observe],
                                 o.marker)  # fmt: skip
        if self.metrics is not None and final:
            module = self.checker.module_info
            self.metrics.count_report(report.audit(module, self.metrics.policy_for(module)), "stream")
        return report

    # -- steps ----------------------------------------------------------------------------

    def _tokens(self, row: int) -> list[int]:
        """The tokens fed to `row` since it started."""
        null = self.null_id
        return [t for t in (int(h[row]) for h in self._hist[int(self._start[row]) - self._hist0 :]) if t != null]

    def _trim(self) -> None:
        """Forget the steps no live row needs (a long-running engine's history stays short)."""
        live = self._mode != _FREE
        first = int(self._start[live].min()) if live.any() else self._hist0 + len(self._hist)
        drop = first - self._hist0
        if drop > 256:
            del self._hist[:drop]
            self._hist0 = first

    def _check_ids(self, ids: np.ndarray, what: str) -> None:
        # (one reduction: a negative id read as unsigned is past the table too)
        if len(ids) and int(ids.view(np.uint64).max()) >= self.vocab_size:
            bad = next(int(i) for i in ids.tolist() if not 0 <= i < self.vocab_size)
            raise TokenIdError(f"{what}: token id {bad} is outside the token table ({self.vocab_size} entries)")

    def feed(self, rows: np.ndarray, ids: np.ndarray) -> list[int]:
        """Feed token `ids[i]` to row `rows[i]` (the other rows are fed nothing): one
        runtime call. Returns the rows that stop mode ends at this token."""
        ids = np.asarray(ids, dtype=np.int64)
        self._check_ids(ids, "a generated token")
        if self._tentative:
            self._take_tentative(rows)
        if self._guarding:
            self._tails_step(rows, ids)
        view = self._ids
        if len(rows) == self.capacity and (rows is self._every or np.array_equal(rows, self._every)):
            # (every row, in order: what a transformers step feeds; vLLM's slots come in any order)
            view[:] = ids
            self._len += 1
        else:
            view.fill(self.null_id)
            view[rows] = ids
            self._len[rows] += 1
        published = self.batch.feed_ids(view)
        self._hist.append(view.copy())
        if self._guarding:
            forced = self._force[rows]
            if forced.max(initial=-1) >= 0:
                self._took_forced(rows, ids, forced)
        stopped = []
        live = self._rows
        for row, snaps in published.items():
            r = live[row]
            if r is None:
                continue  # a free row's `every N` snapshot
            r.snaps += snaps
            self._nsnaps[row] += len(snaps)
            if self._mode[row] == _STOP and r.stopped_at is None:
                base = int(self._base[row])
                if any(s.counters["rejections"] > base for s in snaps):
                    r.stopped_at = int(self._len[row]) - 1
                    stopped.append(row)
        return stopped

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
            with c._lock:
                c._check_open()
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

    @staticmethod
    def _marker_start(r: _Row) -> int:
        """The step at which the row's last withheld value's marker began."""
        return next(iv.step for iv in reversed(r.interventions) if iv.action == "withheld")

    def max_k(self, rows: np.ndarray) -> int:
        return int(self._k[rows].max(initial=1))

    def guard(self, rows: np.ndarray, candidates: np.ndarray, usable: np.ndarray, greedy: bool = False) -> GuardStep:
        """Guard's decision for `candidates` (rows × K token ids, best first) of the sequences
        `rows`; `usable` marks those the engine could sample at all (finite scores). One
        native call for the whole batch (WASM: two, and a few more where numbers are left
        open), then the rows' policies where the first choice was refused. With `greedy`
        (the engine takes the best candidate left) the candidates below a row's first that
        passes are not judged (`GuardStep.ok` False, `GuardStep.untried` True)."""
        rows = np.asarray(rows, dtype=np.int64)
        n, width = candidates.shape
        if self._tentative:
            for row in rows.tolist():
                self._tentative.pop(row, None)
        force, k = self._force[rows], self._k[rows]
        forcing = force.max(initial=-1) >= 0
        if forcing or k.min(initial=width) < width:
            usable = usable & (np.arange(width)[None, :] < k[:, None]) & (force < 0)[:, None]
        # (the common step: every candidate usable, none forced — no masking pass over them)
        cands = np.ascontiguousarray(candidates if usable.all() else np.where(usable, candidates, -1), dtype=np.int64)
        tails = self._tails[rows]
        mask = self._decide(self.batch, self._lookahead, rows, cands, usable, tails, greedy)
        ok = mask == MASK_ALLOWED
        untried = mask == MASK_UNTRIED
        leave = np.zeros(n, bool)
        if greedy and not forcing and ok[:, 0].all():
            # (the common greedy step: every row's first choice passed; below it nothing was judged)
            return GuardStep(ok, force, leave, untried, clear=True)
        masked = usable & ~ok & ~untried
        acted = np.flatnonzero(masked.any(axis=1) | (~ok.any(axis=1) & (force < 0)))
        if len(acted):
            self._act(rows, cands, usable, ok, masked, acted, force, leave)
        return GuardStep(ok, force, leave, untried)

    def _decide(self, batch, look, rows: np.ndarray, cands: np.ndarray, usable: np.ndarray, tails: np.ndarray,
                greedy: bool):  # fmt: skip
        """The decision's mask for `rows` of `batch` (`look`: its Lookahead, made when needed)."""
        n, width = cands.shape
        if self.backend != "native":
            return guarding.decide(look(), rows, cands, usable, tails, self._table, self._probe_ids,
                                   self._as_number_id, self._probe_numbers, greedy)  # fmt: skip
        mask = np.empty((n, width), np.uint8)
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        c = self.checker
        with c._lock:
            c._check_open()
            c._native.guard(batch.states, batch.n, rows, n, cands, width, tails, mask, greedy)
        return mask

    # -- drafts: positions past what was fed (assisted and speculative decoding) ------------

    def guard_drafts(self, rows: np.ndarray, drafts: Sequence[Sequence[int]], candidates: np.ndarray,
                     usable: np.ndarray, greedy: bool = False) -> GuardStep:  # fmt: skip
        """Guard's decision at the text of each row continued by its drafts (token ids the
        engine proposes and has not taken yet: assisted and speculative decoding judge a
        position per draft token). The sequences do not change; what the policies decide is
        kept, and applies when the engine takes exactly those drafts (`feed`)."""
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
                from ..lookahead import Lookahead

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
