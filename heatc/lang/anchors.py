"""The anchor table: anchor terms normalised, hashed into an open-addressing table of u64
keys, with the prefilters a kernel checks before hashing a run (docs/semantics.md,
"Anchors"; ir.AnchorTable).

Public surface: `build_anchor_table(program, decls, literals, default_domain, error)`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

from heatc import ir
from heatc.lang import ast
from heatc.lang.unparse import format_string
from heatc.semantics.lexing import (
    anchor_filter_hash,
    anchor_key,
    fnv1a64,
    is_anchor_text,
    join_anchor_run,
    lex,
    normalise_anchor_text,
)


def build_anchor_table(
    program: ir.Program,
    decls: dict[str, ast.AnchorDecl],
    literals: list,
    default_domain: str,
    error: Callable[[ast.Pos, str], None],
) -> dict[int, int]:
    """Fill `program.anchor_groups` and `program.anchors` from the anchor declarations
    (`error(pos, message)` reports each bad term) and return, per literal code, the
    anchor flags (ir.FLAG_ANCHOR_MEMBER, ir.FLAG_ANCHOR_END) of the literals that occur
    in a term. `literals` are the compiler's literals, in code order (`.text`)."""
    flags: dict[int, int] = {}
    groups: list[ir.AnchorGroup] = []
    entries: dict[int, tuple[int, ast.Str]] = {}
    texts: list[bytes] = []  # normalised terms
    last_lexemes: list[bytes] = []  # their last pieces
    members: list[bytes] = []  # their letter runs and non-ASCII characters
    longest = 0
    for g, (name, d) in enumerate(decls.items()):
        domain = d.domain.text if d.domain is not None else default_domain
        groups.append(ir.AnchorGroup(name, domain, len(d.terms)))
        for term in d.terms:
            lexemes = lex(program, term.text.encode("utf-8"))
            breaks = [x for x in lexemes if not is_anchor_text(x.code, x.raw)]
            if not lexemes:
                error(term.pos, "an anchor term cannot be empty")
                continue
            if breaks:
                error(
                    term.pos,
                    f"anchor term {format_string(term.text)} contains {breaks[0].raw.decode('utf-8', 'replace')!r}, "
                    "which breaks anchor text (numbers and ASCII punctuation); it could never be seen",
                )
                continue
            if len(lexemes) > ir.MAX_ANCHOR_LEXEMES:
                error(
                    term.pos,
                    f"anchor term {format_string(term.text)} is {len(lexemes)} lexemes long; "
                    f"the limit is {ir.MAX_ANCHOR_LEXEMES}",
                )
                continue
            longest = max(longest, len(lexemes))
            text = _normalised_run(lexemes)
            key = anchor_key(domain, text)
            if key in entries:
                _, other = entries[key]
                error(
                    term.pos,
                    f"anchor term {format_string(term.text)} is the same as {format_string(other.text)} "
                    f"(line {other.pos.line}) once normalised",
                )
                continue
            if key == 0:
                error(term.pos, "this anchor term hashes to 0, which the table reserves; reword it")
                continue
            entries[key] = (g, term)
            texts.append(text)
            pieces = _anchor_pieces(text)
            members += pieces
            last_lexemes += pieces[-1:]  # none when the term is all punctuation literals
    size = 1
    while size < 2 * len(entries):
        size *= 2
    filter_bits = 64
    while filter_bits < 16 * len(entries):
        filter_bits *= 2
    bloom = [0] * (filter_bits // 64) if entries else []
    end_bloom = [0] * (filter_bits // 64) if entries else []
    member_bloom = [0] * (filter_bits // 64) if entries else []
    hashes = [(bloom, anchor_filter_hash(text)) for text in texts] + [(end_bloom, fnv1a64(x)) for x in last_lexemes]
    hashes += [(member_bloom, fnv1a64(x)) for x in members]
    for words, h in hashes:
        for bit in (h % filter_bits, (h >> 32) % filter_bits):
            words[bit // 64] |= 1 << (bit % 64)
    keys = [0] * size if entries else []
    slots = [-1] * size if entries else []
    for key, (g, _) in entries.items():
        slot = key & (size - 1)
        while keys[slot]:
            slot = (slot + 1) & (size - 1)
        keys[slot], slots[slot] = key, g
    program.anchor_groups = groups
    program.anchors = ir.AnchorTable(
        size if entries else 0,
        keys,
        slots,
        longest,
        filter_bits if entries else 0,
        bloom,
        end_bloom,
        member_bloom,
        sorted({x.decode("utf-8") for x in members}),
    )
    for i, lit in enumerate(literals):
        norm = normalise_anchor_text(lit.text.encode("utf-8"))
        if any(norm in t for t in texts):
            flags[ir.LEX_LITERAL0 + i] = ir.FLAG_ANCHOR_MEMBER
        if any(t.endswith(norm) for t in texts):
            flags[ir.LEX_LITERAL0 + i] |= ir.FLAG_ANCHOR_END
    return flags


def _anchor_pieces(text: bytes) -> list[bytes]:
    """The maximal ASCII-letter runs and the non-ASCII characters of a normalised term, in
    order: whatever literals a stream's lexer used, a word or other-token in a run that
    spells the term is one of these."""
    pieces = []
    for m in re.finditer(rb"[a-z]+|[^\x00-\x7f]+", text):
        if m.group()[0] < 0x80:
            pieces.append(m.group())
        else:
            pieces += [ch.encode("utf-8") for ch in m.group().decode("utf-8")]
    return pieces


def _normalised_run(lexemes) -> bytes:
    parts = [(False, normalise_anchor_text(lexemes[0].raw))]
    parts += [(x.start > prev.end, normalise_anchor_text(x.raw)) for prev, x in itertools.pairwise(lexemes)]
    return join_anchor_run(parts)
