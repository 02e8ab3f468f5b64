"""A reference machine's state as the fixed-size record every backend stores
(`ir.state_layout`, docs/ir.md "State layout"): written mid-stream and read back, so a
property test can check that the record holds the whole state.

Public surface: `state_bytes(machine)`, `from_state(program, state)`.
"""

from __future__ import annotations

import struct

from heatc import ir
from heatc.semantics.reference import Machine, _AnchorEntry, _Thread


def state_bytes(m: Machine) -> bytes:
    """The machine's state in its program's fixed layout (undelivered events excluded)."""
    p = m.program
    layout = ir.state_layout(p)
    out = bytearray(layout.size)

    def put(name: str, fmt: str, *values) -> None:
        struct.pack_into("<" + fmt, out, layout.field(name).offset, *values)

    lx = m._lexer
    put("pos", "Q", lx.pos)
    put("lexemes", "Q", m.lexemes)
    put("tokens", "Q", m.tokens)
    put("matches", "Q", m.matches)
    put("rejections", "Q", m.rejections)
    put("tok_start", "Q", lx.tok_start)
    put("last_end", "Q", m._last_end)
    put("dfa_state", "I", lx.state)
    put("buf_len", "I", len(lx.buf))
    put("last_tok", "I", lx.last_tok)
    put("last_len", "I", lx.last_len)
    put("pend_tok", "I", lx.pend_tok)
    put("pend_fallback", "I", lx.pend_fallback)
    put("pend_len", "I", lx.pend_len)
    put("flags", "I", 1 if m.finished else 0)
    put("pending_events", "I", len(m._events))
    f = layout.field("buf")
    out[f.offset : f.offset + len(lx.buf)] = lx.buf
    f = layout.field("active_rules")
    n_active = 0
    for r, rs in enumerate(m._rules):
        if any(t is not None for t in rs.slots):
            out[f.offset + r // 8] |= 1 << (r % 8)
            n_active += 1
    put("n_active", "I", n_active)
    if p.anchors.max_lexemes:
        put("anchor_count", "I", len(m._anchors))
        put("anchor_head", "I", 0)
        for i, e in enumerate(m._anchors):
            put(f"anchor[{i}].start", "Q", e.start)
            put(f"anchor[{i}].space_before", "B", 1 if e.space_before else 0)
            put(f"anchor[{i}].len", "B", len(e.text))
            f = layout.field(f"anchor[{i}].text")
            out[f.offset : f.offset + len(e.text)] = e.text
    if p.anchor_groups:
        f = layout.field("anchor_active")
        for g, on in enumerate(m._active):
            if on:
                out[f.offset + g // 8] |= 1 << (g % 8)
    for c, ch in enumerate(m._channels):
        put(f"channel[{c}].set", "Q", 1 if ch.set else 0)
        put(f"channel[{c}].value", "d", ch.value)
        put(f"channel[{c}].start", "Q", ch.start)
        put(f"channel[{c}].end", "Q", ch.end)
    for r, rs in enumerate(m._rules):
        put(f"rule[{r}].rejected", "I", 1 if rs.rejected else 0)
        put(f"rule[{r}].matches", "I", rs.matches)
        for s in range(1, len(rs.slots)):
            t = rs.slots[s]
            if t is None:
                continue
            put(f"rule[{r}].slot[{s}].active", "B", 1)
            put(f"rule[{r}].slot[{s}].gaps", "B", t.gaps)
            put(f"rule[{r}].slot[{s}].start", "Q", t.start)
            if t.caps:
                put(f"rule[{r}].slot[{s}].captures", f"{len(t.caps)}d", *t.caps)
    return bytes(out)


def from_state(program: ir.Program, state: bytes) -> Machine:
    """A machine continuing from `state_bytes(m)` (with no undelivered events)."""
    layout = ir.state_layout(program)
    if len(state) != layout.size:
        raise ValueError(f"state is {len(state)} bytes, this program's state is {layout.size}")
    m = Machine(program)

    def get(name: str, fmt: str):
        values = struct.unpack_from("<" + fmt, state, layout.field(name).offset)
        return values[0] if len(values) == 1 else list(values)

    lx = m._lexer
    lx.pos = get("pos", "Q")
    lx.tok_start = get("tok_start", "Q")
    m.lexemes = get("lexemes", "Q")
    m.tokens = get("tokens", "Q")
    m.matches = get("matches", "Q")
    m.rejections = get("rejections", "Q")
    lx.state = get("dfa_state", "I")
    n = get("buf_len", "I")
    f = layout.field("buf")
    lx.buf = bytearray(state[f.offset : f.offset + n])
    lx.last_tok, lx.last_len = get("last_tok", "I"), get("last_len", "I")
    lx.pend_tok, lx.pend_fallback, lx.pend_len = (
        get("pend_tok", "I"),
        get("pend_fallback", "I"),
        get("pend_len", "I"),
    )
    m.finished = bool(get("flags", "I") & 1)
    m._last_end = get("last_end", "Q")
    if program.anchors.max_lexemes:
        head, count = get("anchor_head", "I"), get("anchor_count", "I")
        for j in range(count):
            i = (head + j) % program.anchors.max_lexemes
            f = layout.field(f"anchor[{i}].text")
            size = get(f"anchor[{i}].len", "B")
            m._anchors.append(
                _AnchorEntry(
                    get(f"anchor[{i}].start", "Q"),
                    bool(get(f"anchor[{i}].space_before", "B")),
                    bytes(state[f.offset : f.offset + size]),
                )
            )
    if program.anchor_groups:
        f = layout.field("anchor_active")
        m._active = [bool(state[f.offset + g // 8] >> (g % 8) & 1) for g in range(len(program.anchor_groups))]
    for c, ch in enumerate(m._channels):
        ch.set = bool(get(f"channel[{c}].set", "Q"))
        ch.value = get(f"channel[{c}].value", "d")
        ch.start, ch.end = get(f"channel[{c}].start", "Q"), get(f"channel[{c}].end", "Q")
    for r, (rule, rs) in enumerate(zip(program.rules, m._rules, strict=True)):
        rs.rejected = bool(get(f"rule[{r}].rejected", "I"))
        rs.matches = get(f"rule[{r}].matches", "I")
        for s in range(1, len(rs.slots)):
            if get(f"rule[{r}].slot[{s}].active", "B"):
                caps = get(f"rule[{r}].slot[{s}].captures", f"{len(rule.captures)}d") if rule.captures else []
                rs.slots[s] = _Thread(
                    get(f"rule[{r}].slot[{s}].start", "Q"),
                    get(f"rule[{r}].slot[{s}].gaps", "B"),
                    caps if isinstance(caps, list) else [caps],
                )
                m._live.add(r)
    return m
