"""The torch ops `heatc::step`, `heatc::text`, `heatc::guard` and `heatc::mark` (contract:
docs/cuda.md, "The ops"), each with a CPU kernel (the native core, heatc_runtime._native), a CUDA kernel (the
NVRTC-compiled batch kernels, launched on the current stream) and a fake kernel (shapes
only) for torch.compile and `torch.library.opcheck`.

They are defined with `torch.library.Library` (define, impl per device, register_fake) rather
than the `custom_op` decorator: the same schemas and checks, but the decorator's Python
layers (autograd wrapper, defaults, in-place view handling) cost about 60 µs of CPU time a
call here, the plain registration about 7 (docs/cuda.md). `program` is an int64 tensor on the
CPU (a list of ints costs a conversion per dispatch layer).

    heatc::step(Tensor[] tables, Tensor program, Tensor tok_offsets, Tensor tok_bytes,
                Tensor(a!) states, Tensor ids, Tensor? lengths, Tensor(b!) out,
                int ev_keep, int snap_keep, int lanes, Tensor(c!)? tails=None) -> ()
    heatc::text(Tensor[] tables, Tensor program, Tensor(a!) states, Tensor text,
                Tensor offsets, Tensor(b!) out, int ev_keep, int snap_keep, int kind,
                int lanes) -> ()
    heatc::guard(Tensor[] tables, Tensor program, Tensor tok_offsets, Tensor tok_bytes,
                 Tensor states, Tensor? tails, Tensor candidates, Tensor(a!) scratch,
                 Tensor(b!) mask, int look, int lanes) -> ()

    heatc::mark(Tensor[] tables, Tensor program, Tensor tok_offsets, Tensor tok_bytes,
                Tensor states, Tensor(a!) tails, Tensor ids, Tensor guarded, Tensor lengths,
                Tensor(b!) ck_step, Tensor(c!) ck_token, Tensor(d!) ck_tail, Tensor(e!) ck_state) -> ()

`tails` ([n, TAIL] uint8, heatc_runtime.abi.TAIL): each sequence's last bytes, which
`step` keeps current when given them and `guard` reads for its decision (`look` 2; 0 and 1 are
the raw looks: each candidate fed, and ended there). `mark`, before a step, advances the tails
past the step's ids and keeps guard's value checkpoints (the engine driver's; heatc_kernels.h
mark_row): give it tails, then step without them.

`tables` and `program` come from a loaded program (heatc_runtime.cuda.load): its tier pieces
and `TierSplit.program_ints()` plus the L2 window (bytes, hit ratio in millionths) as a
tensor. Every
shape, dtype and device is checked on the host before a launch (ValueError with the
argument and what was expected); what depends on the data (a token id out of range, a
finished stream) is reported in the output rows, so that nothing synchronises.

Public surface: `N_PROGRAM`, `SCHEMAS`, `LOOK_FED`, `LOOK_ENDED`, `LOOK_DECIDE`, `register_tables(tables, program, pieces)`,
`check_step`, `check_text`, `check_guard`, `check_mark`; the ops as `torch.ops.heatc.*` (importing this
module registers them).
"""

from __future__ import annotations

import hashlib
import threading

import torch
from torch._subclasses.fake_tensor import FakeTensor

from ..abi import TAIL
from ..backends.hct import PARAMS
from . import layout

#: guard's `look`: each candidate fed; fed and the text ended there; guard's whole decision
LOOK_FED, LOOK_ENDED, LOOK_DECIDE = 0, 1, 2

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


def program_ints(program) -> list[int] | None:
    """The `program` tensor's values."""
    if isinstance(program, list):
        return program
    if not isinstance(program, torch.Tensor) or program.dtype != torch.int64 or program.shape != (N_PROGRAM,):
        _fail(f"program must be an int64 tensor of {N_PROGRAM} values (OpProgram.program)")
    if isinstance(program, FakeTensor) or program.device.type == "meta":
        return None  # (no values under a fake kernel: only shapes are checked)
    if program.device.type != "cpu":
        _fail(f"program must be on the CPU (the host reads it), got {program.device}")
    return program.tolist()


