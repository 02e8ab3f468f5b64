"""Reading and writing the binary token table of a build directory, tokens.bin (format:
docs/heatmap.md).

Public surface: `TOKENS_MAGIC`, `TOKENS_VERSION`, `read_token_table(data)`, `check_token_table(data)`,
`token_table_bytes(tokens)`.
"""

from __future__ import annotations

import struct

import numpy as np

TOKENS_MAGIC = b"HEATCTOK"
TOKENS_VERSION = 1
_HEAD = struct.Struct("<8sII")


def read_token_table(data: bytes) -> list[bytes]:
    """tokens.bin: MAGIC, u32 version, u32 count, u32 offsets[count + 1], the token bytes.
    Raises ValueError, saying what is wrong, for anything else."""
    base, offsets = _checked(data)
    blob = data[base:]
    bounds = offsets.tolist()
    return [blob[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]


def check_token_table(data: bytes) -> int:
    """The number of tokens in tokens.bin's bytes, checked as `read_token_table` checks them
    (ValueError) without making the list: a load checks the table, a batch reads it."""
    return len(_checked(data)[1]) - 1


def _checked(data: bytes) -> tuple[int, np.ndarray]:
    """(where the token bytes begin, the offsets) of a well-formed table, or ValueError."""
    if len(data) < _HEAD.size:
        raise ValueError(f"the token table is truncated ({len(data)} bytes, less than its {_HEAD.size}-byte header)")
    magic, version, count = _HEAD.unpack_from(data)
    if magic != TOKENS_MAGIC:
        raise ValueError("not a heatc token table (bad magic)")
    if version != TOKENS_VERSION:
        raise ValueError(f"token table version {version} is not supported (this runtime reads {TOKENS_VERSION})")
    base = _HEAD.size + 4 * (count + 1)
    if len(data) < base:
        raise ValueError(f"the token table is truncated: {count:,} tokens need {base:,} bytes of offsets")
    offsets = np.frombuffer(data, "<u4", count + 1, _HEAD.size).astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != len(data) - base or (count and (np.diff(offsets) < 0).any()):
        raise ValueError("the token table's offsets do not match its size")
    return base, offsets


def token_table_bytes(tokens: list[bytes]) -> bytes:
    """tokens.bin for a list of token bytes (the layout `read_token_table` reads)."""
    offsets = [0]
    for t in tokens:
        offsets.append(offsets[-1] + len(t))
    return TOKENS_MAGIC + struct.pack(f"<II{len(offsets)}I", TOKENS_VERSION, len(tokens), *offsets) + b"".join(tokens)
