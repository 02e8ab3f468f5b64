"""The engine-independent part of checking inside a decode loop, shared by the transformers
and vLLM adapters so that they cannot disagree: which bytes each token id adds, one runtime
call per step for the whole batch, finished rows, the three modes, and guard's candidate
evaluation.

Modes (per sequence):

- **observe**: the scores are untouched; the sequence's report holds its snapshots as they
  were published, its events (spans in the checked stream) and its final verdicts.
- **stop**: the sequence ends at the first snapshot that holds a rejection the prompt did
  not have (with the prompt unseen: the first REJECTED snapshot), and not before.
- **guard**: before each token is chosen, the top-k candidates are tried on copies of the
  sequence (`heatc_runtime.lookahead`: a constant number of runtime calls for the whole
  batch) and those that would add a rejection are masked; the engine then samples only
  among the candidates that passed. A candidate passes when the text with it, ended right
  there, has no more rejections than the text before it — ending the text completes a number
  still being read, so "5" then "000" is judged as "5000". A candidate that leaves a number
  open (the text then ends in an ASCII digit, or a digit and "." or ",") also passes when
  the number continued by one of `PROBES` has none: the "9" of "98.6" passes a rule that
  wants 20–113 although 9 alone would fail it; "5" then "000" (5000 mg/dL) does not, since
  5000 and every continuation of it are out of range. EOS adds no bytes: it passes only when
  the text ended now has no new rejection. Where the text (with the candidate, or with a
  probe) ends in four digits that may read as a year written alone (`year_shaped`), it must
  also pass read as the number those digits spell (`AS_NUMBER` appended): a number does
  not escape its rule by growing into a year ("temperature 1" then "995").

What guard guarantees: a sequence that guard ends with EOS, having found an acceptable
candidate at every step, has no rejection in `Checker.scan()` of its text beyond those of the
prompt. When no top-k candidate passes, the sequence is *exhausted*: by default it is ended
there (EOS is forced, the report says `exhausted_at`), or with `on_exhausted="pass"` the
scores are left as they are for that step. A sequence cut by a length limit may end inside a
number that passed because it could still grow ("temperature 9").

Public surface: `MODES`, `PROBES`, `AS_NUMBER`, `year_shaped`, `GenerationReport`, `Driver`, `TokenTableError`,
`TokenIdError`, `open_module(module, table, tokens, limits)`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ModuleError
from ..report import Event, Snapshot, Verdict, Verdicts
from .tokens import TokenTable

MODES = ("observe", "stop", "guard")
ON_EXHAUSTED = ("stop", "pass")
PROBES = (b"0", b"9", b"00", b"99", b"000", b"999", b".9")
"""What guard appends to a number left open, looking for one way it could still be accepted."""
AS_NUMBER = b".0"
"""What guard appends to text that ends in a year's digits to read them as the number they
spell (`year_shaped`)."""
# a year written alone, 1900–2199, as heatc's lexer reads one (heatc/lang/lexicon.py; a test
# holds the two to each other)
_YEAR_END = re.compile(rb"(?<![0-9.,])(?:19|20|21)[0-9]{2}\Z")


def year_shaped(text: bytes) -> bool:
    """Whether `text` ends in four ASCII digits from 1900 to 2199, not after a digit, a point
    or a comma: what the lexer reads as a year written alone (a date) where a number was being
    written ("temperature 1" continued by "995"). (At the end of a longer date, `11/30/2019`,
    it says yes too: guard then asks more than it needs to.)"""
    return _YEAR_END.search(text) is not None


_DIGITS = frozenset(b"0123456789")


class TokenTableError(ModuleError):
    """A module built for another tokenizer than the model's."""


class TokenIdError(ValueError):
    """A token id the table has no entry for."""


def open_module(module, table: TokenTable | None, tokens: str = "check", limits=None):
    """A Checker for `module` (a build or module directory, or a Checker), refused when the
    token table it was built with is not the model tokenizer's `table`. With `tokens="model"`
    the module's own table is not compared: the model's replaces it."""
    from ..checker import Checker
    from ..loader import load

    if tokens not in ("check", "model"):
        raise ValueError(f"tokens must be 'check' or 'model', not {tokens!r}")
    if isinstance(module, Checker):
        checker, where = module, "the module"
    else:
        checker, where = load(Path(module), limits), str(module)
    own = checker._token_table
    if tokens == "check" and own is not None:
        from .tokens import table_sha256

        if len(own) != len(table.tokens) or table_sha256(own) != table.sha256:
            raise TokenTableError(
                f"{where}: its token table was built for another tokenizer ({len(own)} tokens, sha256 "
                f"{table_sha256(own)[:12]}…) than the model's ({table.source}: {len(table.tokens)} tokens, "
                f"sha256 {table.sha256[:12]}…); rebuild it with the model's tokenizer "
                "(tokenizer: {file: …/tokenizer.json}), or use the model's table instead (tokens='model')"
            )
    return checker