def _program(tables, program, device) -> tuple:
    if program is not None and len(program) != N_PROGRAM:
        _fail(f"program has {len(program)} values, expected {N_PROGRAM} (heatc_runtime.cuda.ops.N_PROGRAM)")
    if len(tables) != 3:
        _fail(f"tables must be the 3 tier pieces, got {len(tables)}")
    for i, t in enumerate(tables):
        # (the host tier of a CUDA program is pinned host memory, read by the device)
        _tensor(t, f"tables[{i}]", torch.uint8, (1,), device if (i < 2 or device.type == "cpu") else None)
    if program is None:
        return None, None, None
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


def _rows(name: str, t, n: int, width: int | None, device) -> None:
    _tensor(t, name, torch.uint8, (2,), device)
    if t.shape[0] != n or (width is not None and t.shape[1] != width):
        _fail(f"{name} must have shape ({n}, {width}), got {tuple(t.shape)}")


def _states(states, state_size: int | None) -> int:
    _tensor(states, "states", torch.uint8, (2,), None)
    if state_size is not None and states.shape[1] != state_size:
        _fail(f"states must have {state_size} bytes per sequence (the module's state record), got {states.shape[1]}")
    return states.shape[0]


def _tails(tails, n: int, device) -> None:
    if tails is not None:
        _tensor(tails, "tails", torch.uint8, (2,), device)
        if tuple(tails.shape) != (n, TAIL):
            _fail(f"tails must have shape ({n}, {TAIL}), got {tuple(tails.shape)}")


def check_step(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes,
               tails=None):  # fmt: skip
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
    _rows("out", out, n, es and layout.row_bytes(es, ps, ev_keep, snap_keep), states.device)
    _tails(tails, n, states.device)
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
    _rows("out", out, n, es and layout.row_bytes(es, ps, ev_keep, snap_keep), states.device)
    return n


def check_guard(tables, program, tok_offsets, tok_bytes, states, tails, candidates, scratch, mask, look, lanes):
    ss, es, _ = _program(tables, program, states.device)
    n = _states(states, ss)
    _keeps(0, 0, lanes)
    if look not in (LOOK_FED, LOOK_ENDED, LOOK_DECIDE):
        _fail(f"look must be {LOOK_FED} (fed), {LOOK_ENDED} (ended) or {LOOK_DECIDE} (guard's decision), got {look}")
    _tokens(tok_offsets, tok_bytes, states.device)
    _tails(tails, n, states.device)
    _tensor(candidates, "candidates", torch.int64, (2,), states.device)
    if candidates.shape[0] != n:
        _fail(f"candidates must have one row per sequence ({n}), got shape {tuple(candidates.shape)}")
    k = candidates.shape[1]
    _rows("scratch", scratch, n * k, ss and ss + es, states.device)
    _tensor(mask, "mask", torch.uint8, (2,), states.device)
    if tuple(mask.shape) != (n, k):
        _fail(f"mask must have shape ({n}, {k}), got {tuple(mask.shape)}")
    return n, k


def check_mark(tables, program, tok_offsets, tok_bytes, states, tails, ids, guarded, lengths, ck_step, ck_token,
               ck_tail, ck_state):  # fmt: skip
    ss, _, _ = _program(tables, program, states.device)
    n = _states(states, ss)
    _tokens(tok_offsets, tok_bytes, states.device)
    _tails(tails, n, states.device)
    for name, t, dtype in (("ids", ids, torch.int64), ("lengths", lengths, torch.int64),
                           ("ck_step", ck_step, torch.int64), ("ck_token", ck_token, torch.int64),
                           ("guarded", guarded, torch.uint8)):  # fmt: skip
        _tensor(t, name, dtype, (1,), states.device)
        if t.shape[0] != n:
            _fail(f"{name} must have {n} values, got {t.shape[0]}")
    _tails(ck_tail, n, states.device)
    _rows("ck_state", ck_state, n, ss, states.device)
    return n


# ---- the structs both real kernels take ----------------------------------------------------


_STRUCTS: dict[tuple, bytes] = {}


def _structs(tables, program, tok_offsets=None, tok_bytes=None) -> tuple[bytes, ...]:
    key = _key(tables, program)
    prog = _STRUCTS.get(key)
    if prog is None:
        _trusted(tables, program)
        p = len(PARAMS)
        params, starts, ends = program[:p], program[p : p + 3], program[p + 3 : p + 5]
        ptrs = [t.data_ptr() for t in tables]
        bases = tuple(a - s for a, s in zip(ptrs, starts, strict=True))
        prog = layout.program_struct(ptrs[0], params, bases, ends)
        if len(_STRUCTS) > 256:
            _STRUCTS.clear()
        _STRUCTS[key] = prog
    if tok_offsets is None:
        return (prog,)
    tk = layout.tokens_struct(tok_offsets.data_ptr(), tok_bytes.data_ptr(), tok_offsets.numel() - 1, tok_bytes.numel())
    return prog, tk


