"""IR → WebAssembly: render the generic kernel (templates/kernel.wat.j2) with the packed
tables and the program's state layout, then assemble it with wasmtime's wat2wasm.

Public surface: `ABI_MAJOR`, `ABI_MINOR`, `compile_wasm(program, packed=None) -> WasmModule`,
`write_module(module, directory)`, `manifest(program, wasm, consts) -> dict`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache

import jinja2
import wasmtime

from heatc import __version__, ir
from heatc.numbers import YEAR_PIVOT
from heatc.wasm.pack import (
    CHANNEL_USE,
    CN_BIG_KIND,
    CN_DIGIT,
    CN_POINT,
    CN_SMALL_KIND,
    REQUIREMENT,
    RULE_BLOCKS_REL,
    Packed,
    pack,
)
from heatc.wasm.skipper import (
    CJK_CONTINUATIONS,
    CJK_KEY_MUL,
    DIGIT_RUN_MAX,
    SKIP_CJK_FINGERPRINTS,
    SKIP_CJK_TABLE,
    SKIP_KEY_MUL,
    SKIP_WORD_FINGERPRINTS,
)
from heatc_runtime.abi import FLAG_LOOK

ABI_MAJOR = 1
ABI_MINOR = 1

CONTROL = 0x100
SHA_W = 0x200  # 256 bytes: the sha256 message schedule
TMP_THREAD = 0x300  # a thread record for one-element rules
SCAN_OUT = 0x700  # results of the byte-scanning leaf function
SCRATCH = 0x800  # run text and sha256 message
TABLES_ALIGN = 64
PAGE = 65536
EVENT_HEADER = 64
SNAPSHOT_HEADER = 56


@dataclass
class WasmModule:
    wasm: bytes
    wat: str
    manifest: dict


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("heatc.wasm", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template("kernel.wat.j2")


def _wat_bytes(data: bytes) -> str:
    return "\\" + data.hex("\\") if data else ""


def _layout_consts(program: ir.Program) -> tuple[dict[str, int], int]:
    layout = ir.state_layout(program)
    names = [
        "pos", "lexemes", "tokens", "matches", "rejections", "tok_start", "last_end", "dfa_state", "buf_len",
        "last_tok", "last_len", "pend_tok", "pend_fallback", "pend_len", "flags", "pending_events", "n_active",
        "buf", "active_rules",
    ]  # fmt: skip
    f = {n: layout.field(n).offset for n in names}
    # The kernel relies on these pairs being adjacent (it clears them with one i64 store).
    assert f["last_len"] == f["last_tok"] + 4 and f["pend_fallback"] == f["pend_tok"] + 4
    a = program.anchors.max_lexemes
    f["anchor_count"] = layout.field("anchor_count").offset if a else 0
    f["anchor_head"] = layout.field("anchor_head").offset if a else 0
    f["ring"] = layout.field("anchor[0].start").offset if a else 0
    if a > 1:
        assert layout.field("anchor[1].start").offset - f["ring"] == 80
        assert layout.field("anchor[0].text").offset - f["ring"] == 10
    f["anchor_active"] = layout.field("anchor_active").offset if program.anchor_groups else 0
    f["channels"] = layout.field("channel[0].set").offset if program.channels else 0
    late = any(ir.starts_late(r) for r in program.rules)
    for name in ("look_mark", "look_start", "look_code", "look_len", "look_buf"):
        f[name] = layout.field(name).offset if late else 0
    return f, layout.size


def write_module(module: WasmModule, directory) -> None:
    """Write module.wasm and manifest.json (each atomically: temp file, then rename)."""
    import json
    import os
    from pathlib import Path

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in (
        ("module.wasm", module.wasm),
        ("manifest.json", (json.dumps(module.manifest, indent=1) + "\n").encode()),
    ):
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, directory / name)


def compile_wasm(program: ir.Program, packed: Packed | None = None) -> WasmModule:
    """`packed`: the program's `pack(program)`, when the caller has it already."""
    packed = packed or pack(program)
    assert DIGIT_RUN_MAX == 8, "the kernel's test for long digit runs is written for 8"
    fields, state_size = _layout_consts(program)
    k = packed.consts
    max_captures = max(1, k["max_captures"])
    n_groups = len(program.anchor_groups)
    max_domain = k["max_domain"]
    a = program.anchors.max_lexemes
    sha_msg = SCRATCH + max_domain + 1 + a * 65 + 16
    scratch_end = sha_msg + max_domain + 1 + a * 65 + 80
    tables = -(-scratch_end // TABLES_ALIGN) * TABLES_ALIGN
    heap_base = -(-(tables + len(packed.blob)) // 16) * 16
    consts = {
        "ABI_MAJOR": ABI_MAJOR,
        "ABI_MINOR": ABI_MINOR,
        "HEATC_VERSION": __version__,
        "PROGRAM_NAME": program.name,
        "N_RULES": len(program.rules),
        "W": (len(program.rules) + 63) // 64,
        "STATE_SIZE": state_size,
        "EV_SIZE": EVENT_HEADER + 8 * max_captures,
        "SNAP_SIZE": SNAPSHOT_HEADER + -(-len(program.rules) // 8) * 8,
        "PLM": max(1, k["max_final"] + n_groups),
        "CONTROL": CONTROL,
        "SHA_W": SHA_W,
        "TMP_THREAD": TMP_THREAD,
        "SCAN_OUT": SCAN_OUT,
        "MSG": SCRATCH,
        "SHA_MSG": sha_msg,
        "MAX_DOMAIN": max_domain,
        "TABLES": tables,
        "HEAP_BASE": heap_base,
        "INITIAL_PAGES": max(1, -(-heap_base // PAGE)),
        "DATA": _wat_bytes(packed.blob),
        "N_CLASSES": program.lexer.n_classes,
        "DFA_WIDTH": k["dfa_width"],
        "WORD_ROW": k["word_row"],
        "SKIP_LOG2": k["skip_log2"],
        "BULK_AGING": int(bool(program.rules) and not a),
        "LATE": k["late"],
        "FLAG_LOOK": FLAG_LOOK,
        "SKIP_CJK": k["skip_cjk"],
        "SKIP_WORD_FINGERPRINTS": SKIP_WORD_FINGERPRINTS,
        "SKIP_CJK_FINGERPRINTS": SKIP_CJK_FINGERPRINTS,
        "SKIP_CJK_TABLE": SKIP_CJK_TABLE,
        "SKIP_WEAK": k["skip_weak"],
        "SKIP_DIGITS": k["skip_digits"],
        "NUMBER_LOOK": k["number_look"],
        # the plain bytes that extend a number always, and those that do only before a digit
        # (the decimal point apart when decimals are on: the kernel keeps its own mask of it)
        "DIGIT_ALWAYS": [c for c in k["digit_extenders"] if c < 256],
        "DIGIT_BEFORE_DIGIT": [
            c & 255 for c in k["digit_extenders"] if c > 255 and not (k["digit_decimals"] and c & 255 == ord("."))
        ],
        "DIGIT_DECIMALS": k["digit_decimals"],
        "DIGIT_PERCENT": k["digit_percent"],
        "CJK_CONTINUATIONS": CJK_CONTINUATIONS,
        "CJK_KEY_MUL": CJK_KEY_MUL - (1 << 32) if CJK_KEY_MUL >= 1 << 31 else CJK_KEY_MUL,
        "SKIP_KEY_MUL": SKIP_KEY_MUL - (1 << 64) if SKIP_KEY_MUL >= 1 << 63 else SKIP_KEY_MUL,
        "MAX_LEXEME": program.lexer.max_lexeme,
        "N_CN": k["n_cn"],
        "CN_DIGIT": CN_DIGIT,
        "CN_SMALL": CN_SMALL_KIND,
        "CN_BIG": CN_BIG_KIND,
        "CN_POINT": CN_POINT,
        "ANCHORS": bool(a),
        "A": a,
        "ANCHOR_SIZE": program.anchors.size,
        "FILTER_BITS": program.anchors.filter_bits,
        "N_DOMAINS": k["n_domains"],
        "RING_ENTRY": 80,
        "WINDOW": program.window,
        "REQUIREMENT": REQUIREMENT,
        "CHANNEL_USE": CHANNEL_USE,
        "LEX_SPACE": ir.LEX_SPACE,
        "LEX_OTHER": ir.LEX_OTHER,
        "LEX_WORD": ir.LEX_WORD,
        "LEX_NUMBER": ir.LEX_NUMBER,
        "LEX_PERCENT": ir.LEX_PERCENT,
        "LEX_LITERAL0": ir.LEX_LITERAL0,
        "LEX_DATE": ir.LEX_DATE,
        "YEAR_PIVOT": YEAR_PIVOT,
        "RULE_BLOCKS_REL": RULE_BLOCKS_REL,
    }
    for name, offset in packed.offsets.items():
        consts[f"T_{name}"] = tables + offset
    wat = _template().render(C=consts, F=fields)
    wasm = wasmtime.wat2wasm(wat)
    return WasmModule(bytes(wasm), wat, manifest(program, bytes(wasm), consts))


def manifest(program: ir.Program, wasm: bytes, consts: dict) -> dict:
    """What a runtime needs besides the module: names to decode events, sizes, checksums."""
    return {
        "format": "heatc-module",
        "abi": {"major": ABI_MAJOR, "minor": ABI_MINOR},
        "heatc_version": __version__,
        "ir_version": program.ir_version,
        "name": program.name,
        "title": program.title,
        "wasm": {"file": "module.wasm", "sha256": hashlib.sha256(wasm).hexdigest(), "size": len(wasm)},
        "layout": {
            "state_size": consts["STATE_SIZE"],
            "event_size": consts["EV_SIZE"],
            "snapshot_size": consts["SNAP_SIZE"],
            "control": consts["CONTROL"],
            "heap_base": consts["HEAP_BASE"],
            "lexeme_events": consts["PLM"],
            "max_lexeme": program.lexer.max_lexeme,
            "window": program.window,
            "flags_offset": ir.state_layout(program).field("flags").offset,
        },
        "rules": [
            {
                "name": r.name,
                "description": r.description,
                "heat": r.heat,
                "freq": r.freq,
                "captures": [{"name": c.name, "kind": c.kind} for c in r.captures],
                "requirements": [q.text for q in r.requirements],
            }
            for r in program.rules
        ],
        "classes": [c.name for c in program.classes],
        "channels": [{"name": c.name, "kind": c.kind} for c in program.channels],
        "anchor_groups": [g.name for g in program.anchor_groups],
    }