@dataclass
class GenerationReport(Verdicts):
    """What the rules saw of one generated sequence."""

    mode: str
    stream: bytes  # what the rules read: the prompt's bytes (when they saw it), then the generation's
    prompt_bytes: int  # where the generation starts in `stream`
    tokens: list[int]  # the generated token ids, as fed
    snapshots: list[Snapshot]  # published while generating, the final one last
    verdicts: dict[str, Verdict]  # at the end
    prompt_snapshots: list[Snapshot] = field(default_factory=list)
    stopped_at: int | None = None  # stop: the generated token whose snapshot held the first new rejection
    masked: list[tuple[int, int, bool]] = field(
        default_factory=list
    )  # guard: (step, candidates masked, top one masked)
    exhausted_at: int | None = None  # guard: the first step no top-k candidate passed
    error: str | None = None

    @property
    def events(self) -> list[Event]:
        """Every event of the generation, spans in `stream`."""
        return [e for s in self.snapshots for e in s.events]

    @property
    def text(self) -> str:
        """The generated text as the rules read it."""
        return self.stream[self.prompt_bytes :].decode("utf-8", errors="replace")

    @property
    def first_change(self) -> int | None:
        """guard: the first step at which the top candidate was masked (before it, the
        sequence is what it would have been unguarded, under greedy decoding)."""
        return next((step for step, _, top in self.masked if top), None)

    def audit(self, module, policy=None):
        """The audit report of the checked stream (prompt, when the rules read it, then the
        generation): `heatc_runtime.audit.audit_snapshots` of every snapshot it published —
        the report `Checker.scan()` gives for `stream`. `module`: the checker's `module_info`."""
        from ..audit import audit_snapshots

        return audit_snapshots(module, self.stream, [*self.prompt_snapshots, *self.snapshots], policy)

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "text": self.text,
            "verdict": self.verdict.name,
            "rules": {k: v.name for k, v in self.verdicts.items()},
            "events": [e.to_json(self.stream) for e in self.events],
            "prompt_bytes": self.prompt_bytes,
            "tokens": len(self.tokens),
            "stopped_at": self.stopped_at,
            "masked_steps": [{"step": s, "masked": n, "top": top} for s, n, top in self.masked],
            "exhausted_at": self.exhausted_at,
            "error": self.error,
        }


class _Row:
    __slots__ = ("base", "exhausted_at", "k", "masked", "mode", "on_exhausted", "prompt", "prompt_snaps", "snaps", "stopped_at", "tokens")  # fmt: skip

    def __init__(self, mode: str, k: int, on_exhausted: str):
        self.mode, self.k, self.on_exhausted = mode, k, on_exhausted
        self.tokens: list[int] = []
        self.prompt = b""
        self.prompt_snaps: list[Snapshot] = []
        self.snaps: list[Snapshot] = []
        self.base = 0  # rejections before the generation (the prompt's)
        self.stopped_at: int | None = None
        self.masked: list[tuple[int, int, bool]] = []
        self.exhausted_at: int | None = None


