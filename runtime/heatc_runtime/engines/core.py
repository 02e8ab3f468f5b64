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

import numpy as np

from . import guarding
from .guarding import AS_NUMBER, MASK_ALLOWED, MASK_UNTRIED, PROBES, TAIL, year_shaped
from .interventions import FORCE_EOS, GuardStep, Interventions, _Masked, _Row
from .options import MODES, RowOptions, TokenIdError, TokenTableError, open_module
from .reports import GenerationReport, Intervention, Refusal, finish_interventions, rules_text
from .tokens import TokenTable

__all__ = [
    "AS_NUMBER", "FORCE_EOS", "MODES", "PROBES", "Driver", "GenerationReport", "GuardStep", "TokenIdError",
    "TokenTableError", "check_options", "open_module", "year_shaped",
]  # fmt: skip

_FREE, _OBSERVE, _STOP, _GUARD = -1, 0, 1, 2
_MODE_CODE = {"observe": _OBSERVE, "stop": _STOP, "guard": _GUARD}


def check_options(mode: str, k: int, on_exhausted: str, policy: str = "withhold", marker: str | None = None) -> None:
    """Raise ValueError with the reason when the options are wrong."""
    RowOptions(mode, k, policy, marker or RowOptions.marker, on_exhausted)


class Driver(Interventions):
    """`capacity` sequences of one module, stepped together: one runtime call per step.

    The checker's token table becomes the model's (`table`, padded with empty entries to
    `vocab_size`, the width of the model's scores), followed by an empty token that rows with
    nothing to feed are fed, and what the WASM decision feeds (`PROBES`, `AS_NUMBER`). With
    `metrics` the checker is attached to it, and each sequence ended adds its audit report
    (source "stream") and each guard step its masks.

    Parameters
    ----------
    checker : Checker
        The loaded module (any host backend).
    table : TokenTable
        The model tokenizer's token table.
    capacity : int
        The rows (sequences stepped together).
    vocab_size : int
        The width of the model's scores, when wider than the table (0: the table's).
    metrics : heatc_runtime.metrics.Metrics, optional
        Where the steps, reports and guard's masks are counted.

    Raises
    ------
    ValueError
        A row that holds no sequence, an option out of range.
    TokenIdError
        A token id past the model's vocabulary.
    """

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
        self._every_bytes = self._every.tobytes()
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

    def _is_every(self, rows: np.ndarray) -> bool:
        """Whether `rows` (int64) are every row in order — then the per-row arrays are read
        whole, not gathered (a byte comparison: np.array_equal costs ten times as much)."""
        return rows is self._every or (
            len(rows) == self.capacity and isinstance(rows, np.ndarray) and rows.tobytes() == self._every_bytes
        )

    def _lookahead(self):
        if self._look is None:
            from ..batching.lookahead import Lookahead

            self._look = Lookahead(self.batch)
        return self._look

    def _tails_table(self) -> guarding.Tails:
        if self._table is None:
            self._table = guarding.Tails(self._all)
        return self._table

    # -- rows -----------------------------------------------------------------------------

    def start(self, row: int, options: RowOptions | str = "observe", prompt: Sequence[int] | None = None,
              marker: Sequence[int] = ()) -> None:  # fmt: skip
        """Begin a sequence in `row`; the rules read the prompt first when `options.see_prompt`.

        Parameters
        ----------
        row : int
            The row (a sequence still in it is ended first).
        options : RowOptions or str
            The row's options, or a mode's name ("observe", "guard", "stop").
        prompt : sequence of int, optional
            The prompt's token ids.
        marker : sequence of int
            The marker's token ids (guard's withhold policy; without them a withheld value is
            stopped instead).

        Raises
        ------
        ValueError
            The options are out of range.
        TokenIdError
            A prompt id past the model's vocabulary.
        """
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
        """Whether `row` holds a sequence.

        Parameters
        ----------
        row : int
            The row asked about.

        Returns
        -------
        bool
            True while a sequence runs in it.
        """
        return self._rows[row] is not None

    def mode(self, row: int) -> str:
        """The mode of the sequence in `row`.

        Parameters
        ----------
        row : int
            The row whose mode is wanted.

        Returns
        -------
        str
            "observe", "guard" or "stop"; "" for a free row.
        """
        r = self._rows[row]
        return r.options.mode if r is not None else ""

    def options(self, row: int) -> RowOptions:
        """The options of the sequence in `row`.

        Parameters
        ----------
        row : int
            A row holding a sequence.

        Returns
        -------
        RowOptions
            Its options.

        Raises
        ------
        AttributeError
            The row holds no sequence.
        """
        return self._rows[row].options

    def end(self, row: int, error: str | None = None) -> GenerationReport:
        """End the sequence in `row` (its final snapshot) and free the row.

        Parameters
        ----------
        row : int
            The row ended.
        error : str, optional
            Why the sequence was cut short (kept in its report).

        Returns
        -------
        GenerationReport
            The sequence's report: verdicts, events, interventions, what was delivered.

        Raises
        ------
        ValueError
            The row holds no sequence.
        """
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
        """Feed token `ids[i]` to row `rows[i]` (the other rows are fed nothing): one runtime call.

        Parameters
        ----------
        rows : numpy.ndarray of int
            The rows fed (`every` for all of them, in order: the fast path).
        ids : numpy.ndarray of int
            Each row's token id.

        Returns
        -------
        list of int
            The rows that stop mode ends at this token.
        """
        ids = np.asarray(ids, dtype=np.int64)
        self._check_ids(ids, "a generated token")
        if self._tentative:
            self._take_tentative(rows)
        if self._guarding:
            self._tails_step(rows, ids)
        view = self._ids
        if self._is_every(rows):
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

    def max_k(self, rows: np.ndarray) -> int:
        """The most candidates any of `rows` asks guard to judge.

        Parameters
        ----------
        rows : numpy.ndarray of int
            The rows.

        Returns
        -------
        int
            The largest `k` among them (at least 1).
        """
        return int((self._k if self._is_every(rows) else self._k[rows]).max(initial=1))

    def guard(self, rows: np.ndarray, candidates: np.ndarray, usable: np.ndarray, greedy: bool = False) -> GuardStep:
        """Guard's decision for `candidates` of the sequences `rows`: one native call for the
        whole batch (WASM: two, and a few more where numbers are left open), then the rows'
        policies where the first choice was refused. With `greedy` (the engine takes the best
        candidate left) the candidates below a row's first that passes are not judged
        (`GuardStep.ok` False, `GuardStep.untried` True).

        Parameters
        ----------
        rows : numpy.ndarray of int
            The rows judged.
        candidates : numpy.ndarray of int
            Their candidate token ids, rows × K, best first.
        usable : numpy.ndarray of bool
            The candidates the engine could sample at all (finite scores).
        greedy : bool
            Whether the engine decodes greedily.

        Returns
        -------
        GuardStep
            Which candidates passed, and each row's forced token or intervention.
        """
        rows = np.asarray(rows, dtype=np.int64)
        n, width = candidates.shape
        if self._tentative:
            for row in rows.tolist():
                self._tentative.pop(row, None)
        every = self._is_every(rows)
        # (a copy of the forced tokens: the policies write the step's own)
        force, k = (self._force.copy(), self._k) if every else (self._force[rows], self._k[rows])
        forcing = force.max(initial=-1) >= 0
        if forcing or k.min(initial=width) < width:
            usable = usable & (np.arange(width)[None, :] < k[:, None]) & (force < 0)[:, None]
        # (the common step: every candidate usable, none forced — no masking pass over them)
        cands = np.ascontiguousarray(candidates if usable.all() else np.where(usable, candidates, -1), dtype=np.int64)
        tails = self._tails if every else self._tails[rows]
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
        with c.lock:
            c.check_open()
            c._native.guard(batch.states, batch.n, rows, n, cands, width, tails, mask, greedy)
        return mask
