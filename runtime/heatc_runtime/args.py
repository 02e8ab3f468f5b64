"""Checks of what callers pass to a Checker or a Batch, each failing with the argument's
name and what it accepts: texts, sequence indices, batch sizes, token ids.

Public surface: `as_bytes(text, name)`, `index(i, n, name)`, `count(n, name)`, `token_ids(ids, n,
n_tokens)`, `bad_id(value, n_tokens)`, and for metrics `whole_number(value, name, least)`,
`duration(value)`, `module_name(module)`.
"""

from __future__ import annotations

import math

import numpy as np

U32 = np.uint32
U32_DTYPE = np.dtype(np.uint32)
_max = np.maximum.reduce


def as_bytes(text: object, name: str) -> bytes:
    """The UTF-8 bytes of a str, or the bytes of bytes, bytearray or memoryview."""
    if isinstance(text, str):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"{name} is not valid Unicode: {e.reason} at index {e.start} (pass bytes for arbitrary data)"
            ) from None
    if isinstance(text, bytes):
        return text
    if isinstance(text, (bytearray, memoryview)):
        return bytes(text)
    raise TypeError(f"{name} must be str, bytes, bytearray or memoryview, got {type(text).__name__}")


def _integer(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def index(i: object, n: int, name: str) -> int:
    """A sequence index of a batch of `n`: 0 to n - 1 (negative indices are refused)."""
    if not _integer(i):
        raise TypeError(f"{name} must be a sequence index (an int), got {type(i).__name__}")
    if not 0 <= i < n:
        raise IndexError(f"{name}={i} is out of range: the batch has sequences 0 to {n - 1}")
    return int(i)


def count(n: object, name: str) -> int:
    if not _integer(n):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"{name} must be at least 1 (a batch needs at least one sequence), got {n}")
    return int(n)


def token_ids(ids: object, n: int, n_tokens: int) -> np.ndarray:
    """`n` token ids, each from 0 to n_tokens - 1, as a uint32 array (never wrapped or
    truncated: a float, a negative or a too-large id is refused)."""
    if type(ids) is np.ndarray and ids.shape == (n,) and ids.dtype == U32_DTYPE:
        if _max(ids) < n_tokens:  # (the common case: one reduction, all the checking it needs)
            return ids
        arr = ids
    else:
        try:
            arr = np.asarray(ids)
        except (TypeError, ValueError):
            raise TypeError(f"token ids: expected a sequence of {n} integers, got {type(ids).__name__}") from None
        if arr.ndim == 0:
            raise TypeError(f"token ids: expected a sequence of {n} integers, got {type(ids).__name__}")
        if arr.dtype.kind not in "iu":
            raise TypeError(f"token ids must be integers, got {arr.dtype} values")
        if arr.shape != (n,):
            raise ValueError(f"expected {n} token ids, got shape {arr.shape}")
    bad = np.flatnonzero((arr < 0) | (arr >= n_tokens))
    if len(bad):
        raise ValueError(f"token ids[{bad[0]}] = {arr[bad[0]]} is out of range: {_ids(n_tokens)}")
    return arr


def bad_id(value: object, n_tokens: int) -> ValueError | TypeError:
    """The error for one token id that is not an id of the table."""
    if not _integer(value):
        return TypeError(f"a token id must be an integer, got {type(value).__name__} {value!r}")
    return ValueError(f"token id {value} is out of range: {_ids(n_tokens)}")


def _ids(n_tokens: int) -> str:
    return f"the token table has ids 0 to {n_tokens - 1}" if n_tokens else "the token table is empty"


def whole_number(value: object, name: str, least: int = 0) -> int:
    """`value` as an int of at least `least` (a bool or a float is refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a whole number, got {type(value).__name__} {value!r}")
    if value < least:
        raise ValueError(f"{name} must be at least {least}, got {value}")
    return int(value)


def duration(value: object) -> float:
    """`value` as a finite number of seconds, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"seconds must be a number, got {type(value).__name__} {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"seconds must be a finite duration of 0 or more, got {value!r}")
    return float(value)


def module_name(module: object) -> None:
    """Refuse a `module` label that is neither a str nor None."""
    if module is not None and not isinstance(module, str):
        raise TypeError(f"module must be a module's name (a str) or None, got {type(module).__name__}")