def _ptr(t) -> int:
    return 0 if t is None or t.numel() == 0 else t.data_ptr()


_NATIVE = []


def _native():
    if not _NATIVE:
        from ..backends.extension import native_extension

        _NATIVE.append(native_extension())
    return _NATIVE[0]


def _cuda(states, tables, program):
    from .driver import kernels_for

    window = None
    bytes_, ppm = program[-2], program[-1]
    if bytes_ and ppm:
        window = (tables[0].data_ptr(), bytes_, ppm / 1e6)
    return kernels_for(states.device.index or 0), torch.cuda.current_stream(states.device).cuda_stream, window


# ---- the ops ------------------------------------------------------------------------------

SCHEMAS = {
    "step": "step(Tensor[] tables, Tensor program, Tensor tok_offsets, Tensor tok_bytes, Tensor(a!) states, "
    "Tensor ids, Tensor? lengths, Tensor(b!) out, int ev_keep, int snap_keep, int lanes, Tensor(c!)? tails=None) -> ()",
    "text": "text(Tensor[] tables, Tensor program, Tensor(a!) states, Tensor text, Tensor offsets, Tensor(b!) out, "
    "int ev_keep, int snap_keep, int kind, int lanes) -> ()",
    "guard": "guard(Tensor[] tables, Tensor program, Tensor tok_offsets, Tensor tok_bytes, Tensor states, "
    "Tensor? tails, Tensor candidates, Tensor(a!) scratch, Tensor(b!) mask, int look, int lanes) -> ()",
    "mark": "mark(Tensor[] tables, Tensor program, Tensor tok_offsets, Tensor tok_bytes, Tensor states, "
    "Tensor(a!) tails, Tensor ids, Tensor guarded, Tensor lengths, Tensor(b!) ck_step, Tensor(c!) ck_token, "
    "Tensor(d!) ck_tail, Tensor(e!) ck_state) -> ()",
}


def _step_cpu(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes,
              tails=None):  # fmt: skip
    """Each sequence takes its token ids (ids[i], or its first lengths[i]); one output row each."""
    program = program_ints(program)
    n, t = check_step(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes,
                      tails)  # fmt: skip
    prog, tk = _structs(tables, program, tok_offsets, tok_bytes)
    _native().op_step(prog, tk, _ptr(states), _ptr(ids), _ptr(lengths), n, t, _ptr(out), ev_keep, snap_keep,
                      _ptr(tails))  # fmt: skip


def _step_cuda(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes,
               tails=None):  # fmt: skip
    program = program_ints(program)
    n, t = check_step(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes,
                      tails)  # fmt: skip
    kernels, stream, window = _cuda(states, tables, program)
    kernels.launch("heatc_step", n * lanes, stream, _structs(tables, program, tok_offsets, tok_bytes),
                   (_ptr(states), _ptr(ids), _ptr(lengths), n, t, _ptr(out), ev_keep, snap_keep, lanes, _ptr(tails)),
                   window)  # fmt: skip


def _step_fake(tables, program, tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep, lanes,
               tails=None):  # fmt: skip
    check_step(tables, program_ints(program), tok_offsets, tok_bytes, states, ids, lengths, out, ev_keep, snap_keep,
               lanes, tails)  # fmt: skip


def _text_cpu(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes):
    """Sequence i takes text[offsets[i]:offsets[i + 1]]: fed as one token (kind 0) or scanned as a document (1)."""
    program = program_ints(program)
    n = check_text(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes)
    (prog,) = _structs(tables, program)
    _native().op_text(prog, _ptr(states), _ptr(text), text.numel(), _ptr(offsets), n, _ptr(out), ev_keep, snap_keep,
                      kind)  # fmt: skip


def _text_cuda(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes):
    program = program_ints(program)
    n = check_text(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes)
    kernels, stream, window = _cuda(states, tables, program)
    kernels.launch("heatc_text", n * lanes, stream, _structs(tables, program),
                   (_ptr(states), _ptr(text), text.numel(), _ptr(offsets), n, _ptr(out), ev_keep, snap_keep, kind, lanes),
                   window)  # fmt: skip


