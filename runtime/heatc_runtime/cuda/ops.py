"""The torch ops `heatc::step`, `heatc::text` and `heatc::guard` (contract: docs/cuda.md, "The
ops"), each with a CPU kernel (the native core, heatc_runtime._native), a CUDA kernel (the
NVRTC-compiled batch kernels, launched on the current stream) and a fake kernel (shapes
only) for torch.compile and `torch.library.opcheck`.

    heatc::step(Tensor[] tables, int[] program, Tensor tok_offsets, Tensor tok_bytes,
                Tensor(a!) states, Tensor ids, Tensor? lengths, Tensor(b!) out,
                int ev_keep, int snap_keep, int lanes) -> ()
    heatc::text(Tensor[] tables, int[] program, Tensor(a!) states, Tensor text,
                Tensor offsets, Tensor(b!) out, int ev_keep, int snap_keep, int kind,
                int lanes) -> ()
    heatc::guard(Tensor[] tables, int[] program, Tensor tok_offsets, Tensor tok_bytes,
                 Tensor states, Tensor candidates, Tensor(a!) scratch, Tensor(b!) mask,
                 bool flush, int lanes) -> ()

`tables` and `program` come from a loaded program (heatc_runtime.cuda.load): its tier pieces
and `TierSplit.program_ints()` plus the L2 window (bytes, hit ratio in millionths). Every
shape, dtype and device is checked on the host before a launch (ValueError with the
argument and what was expected); what depends on the data (a token id out of range, a
finished stream) is reported in the output rows, so that nothing synchronises.

Public surface: `N_PROGRAM`, `register_tables(tables, program)`, the ops (importing this
module registers them; then also `torch.ops.heatc.*`).
"""

from __future__ import annotations

import hashlib
import threading

import torch

from ..hct import PARAMS
from . import layout

#: The `program` argument: rules.hct's parameters (tier 0's offsets), the three pieces'
#: starts, the two tier ends, the L2 window's bytes and hit ratio (millionths; 0: none).
N_PROGRAM = len(PARAMS) + 7
_STATE, _EVENT, _SNAP = (PARAMS.index(n) for n in ("state_size", "event_size", "snapshot_size"))
_LANES = (1, 2, 4, 8, 16, 32)

_TRUSTED: set[bytes] = set()  # digests of the tables and programs loaded by heatc_runtime.cuda
_SEEN: dict[tuple, bool] = {}  # (pointers, sizes, versions, program) found among them
_LOCK = threading.Lock()


def _digest(pieces: list[bytes], program: list[int]) -> bytes:
    h = hashlib.sha256(repr(list(program)).encode())
    for p in pieces:
        h.update(len(p).to_bytes(8, "little") + p)
    return h.digest()


def register_tables(tables: list[torch.Tensor], program: list[int], pieces: list[bytes]) -> None:
    """Trust these tables (checked by the loader: heatc_runtime.cuda.program)."""
    with _LOCK:
        _TRUSTED.add(_digest(pieces, program))
        _SEEN[_key(tables, program)] = True


def _key(tables, program) -> tuple:
    return (tuple((t.data_ptr(), t.numel(), t._version) for t in tables), tuple(program))


def _trusted(tables: list[torch.Tensor], program: list[int]) -> None:
    key = _key(tables, program)
    if key in _SEEN:
        return
    # tables not seen at these addresses (a copy, or changed): compare their bytes with the
    # tables loaded (one copy to the host; never inside a CUDA graph capture)
    pieces = [t.detach().cpu().numpy().tobytes() for t in tables]
    if _digest(pieces, program) not in _TRUSTED:
        raise ValueError(
            "heatc op: these tables and program were not loaded by heatc_runtime.cuda (or were changed since): "
            "load the build with heatc_runtime.cuda.load(...) and pass its tables and program"
        )
    with _LOCK:
        if len(_SEEN) > 256:
            _SEEN.clear()
        _SEEN[key] = True


def _fail(what: str) -> None:
    raise ValueError(f"heatc op: {what}")


