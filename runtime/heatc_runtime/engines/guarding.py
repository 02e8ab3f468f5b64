"""Guard's decision: which candidate tokens a sequence may take next (docs/engines.md, "What
guard guarantees"), defined once here and carried out by every backend.

A candidate *passes* when the text with it, ended right there, has no more rejections than
the text before it. Ending the text completes a number still being read, so "5" then "000"
is judged as "5000". A candidate that leaves a number open (the text then ends in an ASCII
digit, or a digit and "." or ",") also passes when the number continued by one of `PROBES`
has none: the "9" of "98.6" passes a rule that wants 20–113 although 9 alone would fail it.
EOS adds no bytes: it passes only when the text ended now has no new rejection. Where the
text (with the candidate, or with a probe) ends in four digits that read as a year written
alone (`year_shaped`), it must also pass read as the number those digits spell (`AS_NUMBER`
appended): a number does not escape its rule by growing into a year ("temperature 1" then
"995").

The decision needs the last bytes of each sequence's text (`TAIL` of them): the drivers keep
them per row (`Tails`). The native core and the CUDA kernels carry the procedure out in C++
(cuda_bridge/include/heatc_kernels.h, `guard_decide`: one call for every candidate of every
row, constants from here through the generated header); `decide` below carries it out over a
`Lookahead` (any backend, the WASM one in practice), and a test holds the two to each other.

Public surface: `PROBES`, `AS_NUMBER`, `TAIL`, `YEAR_CENTURIES`, `MASK_ALLOWED`,
`MASK_REJECTED`, `MASK_REFUSED`, `MASK_UNTRIED`, `VALUE_BEGINS`, `VALUE_ENDS`, `year_shaped(text)`, `Tails`, `decide(look, rows, candidates,
usable, tails, token_ends)`, `tail_after(tail, data)`.
"""

from __future__ import annotations

import re

import numpy as np

# the decision's constants are ABI (the C++ core reads them through the generated header)
from ..abi import (  # noqa: F401 (its public surface)
    AS_NUMBER,
    MASK_ALLOWED,
    MASK_REFUSED,
    MASK_REJECTED,
    MASK_UNTRIED,
    PROBES,
    TAIL,
    VALUE_BEGINS,
    VALUE_ENDS,
    YEAR_CENTURIES,
)

_YEAR_END = re.compile(rb"(?<![0-9.,])(?:19|20|21)[0-9]{2}\Z")
_WIDE = 16  # the bytes the vectorised tests look at: a tail, a token's last bytes, a probe
_DIGIT = np.zeros(256, bool)
_DIGIT[ord("0") : ord("9") + 1] = True
_NUMERIC = _DIGIT.copy()
_NUMERIC[[ord("."), ord(",")]] = True
_POINT = np.zeros(256, bool)
_POINT[[ord("."), ord(",")]] = True
_CENTURY = np.zeros((256, 256), bool)
for _c in YEAR_CENTURIES:
    _CENTURY[_c[0], _c[1]] = True


def year_shaped(text: bytes) -> bool:
    """Whether `text` ends in four ASCII digits from 1900 to 2199, not after a digit, a point
    or a comma: what the lexer reads as a year written alone (a date) where a number was being
    written ("temperature 1" continued by "995"). (At the end of a longer date, `11/30/2019`,
    it says yes too: guard then asks more than it needs to.)"""
    return _YEAR_END.search(text) is not None


def _right(data: bytes, width: int) -> np.ndarray:
    out = np.zeros(width, np.uint8)
    tail = data[-width:]
    if tail:
        out[width - len(tail) :] = np.frombuffer(tail, np.uint8)
    return out


def _years(ends: np.ndarray) -> np.ndarray:
    """Rows of `ends` (right-aligned last bytes) that are `year_shaped`."""
    return _DIGIT[ends[:, -4:]].all(axis=1) & _CENTURY[ends[:, -4], ends[:, -3]] & ~_NUMERIC[ends[:, -5]]


def _open(ends: np.ndarray) -> np.ndarray:
    """Rows of `ends` that end inside a number: a digit, or a digit and "." or ","."""
    last, before = ends[:, -1], ends[:, -2]
    return _DIGIT[last] | (_POINT[last] & _DIGIT[before])


