"""Event records that no heatc module writes — an index past a table, a negative one, a
verdict code out of range — are refused with ModuleError naming the record, by both the
general decoder and the scan's inline fast path, never an IndexError or a silently wrong
name (Python reads index -2 as the second last); a module that ends a scan without its
final snapshot is refused by name too."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.cli import heatc
from support.hostile import hostile_module

import heatc_runtime as rt
from heatc_runtime import abi
from heatc_runtime.errors import ModuleError
from heatc_runtime.reports.records import RecordDecoder

MANIFEST = {
    "rules": [{"name": "r0", "captures": [{"name": "v", "kind": "number"}], "requirements": ["v < 1"]},
              {"name": "r1", "captures": [{"name": "k", "kind": "class"}], "requirements": []}],
    "classes": ["c0"], "channels": [{"name": "ch", "kind": "number"}], "anchor_groups": ["g"],
}  # fmt: skip
SIZE = abi.EVENT.size + 8
DECODER = RecordDecoder(MANIFEST, SIZE, abi.SNAPSHOT.size + 8)


def record(**fields) -> bytes:
    out = bytearray(SIZE)
    base = {"kind": abi.EVENT_MATCH, "verdict": abi.VERDICT_CONFIRMED, "failed": -1, "conflict": -1}
    abi.EVENT.struct.pack_into(out, 0, *({**base, **fields}.get(n, 0) for n in abi.EVENT.names))
    return bytes(out)


def test_a_good_record_decodes_on_both_paths():
    good = record(index=0, start=1, end=2)
    assert [e.name for _, e in DECODER.events(good)] == ["r0"]
    assert [e.name for e in DECODER.scan_events([good])] == ["r0"]


@pytest.mark.parametrize(
    "fields",
    [
        {"index": 2},  # past the last rule
        {"index": 2**32 - 1},
        {"index": 0, "verdict": 9},  # no such verdict
        {"index": 0, "failed": 5},  # past the rule's requirements
        {"index": 0, "failed": -2},
        {"index": 0, "conflict": 3},  # past the channels
        {"index": 1, "kind": abi.EVENT_ANCHOR},  # past the anchor groups
    ],
)
def test_a_record_out_of_the_tables_is_refused_by_name(fields):
    bad = record(**fields)
    for decode in (lambda: DECODER.events(bad), lambda: DECODER.scan_events([record(index=0), bad])):
        with pytest.raises(ModuleError, match="malformed event record"):
            decode()


@given(st.binary(min_size=SIZE, max_size=SIZE))
def test_any_record_decodes_or_is_refused(raw):
    try:
        events = DECODER.scan_events([raw])
    except ModuleError:
        return
    assert all(e.name in ("r0", "r1", "g") for e in events)


def test_a_module_that_ends_a_scan_without_its_snapshot_is_refused_by_name(tmp_path):
    """A scan that finishes the stream and publishes no final snapshot (no heatc module does)
    raised IndexError: it is a ModuleError naming the module's file, in the CLI an error line."""
    finish_silently = f"(i32.store (local.get 0) (i32.const {abi.STATE_FINISHED})) (local.get 3)"
    d = hostile_module(tmp_path, scan=finish_silently).resolve()
    message = "the module ended a scan without its final snapshot"
    with pytest.raises(ModuleError, match=rf"^{re.escape(str(d / 'module.wasm'))}: {message}"):
        rt.load(d).scan("glucose 5000 mg/dL.")
    for args in ((), ("--json",)):
        r = heatc("scan", d, "-", *args, input="glucose 5000 mg/dL.")
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.exception
        assert f"{d}: error: {d / 'module.wasm'}: {message}" in r.output