def _tensor(t, name: str, dtype: torch.dtype, dims: tuple[int, ...], device) -> None:
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a tensor")
    if t.dtype != dtype:
        _fail(f"{name} must be {dtype}, got {t.dtype}")
    if t.dim() not in dims:
        _fail(f"{name} must have {' or '.join(map(str, dims))} dimensions, got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        _fail(f"{name} must be contiguous")
    if device is not None and t.device != device:
        _fail(f"{name} is on {t.device}, the states on {device}")


def _program(tables, program, device) -> tuple[int, int, int]:
    if len(program) != N_PROGRAM:
        _fail(f"program has {len(program)} values, expected {N_PROGRAM} (heatc_runtime.cuda.ops.N_PROGRAM)")
    if len(tables) != 3:
        _fail(f"tables must be the 3 tier pieces, got {len(tables)}")
    for i, t in enumerate(tables):
        # (the host tier of a CUDA program is pinned host memory, read by the device)
        _tensor(t, f"tables[{i}]", torch.uint8, (1,), device if (i < 2 or device.type == "cpu") else None)
    ss, es, ps = program[_STATE], program[_EVENT], program[_SNAP]
    if ss <= 0 or ss % 8 or es % 8 or ps % 8:
        _fail("program's record sizes are invalid")
    return ss, es, ps


def _keeps(ev_keep: int, snap_keep: int, lanes: int) -> None:
    if not (0 <= ev_keep < 1 << 16 and 0 <= snap_keep < 1 << 16):
        _fail(f"ev_keep and snap_keep must be in 0..65535, got {ev_keep}, {snap_keep}")
    if lanes not in _LANES:
        _fail(f"lanes must be one of {_LANES}, got {lanes}")


def _tokens(tok_offsets, tok_bytes, device) -> None:
    _tensor(tok_offsets, "tok_offsets", torch.int32, (1,), device)
    _tensor(tok_bytes, "tok_bytes", torch.uint8, (1,), device)
    if tok_offsets.numel() < 1:
        _fail("tok_offsets must hold n_tokens + 1 offsets")


def _rows(name: str, t, n: int, width: int, device) -> None:
    _tensor(t, name, torch.uint8, (2,), device)
    if tuple(t.shape) != (n, width):
        _fail(f"{name} must have shape ({n}, {width}), got {tuple(t.shape)}")


def _states(states, state_size: int) -> int:
    _tensor(states, "states", torch.uint8, (2,), None)
    if states.shape[1] != state_size:
        _fail(f"states must have {state_size} bytes per sequence (the module's state record), got {states.shape[1]}")
    return states.shape[0]


def check_step(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes):
    ss, es, ps = _program(tables, program, states.device)
    n = _states(states, ss)
    _keeps(ev_keep, snap_keep, lanes)
    _tokens(tok_offsets, tok_bytes, states.device)
    _tensor(ids, "ids", torch.int64, (1, 2), states.device)
    if ids.shape[0] != n:
        _fail(f"ids must have one row per sequence ({n}), got shape {tuple(ids.shape)}")
    if lengths is not None:
        _tensor(lengths, "lengths", torch.int64, (1,), states.device)
        if lengths.shape[0] != n:
            _fail(f"lengths must have {n} values, got {lengths.shape[0]}")
    _rows("out", out, n, layout.row_bytes(es, ps, ev_keep, snap_keep), states.device)
    return n, 1 if ids.dim() == 1 else ids.shape[1]


def check_text(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes):
    ss, es, ps = _program(tables, program, states.device)
    n = _states(states, ss)
    _keeps(ev_keep, snap_keep, lanes)
    if kind not in (0, 1):
        _fail(f"kind must be 0 (feed) or 1 (scan), got {kind}")
    _tensor(text, "text", torch.uint8, (1,), states.device)
    _tensor(offsets, "offsets", torch.int64, (1,), states.device)
    if offsets.shape[0] != n + 1:
        _fail(f"offsets must have n + 1 = {n + 1} values, got {offsets.shape[0]}")
    _rows("out", out, n, layout.row_bytes(es, ps, ev_keep, snap_keep), states.device)
    return n


def check_guard(tables, program, tok_offsets, tok_bytes, states, candidates, scratch, mask, flush, lanes):
    ss, es, _ = _program(tables, program, states.device)
    n = _states(states, ss)
    _keeps(0, 0, lanes)
    _tokens(tok_offsets, tok_bytes, states.device)
    _tensor(candidates, "candidates", torch.int64, (2,), states.device)
    if candidates.shape[0] != n:
        _fail(f"candidates must have one row per sequence ({n}), got shape {tuple(candidates.shape)}")
    k = candidates.shape[1]
    _rows("scratch", scratch, n * k, ss + es, states.device)
    _tensor(mask, "mask", torch.uint8, (2,), states.device)
    if tuple(mask.shape) != (n, k):
        _fail(f"mask must have shape ({n}, {k}), got {tuple(mask.shape)}")
    return n, k


# ---- the structs both real kernels take ----------------------------------------------------


def _structs(tables, program, tok_offsets=None, tok_bytes=None) -> tuple[bytes, ...]:
    _trusted(tables, program)
    p = len(PARAMS)
    params, starts, ends = program[:p], program[p : p + 3], program[p + 3 : p + 5]
    ptrs = [t.data_ptr() for t in tables]
    out = [layout.program_struct(ptrs[0], params, tuple(a - s for a, s in zip(ptrs, starts, strict=True)), ends)]
    if tok_offsets is not None:
        out.append(layout.tokens_struct(tok_offsets.data_ptr(), tok_bytes.data_ptr(), tok_offsets.numel() - 1,
                                        tok_bytes.numel()))  # fmt: skip
    return tuple(out)


def _ptr(t) -> int:
    return 0 if t is None or t.numel() == 0 else t.data_ptr()


def _native():
    from ..native import native_extension

    return native_extension()


def _cuda(states, tables, program):
    from .driver import kernels_for

    window = None
    bytes_, ppm = program[-2], program[-1]
    if bytes_ and ppm:
        window = (tables[0].data_ptr(), bytes_, ppm / 1e6)
    return kernels_for(states.device.index or 0), torch.cuda.current_stream(states.device).cuda_stream, window


# ---- heatc::step --------------------------------------------------------------------------


@torch.library.custom_op("heatc::step", mutates_args=("states", "out"), device_types="cpu")
def step(
    tables: list[torch.Tensor], program: list[int], tok_offsets: torch.Tensor, tok_bytes: torch.Tensor,
    states: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor | None, out: torch.Tensor,
    ev_keep: int, snap_keep: int, lanes: int,
) -> None:  # fmt: skip
    """Each sequence takes its token ids (ids[i], or its first lengths[i]); one output row each."""
    n, t = check_step(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes)
    prog, tk = _structs(tables, program, tok_offsets, tok_bytes)
    _native().op_step(prog, tk, _ptr(states), _ptr(ids), _ptr(lengths), n, t, _ptr(out), ev_keep, snap_keep)


@step.register_kernel("cuda")
def _step_cuda(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes):
    n, t = check_step(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes)
    kernels, stream, window = _cuda(states, tables, program)
    kernels.launch("heatc_step", n * lanes, stream, _structs(tables, program, tok_offsets, tok_bytes),
                   (_ptr(states), _ptr(ids), _ptr(lengths), n, t, _ptr(out), ev_keep, snap_keep, lanes), window)  # fmt: skip


@step.register_fake
def _step_fake(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes):
    check_step(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes)


# ---- heatc::text --------------------------------------------------------------------------


@torch.library.custom_op("heatc::text", mutates_args=("states", "out"), device_types="cpu")
def text(
    tables: list[torch.Tensor], program: list[int], states: torch.Tensor, text: torch.Tensor, offsets: torch.Tensor,
    out: torch.Tensor, ev_keep: int, snap_keep: int, kind: int, lanes: int,
) -> None:  # fmt: skip
    """Sequence i takes text[offsets[i]:offsets[i + 1]]: fed as one token (kind 0) or scanned as a document (1)."""
    n = check_text(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes)
    (prog,) = _structs(tables, program)
    _native().op_text(prog, _ptr(states), _ptr(text), _ptr(offsets), n, _ptr(out), ev_keep, snap_keep, kind)


@text.register_kernel("cuda")
def _text_cuda(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes):
    n = check_text(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes)
    kernels, stream, window = _cuda(states, tables, program)
    kernels.launch("heatc_text", n * lanes, stream, _structs(tables, program),
                   (_ptr(states), _ptr(text), _ptr(offsets), n, _ptr(out), ev_keep, snap_keep, kind, lanes), window)  # fmt: skip


@text.register_fake
def _text_fake(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes):
    check_text(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes)


# ---- heatc::guard -------------------------------------------------------------------------


@torch.library.custom_op("heatc::guard", mutates_args=("scratch", "mask"), device_types="cpu")
def guard(
    tables: list[torch.Tensor], program: list[int], tok_offsets: torch.Tensor, tok_bytes: torch.Tensor,
    states: torch.Tensor, candidates: torch.Tensor, scratch: torch.Tensor, mask: torch.Tensor, flush: bool, lanes: int,
) -> None:  # fmt: skip
    """mask[i, j]: what candidates[i, j] would do to sequence i (layout.MASK_*); states unchanged."""
    n, k = check_guard(tables, program, tok_offsets, tok_bytes, states, candidates, scratch, mask, flush, lanes)
    prog, tk = _structs(tables, program, tok_offsets, tok_bytes)
    _native().op_guard(prog, tk, _ptr(states), _ptr(candidates), n, k, _ptr(scratch), _ptr(mask), int(flush))


@guard.register_kernel("cuda")
def _guard_cuda(tables, program, tok_offsets, tok_bytes, states, candidates, scratch, mask, flush, lanes):
    n, k = check_guard(tables, program, tok_offsets, tok_bytes, states, candidates, scratch, mask, flush, lanes)
    kernels, stream, window = _cuda(states, tables, program)
    kernels.launch("heatc_guard", n * lanes, stream, _structs(tables, program, tok_offsets, tok_bytes),
                   (_ptr(states), _ptr(candidates), n, k, _ptr(scratch), _ptr(mask), int(flush), lanes), window)  # fmt: skip


@guard.register_fake
def _guard_fake(tables, program, tok_offsets, tok_bytes, states, candidates, scratch, mask, flush, lanes):
    check_guard(tables, program, tok_offsets, tok_bytes, states, candidates, scratch, mask, flush, lanes)
