"""The module ABI as data: versions, the control block, record layouts (docs/abi.md).

Public surface: the constants below and `check_abi(where, major, minor)`.

Every reader of a module — this runtime, the compiler that writes modules, the kernel
template, the Node.js host — takes these constants from here.
"""

from __future__ import annotations

import struct

from .errors import ModuleError

#: The ABI this runtime speaks: same major, minor up to this one.
ABI_MAJOR = 1
ABI_MINOR = 1

#: The control block's u32 words, in order (at the module's exported `control` offset).
CONTROL_FIELDS = ("ev_ptr", "ev_cap", "ev_count", "snap_ptr", "snap_cap", "snap_count",
                  "tok_offsets", "n_tokens", "tok_bytes", "status", "bad_index", "scratch", "quiet")  # fmt: skip
EV_COUNT = CONTROL_FIELDS.index("ev_count")
SNAP_COUNT = CONTROL_FIELDS.index("snap_count")
STATUS = CONTROL_FIELDS.index("status")
QUIET = CONTROL_FIELDS.index("quiet")

#: A kernel-only lexeme-code flag beside the IR's (ir.FLAG_*): the code may begin a
#: late-starting rule, so a kernel keeps such a lexeme as its look-behind (ir.starts_late).
FLAG_LOOK = 32

#: What a non-zero `status` word means.
STATUS_TEXT = {1: "a token id is out of range for the token table", 2: "the stream is finished; reset it first"}

#: A snapshot record's head: seq, events, final, pad, then the counters; the verdicts follow.
SNAP_HEAD = struct.Struct("<4I5Q")


def check_abi(where: str, major: int, minor: int) -> None:
    if major != ABI_MAJOR or minor > ABI_MINOR:
        raise ModuleError(
            f"{where}: module ABI {major}.{minor} is not supported by this runtime "
            f"(it runs ABI {ABI_MAJOR}.0 to {ABI_MAJOR}.{ABI_MINOR}); rebuild the module with a matching heatc"
        )