def _text_fake(tables, program, states, text, offsets, out, ev_keep, snap_keep, kind, lanes):
    check_text(tables, program_ints(program), states, text, offsets, out, ev_keep, snap_keep, kind, lanes)


def _guard_cpu(tables, program, tok_offsets, tok_bytes, states, tails, candidates, scratch, mask, look, lanes):
    """mask[i, j]: what candidates[i, j] would do to sequence i (abi.MASK_*); states unchanged."""
    program = program_ints(program)
    n, k = check_guard(tables, program, tok_offsets, tok_bytes, states, tails, candidates, scratch, mask, look, lanes)
    prog, tk = _structs(tables, program, tok_offsets, tok_bytes)
    _native().op_guard(prog, tk, _ptr(states), _ptr(tails), _ptr(candidates), n, k, _ptr(scratch), _ptr(mask), look)


def _guard_cuda(tables, program, tok_offsets, tok_bytes, states, tails, candidates, scratch, mask, look, lanes):
    program = program_ints(program)
    n, k = check_guard(tables, program, tok_offsets, tok_bytes, states, tails, candidates, scratch, mask, look, lanes)
    kernels, stream, window = _cuda(states, tables, program)
    kernels.launch("heatc_guard", n * lanes, stream, _structs(tables, program, tok_offsets, tok_bytes),
                   (_ptr(states), _ptr(tails), _ptr(candidates), n, k, _ptr(scratch), _ptr(mask), look, lanes),
                   window)  # fmt: skip


def _guard_fake(tables, program, tok_offsets, tok_bytes, states, tails, candidates, scratch, mask, look, lanes):
    check_guard(tables, program_ints(program), tok_offsets, tok_bytes, states, tails, candidates, scratch, mask, look,
                lanes)  # fmt: skip


def _mark_cpu(tables, program, tok_offsets, tok_bytes, states, tails, ids, guarded, lengths, ck_step, ck_token, ck_tail,
              ck_state):  # fmt: skip
    """Each row's tail past ids[i] and its value checkpoint (heatc_kernels.h mark_row)."""
    program = program_ints(program)
    n = check_mark(tables, program, tok_offsets, tok_bytes, states, tails, ids, guarded, lengths, ck_step, ck_token,
                   ck_tail, ck_state)  # fmt: skip
    prog, tk = _structs(tables, program, tok_offsets, tok_bytes)
    _native().op_mark(prog, tk, _ptr(states), _ptr(tails), _ptr(ids), _ptr(guarded), _ptr(lengths), _ptr(ck_step),
                      _ptr(ck_token), _ptr(ck_tail), _ptr(ck_state), n)  # fmt: skip


def _mark_cuda(tables, program, tok_offsets, tok_bytes, states, tails, ids, guarded, lengths, ck_step, ck_token, ck_tail,
               ck_state):  # fmt: skip
    program = program_ints(program)
    n = check_mark(tables, program, tok_offsets, tok_bytes, states, tails, ids, guarded, lengths, ck_step, ck_token,
                   ck_tail, ck_state)  # fmt: skip
    kernels, stream, window = _cuda(states, tables, program)
    kernels.launch("heatc_mark", n, stream, _structs(tables, program, tok_offsets, tok_bytes),
                   (_ptr(states), _ptr(tails), _ptr(ids), _ptr(guarded), _ptr(lengths), _ptr(ck_step), _ptr(ck_token),
                    _ptr(ck_tail), _ptr(ck_state), n), window)  # fmt: skip


def _mark_fake(tables, program, tok_offsets, tok_bytes, states, tails, ids, guarded, lengths, ck_step, ck_token,
               ck_tail, ck_state):  # fmt: skip
    check_mark(tables, program_ints(program), tok_offsets, tok_bytes, states, tails, ids, guarded, lengths, ck_step,
               ck_token, ck_tail, ck_state)  # fmt: skip


_LIB = torch.library.Library("heatc", "DEF")
for _name, _schema in SCHEMAS.items():
    _LIB.define(_schema)
    _LIB.impl(_name, globals()[f"_{_name}_cpu"], "CPU")
    _LIB.impl(_name, globals()[f"_{_name}_cuda"], "CUDA")
    torch.library.register_fake(f"heatc::{_name}", globals()[f"_{_name}_fake"], lib=_LIB)
