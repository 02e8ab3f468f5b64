"""Readers for the binary files of a build directory (formats: docs/heatmap.md)."""

from __future__ import annotations

import itertools
import struct

TOKENS_MAGIC = b"HEATCTOK"
TOKENS_VERSION = 1


def read_token_table(data: bytes) -> list[bytes]:
    """tokens.bin: MAGIC, u32 version, u32 count, u32 offsets[count + 1], the token bytes."""
    if data[:8] != TOKENS_MAGIC:
        raise ValueError("not a heatc token table (bad magic)")
    version, count = struct.unpack_from("<II", data, 8)
    if version != TOKENS_VERSION:
        raise ValueError(f"token table version {version} is not supported (this runtime reads {TOKENS_VERSION})")
    base = 16 + 4 * (count + 1)
    if len(data) < base:
        raise ValueError("the token table is truncated")
    offsets = struct.unpack_from(f"<{count + 1}I", data, 16)
    if offsets[-1] != len(data) - base or any(a > b for a, b in itertools.pairwise(offsets)):
        raise ValueError("the token table's offsets do not match its size")
    return [data[base + offsets[i] : base + offsets[i + 1]] for i in range(count)]
