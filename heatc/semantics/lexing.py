"""Lexing and anchor normalisation: the part of the specification that the compiler
shares with the reference interpreter (docs/semantics.md §1 and "Anchors").

The compiler lexes literal text and hashes anchor terms with these very functions, so
build time and run time normalise identically; the reference interpreter runs the same
lexer over the stream.

Public surface: `Lexeme`, `NUMERIC_CODES`, `lexeme_value`, `lexeme_places`, `lex(program, data)`, `LexerState`, `run_lexer`, `finish_lexer`,
`normalise_anchor_text`, `join_anchor_run`, `fnv1a64`, `anchor_filter_hash`, `anchor_key`,
`is_anchor_text`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from heatc import ir
from heatc.semantics.numbers import date_value, number_places, number_value
from heatc_runtime.abi import FNV_OFFSET, FNV_PRIME  # (kernels hash anchors too: the ABI's)

_ASCII_LETTER = bytes(1 if (65 <= b <= 90 or 97 <= b <= 122) else 0 for b in range(256))
_ASCII_ALNUM = bytes(1 if _ASCII_LETTER[b] or 48 <= b <= 57 else 0 for b in range(256))
NUMERIC_CODES = ir.VALUE_CODES  # the codes whose lexemes have a value


def lexeme_value(code: int, raw: bytes) -> float:
    """The value of a lexeme: a number's or percent's (`number_value`), a date's year
    (`date_value`), 0 for any other."""
    if code == ir.LEX_DATE:
        return date_value(raw)
    return number_value(raw) if code in NUMERIC_CODES else 0.0


def lexeme_places(code: int, raw: bytes) -> int:
    """The digits a number or percent lexeme writes after its decimal point
    (`number_places`); 0 for a date and any other lexeme."""
    return number_places(raw) if code in (ir.LEX_NUMBER, ir.LEX_PERCENT) else 0


@dataclass(frozen=True)
class Lexeme:
    code: int  # lexeme code = symbol
    start: int
    end: int
    raw: bytes
    value: float = 0.0  # numbers and percents; a date's year
    places: int = 0  # digits after a number's or percent's decimal point (`lexeme_places`)

    @classmethod
    def of(cls, code: int, start: int, raw: bytes) -> Lexeme:
        """The lexeme `raw` of `code` at `start`, with its value and places."""
        return cls(code, start, start + len(raw), raw, lexeme_value(code, raw), lexeme_places(code, raw))


class LexerState:
    """Maximal munch over bytes with a bounded look-back buffer (semantics §1)."""

    __slots__ = ("buf", "last_len", "last_tok", "pend_fallback", "pend_len", "pend_tok", "pos", "state", "tok_start")

    def __init__(self) -> None:
        self.pos = 0  # bytes read so far
        self.state = 1
        self.buf = bytearray()
        self.tok_start = 0
        self.last_tok = self.last_len = 0
        self.pend_tok = self.pend_fallback = self.pend_len = 0


def run_lexer(lx: ir.Lexer, st: LexerState, data: bytes, emit, fresh: bool = True) -> None:
    """Feed `data` through the lexer; `emit(code, start, raw)` gets each finished token.
    `fresh`: the bytes are new input (counted in `pos`), not bytes being lexed again."""
    nxt, cls, ncls = lx.next, lx.byte_class, lx.n_classes
    accept, boundary, fallback, cap = lx.accept, lx.boundary, lx.fallback, lx.max_lexeme
    redo: list[int] = []  # bytes to lex again, last one first
    i, n = 0, len(data)
    while True:
        if redo:
            b = redo.pop()
        elif i < n:
            b = data[i]
            i += 1
            st.pos += fresh
        else:
            return
        if st.pend_tok:
            # The byte after a literal that ends in a letter decides its word boundary; after
            # a date, a digit breaks it too (semantics §1).
            if (_ASCII_ALNUM if st.pend_tok == ir.LEX_DATE else _ASCII_LETTER)[b]:
                if st.pend_fallback:
                    st.last_tok, st.last_len = st.pend_fallback, st.pend_len
            else:
                st.last_tok, st.last_len = st.pend_tok, st.pend_len
            st.pend_tok = st.pend_fallback = st.pend_len = 0
        t = nxt[st.state * ncls + cls[b]] if len(st.buf) < cap else 0
        if t:
            st.buf.append(b)
            st.state = t
            a = accept[t]
            if a:
                if boundary[t]:
                    st.pend_tok, st.pend_fallback, st.pend_len = a, fallback[t], len(st.buf)
                else:
                    st.last_tok, st.last_len = a, len(st.buf)
            continue
        # No longer token possible: emit the longest accepted one, lex the rest again.
        redo.append(b)
        redo.extend(reversed(_emit_last(st, emit)))


def _emit_last(st: LexerState, emit) -> bytes:
    raw = bytes(st.buf[: st.last_len])
    rest = bytes(st.buf[st.last_len :])
    emit(st.last_tok, st.tok_start, raw)
    st.tok_start += st.last_len
    st.buf = bytearray()
    st.state = 1
    st.last_tok = st.last_len = 0
    st.pend_tok = st.pend_fallback = st.pend_len = 0
    return rest


def finish_lexer(lx: ir.Lexer, st: LexerState, emit) -> None:
    """End of stream: the boundary after a pending literal holds; flush everything."""
    while st.buf:
        if st.pend_tok:
            st.last_tok, st.last_len = st.pend_tok, st.pend_len
        run_lexer(lx, st, _emit_last(st, emit), emit, fresh=False)


def lex(program: ir.Program, data: bytes) -> list[Lexeme]:
    """All lexemes of a complete stream (spaces dropped)."""
    out: list[Lexeme] = []

    def emit(code: int, start: int, raw: bytes) -> None:
        if code != ir.LEX_SPACE:
            out.append(Lexeme.of(code, start, raw))

    st = LexerState()
    run_lexer(program.lexer, st, data, emit)
    finish_lexer(program.lexer, st, emit)
    return out


def normalise_anchor_text(raw: bytes) -> bytes:
    """Lower-case ASCII letters; each ASCII whitespace run becomes one space."""
    out = bytearray()
    in_space = False
    for b in raw:
        if b in b" \t\n\v\f\r":
            if not in_space:
                out.append(0x20)
            in_space = True
            continue
        in_space = False
        out.append(b | 0x20 if _ASCII_LETTER[b] else b)
    return bytes(out)


def join_anchor_run(parts: list[tuple[bool, bytes]]) -> bytes:
    """Normalised text of a run: (whitespace before?, normalised lexeme) pairs, joined with
    one space where the stream had whitespace between two lexemes."""
    out = parts[0][1]
    for space_before, text in parts[1:]:
        out += (b" " if space_before else b"") + text
    return out


def fnv1a64(data) -> int:
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def anchor_filter_hash(normalised: bytes) -> int:
    """FNV-1a-64 over the bytes in reverse order: the anchor prefilter's hash (ir.AnchorTable)."""
    return fnv1a64(reversed(normalised))


def anchor_key(domain: str, normalised: bytes) -> int:
    """u64 key of an anchor term: sha256(domain ‖ 0x1F ‖ term), first 8 bytes, little-endian."""
    digest = hashlib.sha256(domain.encode("utf-8") + b"\x1f" + normalised).digest()
    return int.from_bytes(digest[:8], "little")


def is_anchor_text(code: int, raw: bytes) -> bool:
    return code == ir.LEX_WORD or code >= ir.LEX_LITERAL0 or (code == ir.LEX_OTHER and raw[0] >= 0x80)
