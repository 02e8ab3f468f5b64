"""The IR packed into one little-endian byte blob: what generic kernels (WASM data segment,
CUDA bridge tables) read. Rule records are contiguous and in heat order, so a prefix of
the rule section holds the hottest rules. Layout: docs/abi.md, "Tables"; the record layouts
and codes are the ABI's (heatc_runtime.abi).

Public surface: `pack(program) -> Packed`, `Packed`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from heatc import ir
from heatc.semantics.numbers import CN_BIG, CN_DIGITS, CN_SMALL, POW10
from heatc.wasm.skipper import skip_tables
from heatc_runtime.abi import (
    CHANNEL_USE,
    CN_ENTRY,
    CN_KIND_BIG,
    CN_KIND_DIGIT,
    CN_KIND_POINT,
    CN_KIND_SHIFT,
    CN_KIND_SMALL,
    DFA_BOUNDARY,
    DFA_CODE_MASK,
    DFA_FALLBACK_SHIFT,
    DOMAIN_ENTRY,
    ELEMENT,
    FLAG_LOOK,
    OPS,
    REQUIREMENT,
    RULE,
    THREAD,
    UNIT_CONVERSION,
)

OP_CODES = {op: i for i, op in enumerate(OPS)}

SHA256_K = [
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
]  # fmt: skip


def _cn_table() -> list[tuple[int, int]]:
    """Chinese numeral characters for the number-value kernel: (codepoint, kind << 16 | value),
    value the digit, the small multiplier (10, 100, 1000), or 1 for 万 and 2 for 亿."""
    entries: dict[int, int] = {}
    for ch, d in CN_DIGITS.items():
        entries[ord(ch)] = CN_KIND_DIGIT << CN_KIND_SHIFT | d
    for ch, v in CN_SMALL.items():
        entries[ord(ch)] = CN_KIND_SMALL << CN_KIND_SHIFT | v
    for ch, v in CN_BIG.items():
        entries[ord(ch)] = CN_KIND_BIG << CN_KIND_SHIFT | (1 if v == 10_000 else 2)
    entries[ord("点")] = CN_KIND_POINT << CN_KIND_SHIFT
    return sorted(entries.items())


@dataclass
class Packed:
    blob: bytes
    offsets: dict[str, int]  # section → offset in the blob
    consts: dict[str, int] = field(default_factory=dict)


class _Blob:
    def __init__(self) -> None:
        self.data = bytearray()
        self.offsets: dict[str, int] = {}

    def section(self, name: str, payload: bytes, align: int = 16) -> int:
        self.data += b"\0" * (-len(self.data) % align)
        self.offsets[name] = len(self.data)
        self.data += payload
        return self.offsets[name]


def _u32s(values) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def _rule_record(rule: ir.Rule, state_off: int, late: bool) -> bytes:
    k, nc = len(rule.elements), len(rule.captures)
    elements_rel = RULE.size
    accepts_rel = elements_rel + ELEMENT.size * k
    n_accepts = sum(len(e.accepts) for e in rule.elements)
    # binding: per element, the lexeme kinds its gap never skips (ir.Element.blocks)
    blocks_rel = accepts_rel + 4 * n_accepts
    # a quantity unit's conversions (ir.Element.units), 8-aligned, after the blocks
    units_rel = blocks_rel + 4 * k
    units_rel += -units_rel % 8
    accepts: list[int] = []
    element_bytes = b""
    unit_bytes = b""
    for i, e in enumerate(rule.elements):
        units_at = 0  # from the element record (none: 0)
        if e.convert >= 0:
            units_at = units_rel + len(unit_bytes) - (elements_rel + ELEMENT.size * i)
            for code, (pre, mul, div) in zip(e.accepts, e.units, strict=True):
                unit_bytes += UNIT_CONVERSION.struct.pack(code, 0, pre, mul, div)
        element_bytes += ELEMENT.struct.pack(
            e.gap, accepts_rel + 4 * len(accepts), len(e.accepts), e.capture, e.places, e.convert, units_at
        )
        accepts += e.accepts
    accept_bytes = _u32s(accepts) + _u32s([e.blocks for e in rule.elements])
    if unit_bytes:
        accept_bytes += b"\0" * (units_rel - blocks_rel - 4 * k) + unit_bytes
    reqs_rel = accepts_rel + len(accept_bytes)
    reqs_rel += -reqs_rel % 16
    req_bytes = b""
    for q in rule.requirements:
        low_mask = 0xFFFFFFFFFFFFFFFF if q.low_closed else 0
        high_mask = 0xFFFFFFFFFFFFFFFF if q.high_closed else 0
        req_bytes += REQUIREMENT.struct.pack(
            OP_CODES[q.op], q.left.capture, q.right.capture, 0,
            q.left.const, q.right.const, q.low, q.high, low_mask, high_mask,
        )  # fmt: skip
    chans_rel = reqs_rel + len(req_bytes)
    keys_rel = chans_rel + CHANNEL_USE.size * len(rule.channels)
    keys: list[int] = []
    chan_bytes = b""
    for u in rule.channels:
        chan_bytes += CHANNEL_USE.struct.pack(
            u.channel, u.capture, u.key, len(u.key_classes), keys_rel + 4 * len(keys), u.factor
        )
        keys += u.key_classes
    header = RULE.struct.pack(
        k, nc, rule.gate, state_off, len(rule.requirements), len(rule.channels),
        elements_rel, reqs_rel, chans_rel, THREAD.size + 8 * nc, int(late), blocks_rel, int(rule.observe),
    )  # fmt: skip
    body = header + element_bytes + accept_bytes
    body += b"\0" * (reqs_rel - len(body))
    body += req_bytes + chan_bytes + _u32s(keys)
    return body + b"\0" * (-len(body) % 16)


def _dfa_rows(lx: ir.Lexer) -> bytes:
    """The lexer automaton for kernels: one row of n_classes + 1 u32 per state. Entries are
    target rows premultiplied by the row width (0 = dead), so a step is `row + class`, with no
    multiply on the critical path; the extra column is the state's accept word:
    lexeme code (bits 0–14) | boundary (bit 15) | fallback lexeme code (bits 16–31)."""
    width = lx.n_classes + 1
    if lx.n_states * width >= 1 << 31 or max(lx.accept + lx.fallback, default=0) > DFA_CODE_MASK:
        raise ValueError("the lexer automaton is too large for the packed format")
    out = []
    for state in range(lx.n_states):
        row = lx.next[state * lx.n_classes : (state + 1) * lx.n_classes]
        out += [t * width for t in row]
        out.append(
            lx.accept[state] | (DFA_BOUNDARY if lx.boundary[state] else 0) | lx.fallback[state] << DFA_FALLBACK_SHIFT
        )
    return struct.pack(f"<{len(out)}I", *out)


def _word_state(lx: ir.Lexer) -> int:
    """The state inside a plain word: it accepts a word and every ASCII letter loops back to
    it (so a kernel may skip a run of letters at once). 0 if the automaton has none."""
    letters = {lx.byte_class[b] for b in range(256) if chr(b).isascii() and chr(b).isalpha()}
    for s in range(1, lx.n_states):
        if (
            lx.accept[s] == ir.LEX_WORD
            and not lx.boundary[s]
            and all(lx.next[s * lx.n_classes + c] == s for c in letters)
        ):
            return s
    return 0


def pack(program: ir.Program) -> Packed:
    p = program
    layout = ir.state_layout(p)
    lx = p.lexer
    b = _Blob()
    b.section("byte_class", bytes(lx.byte_class))
    b.section("dfa", _dfa_rows(lx))
    # Late-starting rules (ir.starts_late) are visited at their second lexeme: the codes of
    # their second element start them, those of their first are kept as the look-behind
    n_codes = len(p.code_flags)
    late = [ir.starts_late(rule) for rule in p.rules]
    flags = [f & ~ir.FLAG_STARTS for f in p.code_flags]
    starts: list[list[int]] = [[] for _ in range(n_codes)]
    finals = [0] * n_codes  # rules whose last element accepts each code
    for r, rule in enumerate(p.rules):
        for code in rule.elements[1 if late[r] else 0].accepts:
            starts[code].append(r)
            flags[code] |= ir.FLAG_STARTS
        if late[r]:
            for code in rule.elements[0].accepts:
                flags[code] |= FLAG_LOOK
        for code in rule.elements[-1].accepts:
            finals[code] += 1
    b.section("code_flags", bytes(flags))
    kinds = p.code_kinds or [0] * n_codes
    b.section("code_kinds", bytes(kinds))  # per code its kind (ir.KIND_*): the gaps it ends
    # inert tokens: in no element's accept list, no barrier, of no kind a gap does not skip:
    # to a live thread such a lexeme is only one more gap, so a kernel may age threads by a
    # run of them at once
    accepted = {code for rule in p.rules for e in rule.elements for code in e.accepts}
    blocked = 0
    for rule in p.rules:
        for e in rule.elements:
            blocked |= e.blocks
    busy = ir.FLAG_BARRIER | ir.FLAG_STARTS | ir.FLAG_ANCHOR_MEMBER
    b.section(
        "inert",
        bytes(
            int(code not in accepted and not flag & busy and not kinds[code] & blocked)
            for code, flag in enumerate(flags)
        ),
    )
    b.section("literal_class", _u32s([lit.class_id for lit in p.literals]))

    start_off = [0]
    for s in starts:
        start_off.append(start_off[-1] + len(s))
    b.section("start_off", _u32s(start_off))
    b.section("start_rules", _u32s([r for s in starts for r in s]) or b"\0\0\0\0")

    rule_offsets = []
    records = bytearray()
    for r, rule in enumerate(p.rules):
        rule_offsets.append(len(records))
        records += _rule_record(rule, layout.field(f"rule[{r}].rejected").offset, late[r])
    rules_at = b.section("rules", bytes(records))
    b.section("rule_off", _u32s([rules_at + o for o in rule_offsets]) or b"\0\0\0\0")

    a = p.anchors
    b.section("anchor_keys", struct.pack(f"<{a.size}Q", *a.keys))
    b.section("anchor_groups", struct.pack(f"<{a.size}i", *a.groups))
    b.section("anchor_filter", struct.pack(f"<{len(a.filter)}Q", *a.filter))
    b.section("anchor_end_filter", struct.pack(f"<{len(a.end_filter)}Q", *a.end_filter))
    b.section("anchor_member_filter", struct.pack(f"<{len(a.member_filter)}Q", *a.member_filter))
    domains = list(dict.fromkeys(g.domain.encode("utf-8") for g in p.anchor_groups))
    domain_index, domain_bytes = b"", b""
    for d in domains:
        domain_index += DOMAIN_ENTRY.struct.pack(len(domain_bytes), len(d))
        domain_bytes += d
    b.section("domain_index", domain_index)
    b.section("domain_bytes", domain_bytes)
    b.section("pow10", struct.pack("<400d", *POW10))
    cn = _cn_table()
    b.section("cn_table", b"".join(CN_ENTRY.struct.pack(cp, code) for cp, code in cn))
    b.section("sha256_k", _u32s(SHA256_K))

    skip = skip_tables(p, flags)
    if skip:
        b.section("skip_plain", skip.plain)
        b.section("skip_words", skip.words)
    digits = skip.digits if skip else None

    consts = {
        "skip_log2": skip.log2 if skip else 0,
        "skip_cjk": skip.cjk_log2 if skip else 0,
        "skip_weak": int(bool(skip and skip.weak)),
        "skip_digits": int(digits is not None),
        "digit_extenders": list(digits[0]) if digits else [],
        "digit_decimals": int(bool(digits and digits[1])),
        "digit_percent": int(bool(digits and digits[2])),
        "digit_years": int(bool(digits and digits[3])),
        "number_look": int(bool(flags[ir.LEX_NUMBER] & FLAG_LOOK)),
        "dfa_width": lx.n_classes + 1,
        "word_row": _word_state(lx) * (lx.n_classes + 1),
        "n_codes": n_codes,
        "n_rules": len(p.rules),
        "n_domains": len(domains),
        "max_domain": max((len(d) for d in domains), default=0),
        "n_cn": len(cn),
        "max_final": max(finals, default=0),
        "max_captures": max((len(r.captures) for r in p.rules), default=0),
        "late": int(any(late)),
    }
    return Packed(bytes(b.data), b.offsets, consts)
