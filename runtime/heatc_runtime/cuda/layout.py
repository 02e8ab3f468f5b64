"""The torch ops' records (docs/cuda.md): the per-sequence output row, the two structs the kernels take by value — `heatc::Program` (the tables' tiers and
rules.hct's parameters) and `heatc::Tokens` (the token table) — and the threads a block of
every launch. Defined here once; the C header (heatc_runtime.abi_export.c_header) and the
kernels' static_asserts take them from here. The guard's mask codes are the ABI's
(heatc_runtime.abi: `MASK_ALLOWED`, …).

Public surface: `OUT`, `OUT_HEAD`, `OUT_FIELDS`, `OUT_OFFSETS`, `OUT_STATUS_NO_ROOM`,
`OUT_STATUS_BAD_TEXT`, `STATUS_TEXT`, `PROGRAM`, `PROGRAM_BASE`, `TOKENS`, `BLOCK`,
`row_bytes(event_size, snapshot_size, ev_keep, snap_keep)`, `program_struct(...)`,
`tokens_struct(...)`.
"""

from __future__ import annotations

import struct

from ..abi import STATUS_TEXT as _ABI_STATUS
from ..backends.hct import PARAMS

#: An output row's head: u32 status, consumed (tokens or bytes taken), events, snapshots
#: (both counted, stored or not), new_rejections (in this call), finished (the stream
#: ended), then u64 rejections (since the stream's start). Then `ev_keep` event records, one
#: scratch record, `snap_keep` snapshot records.
OUT_FIELDS = ("status", "consumed", "events", "snapshots", "new_rejections", "finished", "rejections")
OUT = struct.Struct("<6IQ")
OUT_HEAD = OUT.size
OUT_OFFSETS = {name: 4 * i for i, name in enumerate(OUT_FIELDS[:6])} | {"rejections": 24}
#: A step that could not be given room for its records (never, with the op's rows: they
#: count what they cannot store).
OUT_STATUS_NO_ROOM = 3
#: A text op's offsets for the sequence lie outside the text (nothing was fed).
OUT_STATUS_BAD_TEXT = 4
STATUS_TEXT = {
    **_ABI_STATUS,
    OUT_STATUS_NO_ROOM: "the output buffers lacked room",
    OUT_STATUS_BAD_TEXT: "its text offsets lie outside the text",
}

_PAD = (8 + 4 * len(PARAMS)) % 8  # (4 bytes before base[], when the parameters leave the offset unaligned)
#: heatc::Program: tables pointer, parameters, base[3], tier_end[2] (heatc_core.h)
PROGRAM = struct.Struct(f"<Q{len(PARAMS)}I{_PAD}x3Q2I")
PROGRAM_BASE = 8 + 4 * len(PARAMS) + _PAD
#: heatc::Tokens: offsets (u32[n + 1]), bytes, n, total bytes (heatc_kernels.h)
TOKENS = struct.Struct("<QQII")
#: threads a block of every kernel launch: the driver launches with it, and the step kernel
#: sizes its shared per-group state by it (heatc_step.cu, HEATC_BLOCK)
BLOCK = 128


def row_bytes(event_size: int, snapshot_size: int, ev_keep: int, snap_keep: int) -> int:
    """Bytes of one sequence's output row."""
    return OUT_HEAD + (ev_keep + 1) * event_size + snap_keep * snapshot_size


def program_struct(tables: int, params: list[int], bases: tuple[int, int, int], tier_ends: tuple[int, int]) -> bytes:
    """heatc::Program's bytes: `tables` the address of the blob's tier-0 copy, `bases` each
    tier's address for blob offset 0 (mod 2**64), `tier_ends` the blob offsets where the
    device and host tiers begin (0, 0: one piece)."""
    return PROGRAM.pack(tables, *params, *(b % (1 << 64) for b in bases), *tier_ends)


def tokens_struct(offsets: int, data: int, n: int, total: int) -> bytes:
    return TOKENS.pack(offsets, data, n, total)