def _append(ends: np.ndarray, pieces: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each row of `ends` with its piece (right-aligned in `pieces`, `lengths` long) after it."""
    width = ends.shape[1]
    shift = np.minimum(lengths, width)[:, None]
    j = np.arange(width)[None, :]
    src = np.concatenate([ends, pieces[:, -width:] if pieces.shape[1] >= width else _widen(pieces, width)], axis=1)
    # byte j of the result: ends[j + shift] while that is inside ends, else the piece's byte j
    return np.where(
        j < width - shift, np.take_along_axis(src, np.minimum(j + shift, width - 1), axis=1), src[:, width:]
    )


def _widen(a: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros((a.shape[0], width), np.uint8)
    out[:, width - a.shape[1] :] = a
    return out


class Tails:
    """Each token's last bytes and length, for keeping `TAIL` bytes of every row's text and
    for the decision's tests on "tail + candidate" — all numpy, a few calls per step."""

    def __init__(self, tokens: list[bytes]):
        n = len(tokens)
        self.last = np.zeros((n, _WIDE), np.uint8)
        self.length = np.zeros(n, np.int64)
        for i, t in enumerate(tokens):
            if t:
                self.last[i] = _right(t, _WIDE)
                self.length[i] = len(t)
        self.has_digit = np.array([any(48 <= b <= 57 for b in t) for t in tokens], bool)
        # a value's bytes (what guard's withhold policy takes back): each token's trailing run of
        # digits, "." and ",", whether that run holds a digit, whether the token is whitespace
        runs = [len(t) - len(t.rstrip(b"0123456789.,")) for t in tokens]
        self.run_len = np.array(runs, np.int64)
        self.run_digit = np.array(
            [any(48 <= b <= 57 for b in t[len(t) - r :]) for t, r in zip(tokens, runs, strict=True)], bool
        )
        self.space = np.array([bool(t) and not t.strip() for t in tokens], bool)
        # where a value begins in the token: the first digit of its trailing run
        self.value_at = np.array(
            [
                len(t) - r + next((j for j, b in enumerate(t[len(t) - r :]) if 48 <= b <= 57), r)
                for t, r in zip(tokens, runs, strict=True)
            ],
            np.int64,
        )

    def advance(self, tails: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """`tails` ([m, TAIL] uint8) after each row's token `ids[i]`."""
        return _append(tails, self.last[ids][:, -TAIL:], self.length[ids])

    def value_marks(self, tails: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For texts ending in `tails` continued by tokens `ids`: (the token begins a new
        value — a number starting in it —, the token ends the value the text held)."""
        n = self.length[ids]
        run = self.run_len[ids]
        cont = (run == n) & (n > 0) & _open(tails)
        new = self.run_digit[ids] & ~cont
        return new, ~cont & ~self.run_digit[ids] & ~self.space[ids]

    def ends(self, tails: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The last `_WIDE` bytes of each row's text with its candidate after it."""
        return _append(_widen(tails, _WIDE), self.last[ids], self.length[ids])


def tail_after(tail: np.ndarray, data: bytes) -> np.ndarray:
    """A row's `TAIL` last bytes after `data`."""
    return np.frombuffer((bytes(tail) + data)[-TAIL:], np.uint8).copy()


def _probe_ends(ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row of `ends` and each probe (row-major): the ends with the probe after them,
    and whether they are year_shaped."""
    p = len(PROBES)
    pieces = np.stack([_right(q, _WIDE) for q in PROBES])
    lengths = np.array([len(q) for q in PROBES])
    rows = np.repeat(ends, p, axis=0)
    probed = _append(rows, np.tile(pieces, (len(ends), 1)), np.tile(lengths, len(ends)))
    return probed, _years(probed)


def decide(look, rows: np.ndarray, candidates: np.ndarray, usable: np.ndarray, tails: np.ndarray, table: Tails,
           probe_ids: np.ndarray, as_number_id: int, probe_numbers: np.ndarray, greedy: bool = False) -> np.ndarray:  # fmt: skip
    """The mask (`MASK_*`, rows × K) of each candidate of each row, tried on copies of the
    sequences (`look`: a `heatc_runtime.batching.lookahead.Lookahead` over the rows' batch, whose token
    table holds the probes at `probe_ids`, `AS_NUMBER` at `as_number_id` and each probe followed
    by it at `probe_numbers`). `usable` marks the candidates to judge (the others are
    `MASK_REFUSED`); `tails` are the rows' `TAIL` last bytes. With `greedy` the usable
    candidates below a row's first that passes are `MASK_UNTRIED` (greedy decoding takes the
    best that passes: the native core stops there). Two runtime calls for the whole
    batch, three more where some candidate fails leaving a number open, and a lookahead more
    where a text then ends in a year's digits."""
    n, width = candidates.shape
    if greedy and width > 1:
        # the best candidates first; the rest only for the rows whose best failed
        first = np.zeros_like(usable)
        first[:, 0] = usable[:, 0]
        mask = decide(look, rows, candidates, first, tails, table, probe_ids, as_number_id, probe_numbers)
        again = np.flatnonzero(mask[:, 0] != MASK_ALLOWED)
        if len(again):
            rest = usable[again].copy()
            rest[:, 0] = False
            more = decide(look, rows[again], candidates[again], rest, tails[again], table, probe_ids, as_number_id,
                          probe_numbers)  # fmt: skip
            mask[again, 1:] = more[:, 1:]
        passed = mask == MASK_ALLOWED
        below = np.cumsum(passed, axis=1) - passed > 0  # (after a row's first that passed)
        mask[below & usable] = MASK_UNTRIED
        return mask
    mask = np.full(n * width, MASK_REFUSED, np.uint8)
    base = np.repeat(look.rejections(rows), width)
    flat_rows, flat = np.repeat(rows, width), candidates.ravel().astype(np.int64)
    tried = np.flatnonzero(usable.ravel())
    if not len(tried):
        return mask.reshape(n, width)
    row_of = np.repeat(np.arange(n), width)[tried]
    ends = table.ends(tails[row_of], flat[tried])
    nonempty = table.length[flat[tried]] > 0
    good = look.try_tokens(flat_rows[tried], flat[tried]) == base[tried]
    years = np.flatnonzero(good & nonempty & _years(ends))
    if len(years):
        at = tried[years]
        as_number = look.try_tokens(flat_rows[at], flat[at], np.full(len(at), as_number_id))
        good[years[as_number != base[at]]] = False
    failed = np.flatnonzero(~good & nonempty & _open(ends))
    if len(failed):
        at, p = tried[failed], len(PROBES)
        pr, pt, before = np.repeat(flat_rows[at], p), np.repeat(flat[at], p), np.repeat(base[at], p)
        passed = look.try_tokens(pr, pt, np.tile(probe_ids, len(at))) == before
        _, shaped = _probe_ends(ends[failed])
        again = np.flatnonzero(shaped & passed)
        if len(again):
            numbers = np.tile(probe_numbers, len(at))[again]
            passed[again] = look.try_tokens(pr[again], pt[again], numbers) == before[again]
        good[failed[passed.reshape(-1, p).any(axis=1)]] = True
    mask[tried] = np.where(good, MASK_ALLOWED, MASK_REJECTED)
    return mask.reshape(n, width)
