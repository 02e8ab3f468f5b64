"""Modules that are not heatc's but export what a heatc module exports: for the runtime's
refusals, limits and guards against modules that never return or never make progress.

Public surface: `hostile_module(directory, pages=1, scan=LOOP)`, `LOOP`, `STALL`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import wasmtime

from heatc_runtime.abi import ABI_MAJOR

LOOP = "(loop $forever (br $forever)) (i32.const 0)"  # a scan that never returns
STALL = "(i32.const 0)"  # a scan that returns at once, having consumed nothing

_WAT = """
(module
  (memory (export "memory") {pages})
  (global (export "abi_major") i32 (i32.const {major})) (global (export "abi_minor") i32 (i32.const 0))
  (global (export "state_size") i32 (i32.const 64)) (global (export "event_size") i32 (i32.const 72))
  (global (export "snapshot_size") i32 (i32.const 56)) (global (export "n_rules") i32 (i32.const 0))
  (global (export "control") i32 (i32.const 256)) (global (export "heap_base") i32 (i32.const 4096))
  (global (export "lexeme_events") i32 (i32.const 1))
  (func (export "scan") (param i32 i32 i32 i32) (result i32) {scan})
  (func (export "reset") (param i32)) (func (export "fork") (param i32 i32))
  (func (export "feed") (param i32 i32 i32 i32 i32) (result i32) (i32.const 0))
  (func (export "finish") (param i32 i32) (result i32) (i32.const 0))
  (func (export "snapshot") (param i32 i32) (result i32) (i32.const 0))
  (func (export "step_batch") (param i32 i32 i32 i32) (result i32) (i32.const 0))
  (func (export "reset_batch") (param i32 i32))
  (func (export "snapshot_batch") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "finish_batch") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "verdicts") (param i32 i32)))
"""


def hostile_module(directory: Path, pages: int = 1, scan: str = LOOP) -> Path:
    """`directory` with module.wasm and a manifest that matches it."""
    wasm = wasmtime.wat2wasm(_WAT.format(pages=pages, scan=scan, major=ABI_MAJOR))
    (directory / "module.wasm").write_bytes(wasm)
    manifest = {
        "format": "heatc-module", "abi": {"major": ABI_MAJOR, "minor": 0},
        "wasm": {"file": "module.wasm", "sha256": hashlib.sha256(wasm).hexdigest()},
        "layout": {"state_size": 64, "event_size": 72, "snapshot_size": 56, "flags_offset": 0},
        "rules": [], "classes": [], "channels": [], "anchor_groups": [],
    }  # fmt: skip
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory
