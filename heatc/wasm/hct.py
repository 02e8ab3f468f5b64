"""Writing rules.hct: the packed tables (heatc.wasm.pack) with the header, section table and
parameters a native or CUDA core reads (format: docs/heatmap.md, "rules.hct"; reader and
field order: heatc_runtime.backends.hct).

Public surface: `hct_params(program, packed)`, `hct_bytes(program, packed, tier_ends)`.
"""

from __future__ import annotations

import hashlib

from heatc import ir
from heatc.wasm.codegen import ABI_MAJOR, ABI_MINOR
from heatc.wasm.pack import Packed
from heatc_runtime.abi import (
    EVENT,
    HCT_DIGITS_BEFORE_DIGIT,
    HCT_DIGITS_DECIMALS,
    HCT_DIGITS_ON,
    HCT_DIGITS_PERCENT,
    HCT_DIGITS_YEARS,
    SNAPSHOT,
)
from heatc_runtime.backends.hct import HCT_MAGIC, HCT_VERSION, HEAD, PARAM, SECTION, VALUES

_FIXED = (
    "pos", "lexemes", "tokens", "matches", "rejections", "tok_start", "last_end", "dfa_state", "buf_len",
    "last_tok", "last_len", "pend_tok", "pend_fallback", "pend_len", "flags", "pending_events", "n_active", "buf",
    "active_rules",
)  # fmt: skip
_OPTIONAL = {  # field → the state_layout name it is read from, when the program has it
    "look_mark": "look_mark", "look_start": "look_start", "look_code": "look_code", "look_len": "look_len",
    "look_buf": "look_buf", "anchor_count": "anchor_count", "anchor_head": "anchor_head", "ring": "anchor[0].start",
    "anchor_active": "anchor_active", "channels": "channel[0].set",
}  # fmt: skip


def hct_params(program: ir.Program, packed: Packed) -> dict[str, int]:
    """The named parameters of rules.hct (heatc_runtime.backends.hct.VALUES), from the program's state
    layout and its packed tables' constants."""
    layout = ir.state_layout(program)
    names = {f.name for f in layout.fields}
    k = packed.consts
    lx = program.lexer
    values = {
        "state_size": layout.size,
        "event_size": EVENT.size + 8 * max(1, k["max_captures"]),
        "snapshot_size": SNAPSHOT.size + -(-len(program.rules) // 8) * 8,
        "n_rules": len(program.rules),
        "n_codes": k["n_codes"],
        "dfa_width": k["dfa_width"],
        "dfa_words": lx.n_states * k["dfa_width"],
        "max_lexeme": lx.max_lexeme,
        "plm": max(1, k["max_final"] + len(program.anchor_groups)),
        "window": program.window,
        "late": k["late"],
        "anchor_lexemes": program.anchors.max_lexemes,
        "n_groups": len(program.anchor_groups),
        "anchor_size": program.anchors.size,
        "filter_bits": program.anchors.filter_bits,
        "n_domains": k["n_domains"],
        "n_cn": k["n_cn"],
        "max_captures": k["max_captures"],
        "n_channels": len(program.channels),
        "word_row": k["word_row"],
        "skip_log2": k["skip_log2"],
        "skip_cjk": k["skip_cjk"],
        "skip_weak": k["skip_weak"],
        **_digit_runs(k),
    }
    for name in _FIXED:
        values[f"off_{name}"] = layout.field(name).offset
    for name, field in _OPTIONAL.items():
        values[f"off_{name}"] = layout.field(field).offset if field in names else 0
    assert tuple(values) == VALUES, "heatc.wasm.hct and heatc_runtime.backends.hct disagree on the parameters"
    return values


def _digit_runs(k: dict) -> dict[str, int]:
    """The skipper's digit runs (heatc.wasm.digits.digit_runs, as pack() keeps them) as the
    `skip_digits` bits and the `digit_extenders` bytes (heatc_runtime.abi, HCT_DIGITS_*)."""
    if not k["skip_digits"]:
        return {"skip_digits": 0, "digit_extenders": 0}
    bits = HCT_DIGITS_ON
    bits |= HCT_DIGITS_DECIMALS if k["digit_decimals"] else 0
    bits |= HCT_DIGITS_PERCENT if k["digit_percent"] else 0
    bits |= HCT_DIGITS_YEARS if k["digit_years"] else 0
    extenders = 0
    for i, c in enumerate(k["digit_extenders"]):
        extenders |= (c & 0xFF) << (8 * i)
        bits |= HCT_DIGITS_BEFORE_DIGIT << i if c > 0xFF else 0
    return {"skip_digits": bits, "digit_extenders": extenders}


def hct_bytes(program: ir.Program, packed: Packed, tier_ends: tuple[int, int]) -> bytes:
    """rules.hct: the header, the section table, the parameters, then the packed tables, whose
    rule records are contiguous in heat order."""
    blob = packed.blob
    sections = sorted(packed.offsets.items(), key=lambda kv: kv[1])
    header = HEAD.pack(
        HCT_MAGIC, HCT_VERSION, ABI_MAJOR, ABI_MINOR, len(program.rules), ir.state_layout(program).size, len(blob),
        tier_ends[0], tier_ends[1], hashlib.sha256(blob).digest(), len(sections),
    )  # fmt: skip
    table = b"".join(SECTION.pack(name.encode()[:16], off) for name, off in sections)
    params = hct_params(program, packed)
    values = len(params).to_bytes(4, "little") + b"".join(PARAM.pack(n.encode(), v) for n, v in params.items())
    return header + table + values + blob
