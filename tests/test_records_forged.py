"""Event records that no heatc module writes — an index past a table, a negative one, a
verdict code out of range — are refused with ModuleError naming the record, by both the
general decoder and the scan's inline fast path, never an IndexError or a silently wrong
name (Python reads index -2 as the second last)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heatc_runtime import abi
from heatc_runtime.errors import ModuleError
from heatc_runtime.records import RecordDecoder

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
