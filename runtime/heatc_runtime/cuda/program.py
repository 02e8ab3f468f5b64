"""A build loaded for the torch ops: `load(build, device)` → `OpProgram`, whose `batch(n)`
steps many sequences with one op call per decoding step (docs/cuda.md).

On a CUDA device the tables are placed by the build's tier plan (heatc_runtime.cuda.tiers):
tier 0 in device memory under an L2-persisting access policy window (the persisting
set-aside raised within `persistingL2CacheMaxSize`, hitRatio = set-aside / window, misses
streaming), tier 1 in ordinary device memory, tier 2 in pinned host memory mapped into the
device. Each placement is verified (the driver's pointer attributes) and `OpProgram.tiers`
says what was applied and why anything was not (no persisting L2 — MIG, MPS, a vGPU —,
pre-Ampere, a refused limit). `close()` releases the persisting lines
(cudaCtxResetPersistingL2Cache) and the pinned memory. On the CPU the same pieces are plain
tensors and the ops run the native core.

Public surface: `load(path, device, l2=True, l2_bytes=None)`, `OpProgram`, `OpBatch`.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..abi import check_abi
from ..backends.hct import PARAMS, Hct, check_against_manifest, read_hct
from ..backends.manifest import read_artifact, read_manifest
from ..backends.tables import read_token_table
from ..errors import ModuleError
from ..reports.records import RecordDecoder
from ..reports.report import Snapshot
from . import layout, ops
from .tiers import TierReport, TierSplit, split_tiers


def load(path: str | Path, device: str | torch.device = "cpu", l2: bool = True, l2_bytes: int | None = None):
    """Load a build directory for the ops on `device`: its manifest, rules.hct and tokens.bin,
    read and verified as `heatc_runtime.load` reads them (the manifest's shape and digest, the
    ABI, each file's type, size and sha256; the other artifacts are not read). `l2=False`
    places tier 0 without the L2 window; `l2_bytes` caps the persisting set-aside."""
    path = Path(path)
    if path.is_dir():
        path = path.resolve()  # (a build's link, followed once: every file comes from one build)
    manifest, directory = read_manifest(path)
    where = str(directory / "rules.hct")
    check_abi(where, manifest["abi"]["major"], manifest["abi"]["minor"])
    hct = read_hct(read_artifact(directory, "rules.hct", manifest), where)
    if hct.abi != (manifest["abi"]["major"], manifest["abi"]["minor"]):
        raise ModuleError(f"{where}: the tables say ABI {hct.abi} but the manifest says {manifest['abi']}")
    try:
        tokens = read_token_table(read_artifact(directory, "tokens.bin", manifest))
    except ValueError as e:
        raise ModuleError(f"{directory / 'tokens.bin'}: {e}") from None
    return OpProgram(manifest, hct, tokens, device, l2, l2_bytes, where)


class OpProgram:
    """One program's tables, token table and parameters as tensors on a device, for the ops."""

    def __init__(self, manifest: dict, hct: Hct, tokens: list[bytes] | None, device="cpu", l2: bool = True,
                 l2_bytes: int | None = None, where: str = "rules.hct"):  # fmt: skip
        self.manifest = manifest
        self.device = torch.device(device)
        check_against_manifest(hct, manifest, where)
        self.state_size, self.event_size = hct.param("state_size"), hct.param("event_size")
        self.snapshot_size = hct.param("snapshot_size")
        if self.state_size % 8 or self.event_size % 8 or self.snapshot_size % 8:
            raise ModuleError(f"{where}: the record sizes are not multiples of 8 (the GPU reads them as u64)")
        self._check_tables(hct, where)
        self.split: TierSplit = split_tiers(hct, where)
        self._host = None
        self._l2_reset = False
        self.tiers = TierReport(self.split.counts, tuple(len(p) for p in self.split.pieces), device=str(self.device))
        if self.device.type == "cuda":
            self.tables, window = self._place_cuda(l2, l2_bytes)
        else:
            self.tables = [torch.frombuffer(bytearray(_bytes_of(p)), dtype=torch.uint8) for p in self.split.pieces]
            window = (0, 0)
        ints = [*self.split.program_ints(), *window]
        self.program = torch.tensor(ints, dtype=torch.int64)  # (the ops' `program`: read on the host)
        ops.register_tables(self.tables, ints, [_bytes_of(p) for p in self.split.pieces])
        self.decoder = RecordDecoder(manifest, self.event_size, self.snapshot_size)
        self.tok_offsets = self.tok_bytes = None
        if tokens is not None:
            self.set_token_table(tokens)

    # -- loading --------------------------------------------------------------------------

    @staticmethod
    def _check_tables(hct: Hct, where: str) -> None:
        try:
            from ..backends.extension import native_extension

            native = native_extension()
        except ModuleError:
            return  # (without the extension the sha256 checks stand alone)
        problem = native.check_tables(hct.blob, hct.params)
        if problem:
            raise ModuleError(f"{where}: the tables are invalid: {problem}")

    def _place_cuda(self, l2: bool, l2_bytes: int | None) -> tuple[list[torch.Tensor], tuple[int, int]]:
        from . import driver

        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        self.device = torch.device("cuda", index)
        attrs = driver.device_attrs(index)
        driver.kernels_for(index)  # compile or read the cubin, load it (not inside a step)
        rep = self.tiers
        rep.device = f"cuda:{index} ({attrs.name}, {attrs.arch}, L2 {attrs.l2_bytes:,} bytes)"
        pieces = self.split.pieces
        t0 = torch.frombuffer(bytearray(_bytes_of(pieces[0])), dtype=torch.uint8).to(self.device)
        t1 = torch.frombuffer(bytearray(_bytes_of(pieces[1])), dtype=torch.uint8).to(self.device)
        placed = [driver.memory_type(t0.data_ptr()), driver.memory_type(t1.data_ptr())]
        if attrs.can_map_host and attrs.unified_addressing:
            self._host = driver.HostBuffer(_bytes_of(pieces[2]))
            t2 = torch.frombuffer(self._host.array(), dtype=torch.uint8)
            if self._host.device_ptr != self._host.ptr:
                raise ModuleError("pinned host memory has a different device address (no unified addressing)")
            placed.append(driver.memory_type(self._host.ptr))
        else:
            rep.notes.append("the host tier is in device memory: this device cannot map host memory")
            t2 = torch.frombuffer(bytearray(_bytes_of(pieces[2])), dtype=torch.uint8).to(self.device)
            placed.append(driver.memory_type(t2.data_ptr()))
        rep.placed = tuple(f"{kind}{' (managed!)' if managed else ''}" for kind, managed in placed)
        for want, (kind, managed), name in zip(
            ("device", "device", "host"), placed, ("L2", "device", "host"), strict=True
        ):
            if managed or (kind != want and not (name == "host" and self._host is None)):
                rep.notes.append(f"the {name} tier is in {kind} memory{' (managed)' if managed else ''}, not {want}")
        return [t0, t1, t2], self._window(attrs, t0, l2, l2_bytes)

    def _window(self, attrs, t0: torch.Tensor, l2: bool, l2_bytes: int | None) -> tuple[int, int]:
        from . import driver

        rep = self.tiers
        if not l2:
            rep.notes.append("L2 window off (l2=False)")
            return (0, 0)
        if int(attrs.arch[3:].rstrip("a")) < 80:
            rep.notes.append(f"no L2 window: {attrs.arch} is pre-Ampere (persisting L2 needs sm_80 or later)")
            return (0, 0)
        if attrs.persisting_max == 0 or attrs.window_max == 0:
            why = "MPS" if os.environ.get("CUDA_MPS_PIPE_DIRECTORY") else "MIG, MPS or a vGPU"
            rep.notes.append(f"no L2 window: the device offers no persisting L2 here ({why}?)")
            return (0, 0)
        hot = min(self.split.hot_bytes, attrs.window_max)
        if hot < self.split.hot_bytes:
            rep.notes.append(
                f"the window covers {hot:,} of tier 0's {self.split.hot_bytes:,} bytes (accessPolicyMaxWindowSize)"
            )
        want = min(hot, attrs.persisting_max, l2_bytes if l2_bytes is not None else hot)
        try:
            self._l2_before = driver.persisting_l2_limit()
            granted = driver.set_persisting_l2(max(want, self._l2_before))
        except driver.CudaError as e:
            rep.notes.append(f"no L2 window: the persisting set-aside was refused ({e})")
            return (0, 0)
        self._l2_reset = True
        set_aside = min(granted, want)
        if set_aside <= 0:
            rep.notes.append("no L2 window: no persisting set-aside was granted")
            return (0, 0)
        ratio = min(1.0, set_aside / hot)
        rep.window, rep.set_aside = (hot, ratio), granted
        return (hot, max(1, int(ratio * 1e6)))

    # -- tokens and batches -----------------------------------------------------------------

    def set_token_table(self, tokens: list[bytes]) -> None:
        offsets = [0]
        for t in tokens:
            offsets.append(offsets[-1] + len(t))
        if offsets[-1] >= 1 << 31:
            raise ModuleError("the token table is larger than 2 GB")
        self.n_tokens = len(tokens)
        self.tok_offsets = torch.tensor(offsets, dtype=torch.int32, device=self.device)
        self.tok_bytes = torch.frombuffer(bytearray(b"".join(tokens) or b"\0"), dtype=torch.uint8).to(self.device)

    def batch(self, n: int, ev_keep: int = 8, snap_keep: int = 2, lanes: int | None = None) -> OpBatch:
        return OpBatch(self, n, ev_keep, snap_keep, lanes)

    def close(self) -> None:
        """Release the persisting L2 lines and the pinned host tier (the tensors go with it)."""
        from . import driver

        if self._l2_reset:
            driver.reset_persisting_l2()
            driver.set_persisting_l2(self._l2_before)
            self._l2_reset = False
        if self._host is not None:
            torch.cuda.synchronize(self.device)
            self.tables = []
            self._host.free()
            self._host = None


def _bytes_of(piece: bytes) -> bytes:
    return piece or bytes(16)  # (an empty piece is still a valid address)


class OpBatch:
    """`n` sequences for the ops: `states` [n, state_size] and output rows `out` on the
    program's device. `step(ids)` is one op call on the current stream (nothing waits);
    `results()` copies the rows to the host and decodes them."""

    def __init__(self, program: OpProgram, n: int, ev_keep: int, snap_keep: int, lanes: int | None):
        if n < 1:
            raise ValueError("a batch needs at least one sequence")
        self.program, self.n = program, n
        self.ev_keep, self.snap_keep = ev_keep, snap_keep
        if lanes is None and program.device.type == "cuda":
            from .driver import kernels_for

            lanes = kernels_for(program.device.index).default_lanes("heatc_step", n)
        self.lanes = lanes or 1
        dev = program.device
        self.states = torch.zeros((n, program.state_size), dtype=torch.uint8, device=dev)
        self._reset_rows()
        width = layout.row_bytes(program.event_size, program.snapshot_size, ev_keep, snap_keep)
        self.out = torch.zeros((n, width), dtype=torch.uint8, device=dev)
        self._pending: dict[int, list] = {}
        self.dropped = 0  # events and snapshots counted but not stored (ev_keep, snap_keep)

    def _reset_rows(self, i: int | None = None) -> None:
        # a reset state: zeros, the lexer at its start row (heatc_core.h, reset)
        p = self.program
        row = p.split.params[PARAMS.index("dfa_width")]
        at = p.split.params[PARAMS.index("off_dfa_state")]
        rows = self.states if i is None else self.states[i : i + 1]
        rows.zero_()
        rows[:, at : at + 4] = torch.tensor(list(row.to_bytes(4, "little")), dtype=torch.uint8, device=rows.device)

    def reset(self, i: int | None = None) -> None:
        self._reset_rows(i)
        if i is None:
            self._pending.clear()
        else:
            self._pending.pop(i, None)

    def step(self, ids: torch.Tensor, lengths: torch.Tensor | None = None, tails: torch.Tensor | None = None) -> None:
        """Each sequence takes ids[i] (shape [n]) or the tokens of row i (shape [n, T], the
        first lengths[i] of them): one op call, results in `out`. `tails` ([n, TAIL] uint8)
        follow the tokens fed (guard's decision reads them)."""
        p = self.program
        if p.tok_offsets is None:
            raise ValueError("no token table: call program.set_token_table() first")
        torch.ops.heatc.step(p.tables, p.program, p.tok_offsets, p.tok_bytes, self.states, ids, lengths, self.out,
                             self.ev_keep, self.snap_keep, self.lanes, tails)  # fmt: skip

    def feed_texts(self, texts: list[bytes], scan: bool = False) -> None:
        """Sequence i takes texts[i]: as one token (a prompt), or with `scan` as a whole
        document (reset, feed, finish: its final snapshot)."""
        if len(texts) != self.n:
            raise ValueError(f"expected {self.n} texts, got {len(texts)}")
        offsets = [0]
        for t in texts:
            offsets.append(offsets[-1] + len(t))
        dev = self.program.device
        data = torch.frombuffer(bytearray(b"".join(texts) or b"\0"), dtype=torch.uint8).to(dev)
        off = torch.tensor(offsets, dtype=torch.int64, device=dev)
        if scan:
            self._pending.clear()
        p = self.program
        torch.ops.heatc.text(p.tables, p.program, self.states, data, off, self.out, self.ev_keep, self.snap_keep,
                             int(scan), self.lanes)  # fmt: skip

    def guard(self, candidates: torch.Tensor, look: int = ops.LOOK_ENDED, tails: torch.Tensor | None = None,
              scratch: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """The mask [n, k] of what each candidate token would do (abi.MASK_*); the states
        are not changed. `look`: `ops.LOOK_DECIDE` is guard's decision (probes, years; `tails`
        the rows' last bytes), `LOOK_ENDED` the candidate fed and the text ended there,
        `LOOK_FED` only fed. `scratch` ([n * k, state_size + event_size] uint8) and `mask`
        may be reused."""
        p = self.program
        n, k = candidates.shape
        if scratch is None:
            scratch = torch.empty((n * k, p.state_size + p.event_size), dtype=torch.uint8, device=p.device)
        if mask is None:
            mask = torch.empty((n, k), dtype=torch.uint8, device=p.device)
        torch.ops.heatc.guard(p.tables, p.program, p.tok_offsets, p.tok_bytes, self.states, tails, candidates, scratch,
                              mask, look, self.lanes)  # fmt: skip
        return mask

    def results(self) -> dict[int, list[Snapshot]]:
        """The snapshots of the last call, by sequence (copies the rows to the host). Raises
        ValueError for a sequence whose row reports a refused token or a finished stream."""
        rows = self.out.cpu().numpy()
        dec = self.program.decoder
        es, ps = self.program.event_size, self.program.snapshot_size
        out: dict[int, list[Snapshot]] = {}
        bad = []
        for i in range(self.n):
            head = layout.OUT.unpack_from(rows[i])
            status, _, n_ev, n_snap = head[:4]
            if status:
                bad.append((i, status))
            kept_ev, kept_snap = min(n_ev, self.ev_keep), min(n_snap, self.snap_keep)
            self.dropped += n_ev - kept_ev + n_snap - kept_snap
            raw = rows[i].tobytes()
            events = dec.events(raw[layout.OUT_HEAD : layout.OUT_HEAD + kept_ev * es]) if kept_ev else []
            pending = self._pending.setdefault(i, [])
            pending.extend(e for _, e in events)
            at = layout.OUT_HEAD + (self.ev_keep + 1) * es
            for _, covers, snap in dec.snapshots(raw[at : at + kept_snap * ps]) if kept_snap else []:
                snap.events, self._pending[i] = pending[:covers], pending[covers:]
                pending = self._pending[i]
                out.setdefault(i, []).append(snap)
        if bad:
            i, status = bad[0]
            raise ValueError(f"sequence {i}: {layout.STATUS_TEXT.get(status, status)}")
        return out

    def heads(self) -> dict[str, torch.Tensor]:
        """The rows' head fields as tensors on the device (no copy to the host)."""
        words = self.out[:, : layout.OUT_HEAD].view(torch.int32)
        fields = {name: words[:, i] for i, name in enumerate(layout.OUT_FIELDS[:6])}
        fields["rejections"] = self.out[:, 24:32].view(torch.int64)[:, 0]
        return fields