def check_options(mode: str, k: int, on_exhausted: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (modes: {', '.join(MODES)})")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
        raise ValueError(f"k must be a whole number from 1 to 64, not {k!r}")
    if on_exhausted not in ON_EXHAUSTED:
        raise ValueError(f"on_exhausted must be one of {', '.join(ON_EXHAUSTED)}, not {on_exhausted!r}")


class Driver:
    """`capacity` sequences of one module, stepped together: one runtime call per step.

    The checker's token table becomes the model's (`table`, padded with empty entries to
    `vocab_size`, the width of the model's scores), followed by an empty token that rows with
    nothing to feed are fed, and the `PROBES`. With `metrics` (`heatc_runtime.metrics.Metrics`)
    the checker is attached to it, and each sequence ended adds its audit report (source
    "stream") and each guard step its masks."""

    def __init__(self, checker, table: TokenTable, capacity: int, vocab_size: int = 0, metrics=None):
        tokens = list(table.tokens)
        tokens += [b""] * (max(vocab_size, len(tokens)) - len(tokens))
        self.vocab_size = len(tokens)
        self.null_id = len(tokens)
        self._probe_ids = np.arange(len(tokens) + 1, len(tokens) + 1 + len(PROBES), dtype=np.uint32)
        self._as_number_id = len(tokens) + 1 + len(PROBES)
        self._probe_numbers = np.arange(len(PROBES), dtype=np.uint32) + self._as_number_id + 1
        checker.set_token_table([*tokens, b"", *PROBES, AS_NUMBER, *(p + AS_NUMBER for p in PROBES)])
        self._ends_in_digit = np.array([bool(t) and t[-1] in _DIGITS for t in tokens], bool)
        if metrics is not None:
            metrics.attach(checker)  # (before the batch is made: its steps are counted)
        self.metrics = metrics
        self.checker = checker
        self._bytes = tokens
        self.capacity = capacity
        self.batch = checker.batch(capacity)
        self._ids = np.full(capacity, self.null_id, np.uint32)
        self._rows: list[_Row | None] = [None] * capacity
        self._look = None

    def _lookahead(self):
        if self._look is None:
            from ..lookahead import Lookahead

            self._look = Lookahead(self.batch)
        return self._look

    # -- rows -----------------------------------------------------------------------------

    def start(
        self,
        row: int,
        mode: str = "observe",
        k: int = 8,
        on_exhausted: str = "stop",
        prompt: Sequence[int] | None = None,
        see_prompt: bool = False,
    ) -> None:
        """Begin a sequence in `row`: the rules read the prompt first when `see_prompt`."""
        check_options(mode, k, on_exhausted)
        r = _Row(mode, k, on_exhausted)
        self.batch.reset(row)
        if see_prompt and prompt is not None and len(prompt):
            ids = np.asarray(prompt, dtype=np.int64)
            self._check_ids(ids, f"the prompt of sequence {row}")
            r.prompt = b"".join([self._bytes[i] for i in ids.tolist()])
            r.prompt_snaps = self.batch.feed_text(row, r.prompt)
            r.base = int(self._lookahead().rejections([row])[0])
        self._rows[row] = r

    def live(self, row: int) -> bool:
        return self._rows[row] is not None

    def mode(self, row: int) -> str:
        r = self._rows[row]
        return r.mode if r is not None else ""

    def end(self, row: int, error: str | None = None) -> GenerationReport:
        """End the sequence in `row` (its final snapshot) and free the row."""
        r = self._rows[row]
        if r is None:
            raise ValueError(f"row {row} holds no sequence")
        final = self.batch.finish_one(row)
        r.snaps += final
        self._rows[row] = None
        self.batch.reset(row)
        stream = r.prompt + b"".join([self._bytes[i] for i in r.tokens])
        verdicts = dict(final[-1].verdicts) if final else {}
        report = GenerationReport(
            r.mode, stream, len(r.prompt), r.tokens, r.snaps, verdicts, r.prompt_snaps,
            r.stopped_at, r.masked, r.exhausted_at, error,
        )  # fmt: skip
        if self.metrics is not None and final:
            self.metrics.count_report(report.audit(self.checker.module_info, self.metrics.policy), "stream")
        return report

    # -- steps ----------------------------------------------------------------------------

    def _check_ids(self, ids: np.ndarray, what: str) -> None:
        if len(ids) and (int(ids.max()) >= self.vocab_size or int(ids.min()) < 0):
            bad = next(int(i) for i in ids.tolist() if not 0 <= i < self.vocab_size)
            raise TokenIdError(f"{what}: token id {bad} is outside the token table ({self.vocab_size} entries)")

    def feed(self, rows: np.ndarray, ids: np.ndarray) -> list[int]:
        """Feed token `ids[i]` to row `rows[i]` (the other rows are fed nothing): one
        runtime call. Returns the rows that stop mode ends at this token."""
        ids = np.asarray(ids, dtype=np.int64)
        self._check_ids(ids, "a generated token")
        view = self._ids
        view.fill(self.null_id)
        view[rows] = ids
        published = self.batch.feed_ids(view)
        live = self._rows
        for row, token in zip(rows.tolist(), ids.tolist(), strict=True):
            live[row].tokens.append(token)
        stopped = []
        for row, snaps in published.items():
            r = live[row]
            if r is None:
                continue  # a free row's `every N` snapshot
            r.snaps += snaps
            if r.mode == "stop" and r.stopped_at is None and any(s.counters["rejections"] > r.base for s in snaps):
                r.stopped_at = len(r.tokens) - 1
                stopped.append(row)
        return stopped

    def max_k(self, rows: np.ndarray) -> int:
        return max(self._rows[r].k for r in rows.tolist())

    def guard(self, rows: np.ndarray, candidates: np.ndarray, usable: np.ndarray) -> np.ndarray:
        """Which candidates pass (bool, the shape of `candidates`: rows × K, best first);
        `usable` marks those the engine could sample at all (finite scores). Two runtime calls
        for the whole batch, three more when some candidate fails leaving a number open; a
        lookahead more for the candidates whose text then ends in a year's digits."""
        n, width = candidates.shape
        look = self._lookahead()
        ks = np.array([self._rows[r].k for r in rows.tolist()])
        usable = usable & (np.arange(width)[None, :] < ks[:, None])
        base = np.repeat(look.rejections(rows), width)
        flat_rows, flat = np.repeat(rows, width), candidates.ravel().astype(np.uint32)
        tried = np.flatnonzero(usable.ravel())
        ok = np.zeros(n * width, bool)
        good = look.try_tokens(flat_rows[tried], flat[tried]) == base[tried]
        # a year's digits are judged as the number they spell too: a number being written does
        # not pass by growing into a year ("temperature 1" + "995")
        tails = {r: self._tail(r) for r in rows.tolist()}  # each row's text so far, its last bytes
        digit = tried[good & self._ends_in_digit[flat[tried]]]
        years = np.array(
            [i for i in digit.tolist() if year_shaped(tails[int(flat_rows[i])] + self._bytes[flat[i]])], np.intp
        )
        if len(years):
            as_number = look.try_tokens(flat_rows[years], flat[years], np.full(len(years), self._as_number_id))
            good[np.searchsorted(tried, years[as_number != base[years]])] = False
        ok[tried[good]] = True
        failed = tried[~good]
        if len(failed):
            open_ = np.array([i for i in failed.tolist() if self._opens_number(int(flat_rows[i]), int(flat[i]))])
            if len(open_):
                p = len(PROBES)
                pr, pt, before = np.repeat(flat_rows[open_], p), np.repeat(flat[open_], p), np.repeat(base[open_], p)
                passed = look.try_tokens(pr, pt, np.tile(self._probe_ids, len(open_))) == before
                ends = [tails[int(r)] + self._bytes[t] for r, t in zip(flat_rows[open_], flat[open_], strict=True)]
                shaped = np.array([year_shaped(e + q) for e in ends for q in PROBES], bool)
                if shaped.any():
                    at = np.flatnonzero(shaped & passed)
                    if len(at):
                        numbers = np.tile(self._probe_numbers, len(open_))[at]
                        passed[at] = look.try_tokens(pr[at], pt[at], numbers) == before[at]
                ok[open_[passed.reshape(-1, p).any(axis=1)]] = True
        ok = ok.reshape(n, width)
        masked = usable & ~ok
        for i in np.flatnonzero(masked.any(axis=1)).tolist():
            r = self._rows[int(rows[i])]
            r.masked.append((len(r.tokens), int(masked[i].sum()), bool(masked[i, 0])))
        exhausted = np.flatnonzero(~ok.any(axis=1)).tolist()
        for i in exhausted:
            r = self._rows[int(rows[i])]
            if r.exhausted_at is None:
                r.exhausted_at = len(r.tokens)
        if self.metrics is not None:
            name = self.checker.module_info.name
            self.metrics.count_guard_masks(int(masked.sum()), module=name)
            for _ in exhausted:
                self.metrics.count_guard_masks(0, exhausted=True, module=name)
        return ok

    def on_exhausted(self, row: int) -> str:
        return self._rows[row].on_exhausted

    def _tail(self, row: int, n: int = 8) -> bytes:
        """The last `n` bytes (or fewer) of a row's text so far, its prompt included."""
        r = self._rows[row]
        out = b""
        for t in reversed(r.tokens):
            out = self._bytes[t] + out
            if len(out) >= n:
                return out[-n:]
        return (r.prompt + out)[-n:]

    def _opens_number(self, row: int, token: int) -> bool:
        """Whether the text ends inside a number once `token` is added to `row`: it adds
        bytes, and the text then ends in a digit, or in a digit and "." or ","."""
        add = self._bytes[token]
        if not add:
            return False
        tail = add[-2:]
        if len(tail) < 2:  # the byte before the token's one byte
            tail = self._tail(row, 1) + tail
        if tail[-1] in _DIGITS:
            return True
        return len(tail) == 2 and tail[-1] in b".," and tail[0] in _DIGITS
