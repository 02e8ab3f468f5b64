"""Reading and writing the binary token table of a build directory, tokens.bin (format:
docs/heatmap.md).

Public surface: `TOKENS_MAGIC`, `TOKENS_VERSION`, `read_token_table(data)`, `token_table_bytes(tokens)`.
"""

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


def token_table_bytes(tokens: list[bytes]) -> bytes:
    """tokens.bin for a list of token bytes (the layout `read_token_table` reads)."""
    offsets = [0]
    for t in tokens:
        offsets.append(offsets[-1] + len(t))
    return TOKENS_MAGIC + struct.pack(f"<II{len(offsets)}I", TOKENS_VERSION, len(tokens), *offsets) + b"".join(tokens)
