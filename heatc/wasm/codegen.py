"""IR → WebAssembly: render the generic kernel (templates/kernel.wat.j2) with the packed
tables and the program's state layout, then assemble it with wasmtime's wat2wasm.

Public surface: `ABI_MAJOR`, `ABI_MINOR`, `compile_wasm(program, packed=None) -> WasmModule`,
`write_module(module, directory)`, `manifest(program, wasm, consts) -> dict`, `SWITCHES`,
`kernel_switches(program, packed=None) -> dict`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache

import jinja2
import wasmtime

from heatc import ir
from heatc.version import __version__
from heatc.wasm.pack import Packed, pack
from heatc.wasm.skipper import word_table_layout
from heatc_runtime import abi
from heatc_runtime.abi import ABI_MAJOR, ABI_MINOR, PAGE, SCRATCH, TABLES_ALIGN

#: The kernel template's feature switches (`{% if C.NAME %}`): which code a program's module
#: holds. docs/testing.md ("Kernel feature combinations") says which combinations rule sets
#: reach; tests/test_kernel_features.py builds each.
SWITCHES = (
    "N_RULES", "ANCHORS", "LATE", "NUMBER_LOOK", "BULK_AGING", "WINDOW", "WORD_ROW", "SKIP_LOG2", "SKIP_CJK",
    "SKIP_WEAK", "SKIP_DIGITS", "DIGIT_ALWAYS", "DIGIT_BEFORE_DIGIT", "DIGIT_DECIMALS", "DIGIT_PERCENT",
    "DIGIT_YEARS",
)  # fmt: skip


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


def _layout_consts(program: ir.Program) -> tuple[dict[str, int], int, int]:
    """The state layout's offsets the kernel reads (`F.name`), the state size, and the stride
    of the anchor ring's entries."""
    layout = ir.state_layout(program)
    f = {n: layout.field(n).offset for n in (*abi.STATE_HEAD.names, "buf", "active_rules")}
    # The kernel relies on these pairs being adjacent (it clears them with one i64 store).
    assert f["last_len"] == f["last_tok"] + 4 and f["pend_fallback"] == f["pend_tok"] + 4
    a = program.anchors.max_lexemes
    f["anchor_count"] = layout.field("anchor_count").offset if a else 0
    f["anchor_head"] = layout.field("anchor_head").offset if a else 0
    f["ring"] = layout.field("anchor[0].start").offset if a else 0
    ring_entry = -(-(abi.ANCHOR_ENTRY.size + program.lexer.max_lexeme) // 8) * 8
    if a > 1:
        assert layout.field("anchor[1].start").offset - f["ring"] == ring_entry
    if a:
        assert layout.field("anchor[0].text").offset - f["ring"] == abi.ANCHOR_ENTRY.size
    f["anchor_active"] = layout.field("anchor_active").offset if program.anchor_groups else 0
    f["channels"] = layout.field("channel[0].set").offset if program.channels else 0
    late = any(ir.starts_late(r) for r in program.rules)
    for name in ("look_mark", "look_start", "look_code", "look_len", "look_buf"):
        f[name] = layout.field(name).offset if late else 0
    return f, layout.size, ring_entry


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
    consts, fields = _constants(program, packed)
    consts["DATA"] = _wat_bytes(packed.blob)
    wat = _template().render(ABI=abi.constants(), C=consts, F=fields)
    wasm = wasmtime.wat2wasm(wat)
    return WasmModule(bytes(wasm), wat, manifest(program, bytes(wasm), consts))


def kernel_switches(program: ir.Program, packed: Packed | None = None) -> dict[str, bool]:
    """The feature switches (`SWITCHES`) `compile_wasm` renders the program's kernel with."""
    consts, _ = _constants(program, packed or pack(program))
    return {name: bool(consts[name]) for name in SWITCHES}


def _constants(program: ir.Program, packed: Packed) -> tuple[dict, dict[str, int]]:
    """The template's `C` (this program's constants and switches, the data segment apart) and
    `F` (its state-record offsets)."""
    assert abi.DIGIT_RUN_MAX == 8, "the kernel's test for long digit runs is written for 8"
    fields, state_size, ring_entry = _layout_consts(program)
    k = packed.consts
    max_captures = max(1, k["max_captures"])
    assert abi.TMP_THREAD + abi.THREAD.size + 8 * max_captures <= abi.SCRATCH, "too many captures for TMP_THREAD"
    n_groups = len(program.anchor_groups)
    max_domain = k["max_domain"]
    a = program.anchors.max_lexemes
    sha_msg = SCRATCH + max_domain + 1 + a * 65 + 16
    scratch_end = sha_msg + max_domain + 1 + a * 65 + 80
    tables = -(-scratch_end // TABLES_ALIGN) * TABLES_ALIGN
    heap_base = -(-(tables + len(packed.blob)) // 16) * 16
    consts = {
        "HEATC_VERSION": __version__,
        "PROGRAM_NAME": program.name,
        "N_RULES": len(program.rules),
        "W": (len(program.rules) + 63) // 64,
        "STATE_SIZE": state_size,
        "EV_SIZE": abi.EVENT.size + 8 * max_captures,
        "SNAP_SIZE": abi.SNAPSHOT.size + -(-len(program.rules) // 8) * 8,
        "PLM": max(1, k["max_final"] + n_groups),
        "SHA_MSG": sha_msg,
        "MAX_DOMAIN": max_domain,
        "TABLES": tables,
        "HEAP_BASE": heap_base,
        "INITIAL_PAGES": max(1, -(-heap_base // PAGE)),
        "N_CLASSES": program.lexer.n_classes,
        "DFA_WIDTH": k["dfa_width"],
        "WORD_ROW": k["word_row"],
        "SKIP_LOG2": k["skip_log2"],
        "BULK_AGING": int(bool(program.rules) and not a),
        "LATE": k["late"],
        "SKIP_CJK": k["skip_cjk"],
        "SKIP_PLAIN_QUIET": abi.SKIP_PLAIN_QUIET,
        "SKIP_NIBBLE_BITS": abi.SKIP_NIBBLE_BITS,
        "SKIP_WORD_FINGERPRINTS": abi.SKIP_WORD_FINGERPRINTS,
        "SKIP_CJK_FINGERPRINTS": abi.SKIP_CJK_FINGERPRINTS,
        "SKIP_CJK_TABLE": abi.SKIP_CJK_TABLE,
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
        "DIGIT_YEARS": k["digit_years"],
        "CJK_CONTINUATIONS": abi.CJK_CONTINUATIONS,
        "CJK_KEY_MUL": abi.CJK_KEY_MUL - (1 << 32) if abi.CJK_KEY_MUL >= 1 << 31 else abi.CJK_KEY_MUL,
        "SKIP_KEY_MUL": abi.SKIP_KEY_MUL - (1 << 64) if abi.SKIP_KEY_MUL >= 1 << 63 else abi.SKIP_KEY_MUL,
        "MAX_LEXEME": program.lexer.max_lexeme,
        "N_CN": k["n_cn"],
        "ANCHORS": bool(a),
        "A": a,
        "ANCHOR_SIZE": program.anchors.size,
        "FILTER_BITS": program.anchors.filter_bits,
        "N_DOMAINS": k["n_domains"],
        "RING_ENTRY": ring_entry,
        "WINDOW": program.window,
    }
    for name, offset in packed.offsets.items():
        consts[f"T_{name}"] = tables + offset
    if k["skip_log2"]:
        for part, offset in word_table_layout(k["skip_log2"]).items():
            consts[f"T_skip_{part}"] = consts["T_skip_words"] + offset
    return consts, fields


def _consistency(program: ir.Program, rule: ir.Rule, use: ir.ChannelUse) -> dict:
    """A `consistent` or `lock` statement as the conflicts layer reads it: the capture, and the
    channel it names — or, with `per`, the key capture and the channel of each key class."""
    out: dict = {"capture": rule.captures[use.capture].name}
    if use.key < 0:
        out["channel"] = program.channels[use.channel].name
    else:
        out["key"] = rule.captures[use.key].name
        out["per"] = [[program.classes[c].name, program.channels[use.channel + i].name]
                      for i, c in enumerate(use.key_classes)]  # fmt: skip
    return out


def manifest(program: ir.Program, wasm: bytes, consts: dict) -> dict:
    """What a runtime needs besides the module: names to decode events, sizes, checksums."""
    bands = program.band_slots()
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
            "control": abi.CONTROL,
            "heap_base": consts["HEAP_BASE"],
            "lexeme_events": consts["PLM"],
            "max_lexeme": program.lexer.max_lexeme,
            "window": program.window,
            "flags_offset": ir.state_layout(program).field("flags").offset,
            # the u64 count of rejections so far: what a lookahead compares (guard mode)
            "rejections_offset": ir.state_layout(program).field("rejections").offset,
        },
        "rules": [
            {
                "name": r.name,
                "description": r.description,
                "heat": r.heat,
                "freq": r.freq,
                "captures": [{"name": c.name, "kind": c.kind} for c in r.captures],
                "requirements": [q.text for q in r.requirements],
                # (a band, `within factor`, states a magnitude, not a term: no conflict across chunks)
                "consistency": [_consistency(program, r, use) for use in r.channels if not use.factor],
                # (a policy gives an observe-only rule no weight: audit.ModuleInfo; the kernel
                # reads it from the rule record)
                **({"observe": True} if r.observe else {}),
            }
            for r in program.rules
        ],
        "classes": [c.name for c in program.classes],
        "channels": [
            {"name": c.name, "kind": c.kind, **({"band": True} if i in bands else {})}
            for i, c in enumerate(program.channels)
        ],
        "anchor_groups": [g.name for g in program.anchor_groups],
        **({"policy": {"pass": program.policy[0], "confirm": program.policy[1]}} if program.policy else {}),
    }
