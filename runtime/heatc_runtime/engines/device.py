"""The decode loop's checks on the torch ops (backend "cuda"): the sequences' states, tails and
value checkpoints live on the scores' device; a step is one `heatc::mark` and one
`heatc::step` call, guard one top-k, one `heatc::guard` call and tensor operations — no
`.item()`, no copy to the host, no shape that depends on the data: nothing waits for the host,
and a step can be captured in a CUDA graph. On a CPU the same calls run the ops' CPU kernels
(how CI tests this path).

What each step decided stays on the device as it goes (the token fed; guard's candidates and
their mask); a report is made when asked for (the end of a request): one copy to the host,
then the native core — the C++ the kernels are compiled from — replays the sequence with those
decisions through `core.Driver`, so a report is the one the host backends give: the same
events, verdicts, interventions, values withheld. The policies themselves (withhold, stop,
steer, exhausted) run here as tensor operations, and must decide what `core.Driver._policy`
decides: a test holds the two to each other.

Public surface: `DeviceDriver`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from ..abi import SNAPSHOT
from ..backends.hct import PARAMS
from ..cuda import layout, ops
from . import guarding
from .core import Driver
from .guarding import MASK_ALLOWED, MASK_REJECTED, MASK_UNTRIED, TAIL
from .options import RowOptions
from .reports import GenerationReport

_NEG = float("-inf")
_STEER, _WITHHOLD, _STOP = 0, 1, 2
_POLICY = {"steer": _STEER, "withhold": _WITHHOLD, "stop": _STOP}
_SNAP_KEEP = 4  # snapshots a step's row stores (their rejections: stop mode); more in one token are counted
RING = 128  # steps of decisions kept on the device between copies to the host


class DeviceDriver:
    """`capacity` sequences of one build on `device`, stepped together by the torch ops.

    `feed(ids, live)` and `guard(scores, ...)` take and give device tensors; `report(row)`
    copies what the row's steps decided to the host and replays it there (`core.Driver`)."""

    backend = "cuda"

    def __init__(self, module, table, capacity: int, vocab_size: int = 0, device="cpu", metrics=None):
        """`module`: a build directory (its checksums verified), or (manifest, rules.hct bytes)."""
        from ..backends.hct import read_hct
        from ..cuda.program import OpProgram, load

        tokens = list(table.tokens)
        tokens += [b""] * (max(vocab_size, len(tokens)) - len(tokens))
        v = len(tokens)
        self.vocab_size, self.null_id, self.capacity = v, v, capacity
        self.device = dev = torch.device(device)
        self.module = module
        self.table, self.metrics = table, metrics
        self._tails_table = guarding.Tails(tokens)
        # the device's token table: the model's, the empty token, each token's bytes before a
        # value that begins in it (fed again when a value is taken back), and markers' texts
        keep = [t[: int(self._tails_table.value_at[i])] for i, t in enumerate(tokens)]
        self._keep0 = v + 1
        self._markers: list[str] = []
        self._device_tokens = [*tokens, b"", *keep]
        if isinstance(module, tuple):
            manifest, hct = module
            self.program = OpProgram(manifest, read_hct(hct, "rules.hct"), None, dev)
        else:
            self.program = load(Path(module), dev)
        self.program.set_token_table(self._device_tokens)
        self.batch = self.program.batch(capacity, ev_keep=0, snap_keep=_SNAP_KEEP)
        z = lambda dtype, *shape: torch.zeros(shape or (capacity,), dtype=dtype, device=dev)  # noqa: E731
        self.tails = z(torch.uint8, capacity, TAIL)
        self.lengths = z(torch.int64)
        self.alive = z(torch.bool)
        self.guarded = z(torch.uint8)
        self.stop_mode = z(torch.bool)
        self.stopped = z(torch.bool)
        self.base = z(torch.int64)
        self.k = z(torch.int64)
        self.policy = z(torch.int64)
        self.exhaust_stop = z(torch.bool)
        self.ck_step = torch.full((capacity,), -1, dtype=torch.int64, device=dev)
        self.ck_token = z(torch.int64)
        self.ck_tail = z(torch.uint8, capacity, TAIL)
        self.ck_state = z(torch.uint8, capacity, self.program.state_size)
        self.mpos = torch.full((capacity,), -1, dtype=torch.int64, device=dev)  # the marker's next token, -1: none
        self.marker = torch.full((capacity, 1), -1, dtype=torch.int64, device=dev)  # each row's marker ids
        self.marker_len = z(torch.int64)
        self.marker_text = torch.full((capacity,), self.null_id, dtype=torch.int64, device=dev)
        self.has_digit = torch.from_numpy(self._tails_table.has_digit).to(dev)
        self._rows: list[dict | None] = [None] * capacity
        # what each step decided, in rings on the device (a step writes at `cursor`, a device
        # scalar, so that a captured graph's replays write on); copied to the host every RING
        # steps, and when a report is asked for
        self.ring = RING
        self.cursor = torch.zeros((), dtype=torch.int64, device=dev)
        self._ring_ids = torch.full((RING, capacity), -1, dtype=torch.int64, device=dev)
        self._ring_guard = torch.zeros(RING, dtype=torch.bool, device=dev)
        self._ring_cands = torch.full((RING, capacity, 1), -1, dtype=torch.int64, device=dev)
        self._ring_mask = torch.zeros((RING, capacity, 1), dtype=torch.uint8, device=dev)
        self._issued = self._copied = 0  # steps fed, and copied to the host
        self._ids_host: list[np.ndarray] = []  # [steps, capacity] chunks, in order
        self._guards_host: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # step → candidates, mask ([capacity, k])
        rej = SNAPSHOT.offset("rejections")
        self._snap_rejections = [
            layout.OUT_HEAD + self.program.event_size + i * self.program.snapshot_size + rej for i in range(_SNAP_KEEP)
        ]
        self._off_rejections = self.program.split.params[PARAMS.index("off_rejections")]

    # -- rows -----------------------------------------------------------------------------

    def start(self, row: int, options: RowOptions | str = "observe", prompt: Sequence[int] | None = None,
              marker: Sequence[int] = ()) -> None:  # fmt: skip
        """Begin a sequence in `row` (the host side: a few small writes to the device)."""
        if isinstance(options, str):
            options = RowOptions(options)
        self.batch.reset(row)
        prompt_bytes = b""
        if options.see_prompt and prompt is not None and len(prompt):
            ids = [int(i) for i in prompt]
            if any(not 0 <= i < self.vocab_size for i in ids):
                from .options import TokenIdError

                bad = next(i for i in ids if not 0 <= i < self.vocab_size)
                raise TokenIdError(f"the prompt of sequence {row}: token id {bad} is outside the token table")
            prompt_bytes = b"".join(self._device_tokens[i] for i in ids)
            self._feed_text(row, prompt_bytes)
        marker = [int(i) for i in marker]
        if len(marker) > self.marker.shape[1]:
            grown = torch.full((self.capacity, len(marker)), -1, dtype=torch.int64, device=self.device)
            grown[:, : self.marker.shape[1]] = self.marker
            self.marker = grown
        self.marker[row] = -1
        if marker:
            self.marker[row, : len(marker)] = torch.tensor(marker, dtype=torch.int64, device=self.device)
        self.marker_len[row] = len(marker)
        self.marker_text[row] = self._marker_token(options.marker) if options.mode == "guard" else self.null_id
        tail = prompt_bytes[-TAIL:].rjust(TAIL, b"\0")
        self.tails[row] = torch.tensor(list(tail), dtype=torch.uint8, device=self.device)
        self.lengths[row] = 0
        self.alive[row] = True
        self.guarded[row] = options.mode == "guard"
        self.stop_mode[row] = options.mode == "stop"
        self.stopped[row] = False
        self.base[row] = self._rejections()[row]
        self.k[row] = options.k
        self.policy[row] = _POLICY[options.policy]
        self.exhaust_stop[row] = options.on_exhausted == "stop"
        self.ck_step[row] = -1
        self.mpos[row] = -1
        if options.mode == "guard" and options.k > self._ring_cands.shape[2]:
            self._grow_rings(options.k)  # (here, not in a step: a step can be captured)
        self._rows[row] = {"options": options, "prompt": prompt, "marker": tuple(marker), "from": self._issued}

    def _marker_token(self, marker: str) -> int:
        """The id of a token whose bytes are the marker's text (fed when a stopped row's
        value is taken back), added to the device's table the first time."""
        if marker not in self._markers:
            self._markers.append(marker)
            self._device_tokens.append(marker.encode())
            self.program.set_token_table(self._device_tokens)
        return self._keep0 + self.vocab_size + self._markers.index(marker)

    def _feed_text(self, row: int, data: bytes) -> None:
        text = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
        offsets = torch.zeros(self.capacity + 1, dtype=torch.int64)
        offsets[row + 1 :] = len(data)
        p = self.program
        torch.ops.heatc.text(p.tables, p.program, self.batch.states, text, offsets.to(self.device), self.batch.out,
                             0, _SNAP_KEEP, 0, self.batch.lanes)  # fmt: skip

    def _rejections(self) -> torch.Tensor:
        at = self._off_rejections
        return self.batch.states[:, at : at + 8].contiguous().view(torch.int64)[:, 0]

    def live(self, row: int) -> bool:
        return self._rows[row] is not None

    # -- steps ----------------------------------------------------------------------------

    def feed(self, ids: torch.Tensor, live: torch.Tensor | None = None, eos: torch.Tensor | None = None,
             rows: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Feed token ids[i] (a [capacity] int64 tensor on the device) to every live row; `live`,
        when given, marks the rows the engine still writes (the others end here: not fed,
        not guarded again); `rows` marks the rows fed now (default: every live one); a row
        fed one of `eos` (end-of-sequence ids), or stopped, ends after this step. Two op calls. Returns the rows stop mode has ended (a bool tensor;
        nothing is read back)."""
        if live is not None:
            self.alive &= live  # (a row the engine has ended is not fed again, nor guarded)
        live = self.alive if rows is None else self.alive & rows  # (`rows`: those fed now, vLLM's)
        fed = torch.where(live, ids, -1)
        p, b = self.program, self.batch
        forcing = self.mpos >= 0
        took = forcing & (fed == self.marker.gather(1, self.mpos.clamp(min=0)[:, None])[:, 0])
        torch.ops.heatc.mark(p.tables, p.program, p.tok_offsets, p.tok_bytes, b.states, self.tails, fed,
                             self.guarded, self.lengths, self.ck_step, self.ck_token, self.ck_tail, self.ck_state)  # fmt: skip
        b.step(torch.where(live, ids, self.null_id)[:, None], live.to(torch.int64))
        self.lengths += live
        self._ring_ids.index_copy_(0, self.cursor.view(1), fed.view(1, -1))
        self.cursor.add_(1).remainder_(self.ring)
        self._issued += 1
        if self._issued - self._copied == self.ring:
            self.copy_out()
        # the marker goes on while the engine writes it (a row that writes another token leaves it)
        self.mpos.copy_(torch.where(took, self.mpos + 1, torch.where(forcing & live, -1, self.mpos)))
        self.mpos.masked_fill_(self.mpos >= self.marker_len, -1)
        # stop mode: the first snapshot holding a rejection the prompt did not have
        head = b.out[:, : layout.OUT_HEAD].view(torch.int32)
        n_snaps = head[:, layout.OUT_FIELDS.index("snapshots")]
        worst = torch.stack(
            [b.out[:, at : at + 8].contiguous().view(torch.int64)[:, 0] for at in self._snap_rejections], 1
        )
        stored = torch.arange(_SNAP_KEEP, device=self.device)[None, :] < n_snaps[:, None]
        published = torch.where(stored, worst, -1).amax(dim=1)
        published = torch.where(n_snaps > _SNAP_KEEP, self._rejections(), published)
        self.stopped |= self.stop_mode & live & (n_snaps > 0) & (published > self.base)
        ended = self.stopped
        if eos is not None:
            ended = ended | torch.isin(fed, eos)
        self.alive &= ~ended
        return self.stopped

    def guard(self, scores: torch.Tensor, eos: torch.Tensor, greedy: bool = False,
              slots: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Guard every live guard row of `scores` ([rows, vocabulary], on the device) in place:
        one top-k, one `heatc::guard` call, the policies as tensor operations. Row i of
        `scores` is the driver's row `slots[i]` (an int64 tensor: vLLM's batch indices to its
        request slots), or row i when `slots` is None. `eos`: the end-of-sequence ids."""
        kmax = min(self._kmax, scores.shape[1])
        values, ids = torch.topk(scores, kmax, dim=-1)
        dev = scores.device
        pick = (lambda t: t) if slots is None else (lambda t: t.index_select(0, slots))
        cols = torch.arange(kmax, device=dev)[None, :]
        mpos = pick(self.mpos)
        rows_on = (pick(self.alive) & (pick(self.guarded) > 0) & (mpos < 0))[:, None]
        usable = torch.isfinite(values) & rows_on & (cols < pick(self.k)[:, None])
        cands = torch.where(usable, ids, -1).contiguous()
        tails = pick(self.tails).contiguous()
        p, b = self.program, self.batch
        states = b.states if slots is None else b.states.index_select(0, slots)
        n = cands.shape[0]
        scratch = torch.empty((n * kmax, p.state_size + p.event_size), dtype=torch.uint8, device=dev)
        mask = torch.empty((n, kmax), dtype=torch.uint8, device=dev)
        torch.ops.heatc.guard(p.tables, p.program, p.tok_offsets, p.tok_bytes, states, tails, cands, scratch, mask,
                              ops.LOOK_DECIDE, b.lanes)  # fmt: skip
        if greedy:
            passed = (mask == MASK_ALLOWED).to(torch.int64)
            below = (passed.cumsum(1) - passed) > 0
            mask = torch.where(below & usable, MASK_UNTRIED, mask)
        self._record_guard(cands, mask, slots)
        ok = mask == MASK_ALLOWED
        refused = usable & (mask == MASK_REJECTED)
        any_ok = ok.any(1)
        top = usable[:, 0] & (mask[:, 0] == MASK_REJECTED)
        on = rows_on[:, 0]
        exhausted = on & ~any_ok
        at_value = self.has_digit[cands[:, 0].clamp(min=0)] | _open_number(tails)
        policy, has_marker = pick(self.policy), pick(self.marker_len) > 0
        withhold = top & (policy == _WITHHOLD) & at_value & has_marker
        stop_now = top & ((policy == _STOP) | ((policy == _WITHHOLD) & at_value & ~has_marker))
        rest = exhausted & ~withhold & ~stop_now
        exhaust_stop = pick(self.exhaust_stop)
        force_eos = stop_now | (rest & exhaust_stop)
        leave = rest & ~exhaust_stop

        def spread(t: torch.Tensor) -> torch.Tensor:  # (index rows to driver rows)
            return (
                t if slots is None else torch.zeros(self.capacity, dtype=t.dtype, device=dev).index_copy_(0, slots, t)
            )

        self._take_back(spread(withhold | stop_now), spread(stop_now))
        self.mpos.masked_fill_(spread(withhold), 0)
        mpos = pick(self.mpos)
        forced = torch.where(mpos >= 0, pick(self.marker).gather(1, mpos.clamp(min=0)[:, None])[:, 0], -1)
        # the scores: refused candidates out (in place); rows confined to what passed (sampling,
        # a tie with a token not judged); forced rows to their token; rows left alone are left
        if greedy:
            first = ok.to(torch.int64).argmax(1)
            best = values.gather(1, first[:, None])[:, 0]
            nxt = values.gather(1, (first + 1).clamp(max=kmax - 1)[:, None])[:, 0]
            confine = on & any_ok & (nxt >= best)
        else:
            confine = on & any_ok
        pinned = (forced >= 0) | force_eos
        confine &= ~pinned & ~leave
        refused &= ~(leave | pinned)[:, None]
        scores.masked_fill_(confine[:, None], _NEG)
        scores.scatter_(1, ids, torch.where(refused | (confine[:, None] & ~ok), _NEG, values))
        scores.masked_fill_(pinned[:, None], _NEG)
        at = forced.clamp(min=0)[:, None]
        scores.scatter_(1, at, torch.where((forced >= 0)[:, None], 0.0, scores.gather(1, at)))
        cols = eos[None, :].expand(scores.shape[0], -1)
        scores.scatter_(1, cols, torch.where(force_eos[:, None], 0.0, scores.gather(1, cols)))
        return scores

    def force_stopped(self, scores: torch.Tensor, eos: torch.Tensor, slots: torch.Tensor | None = None) -> torch.Tensor:
        """Make the rows stop mode ended write an end-of-sequence token (vLLM ends a request so)."""
        stopped = self.stopped if slots is None else self.stopped.index_select(0, slots)
        scores.masked_fill_(stopped[:, None], _NEG)
        cols = eos[None, :].expand(scores.shape[0], -1)
        scores.scatter_(1, cols, torch.where(stopped[:, None], 0.0, scores.gather(1, cols)))
        return scores

    def _take_back(self, rows: torch.Tensor, stopping: torch.Tensor) -> None:
        """The value being written goes back out of what the rules read (as core.Driver's
        _take_back): the rows return to their checkpoints, read again their first token's
        bytes before the value; stopping rows read the marker's text."""
        back = rows & (self.ck_step >= 0)
        states = self.batch.states
        states.copy_(torch.where(back[:, None], self.ck_state, states))
        self.tails.copy_(torch.where(back[:, None], self.ck_tail, self.tails))
        keep = self._keep0 + self.ck_token
        self._side_step(keep, back)
        self._side_step(self.marker_text, stopping)
        self.ck_step.masked_fill_(rows, -1)

    def _side_step(self, ids: torch.Tensor, rows: torch.Tensor) -> None:
        """Feed `ids` to `rows` alone, outside the steps (their tails follow)."""
        p, b = self.program, self.batch
        fed = torch.where(rows, ids, -1)
        no_ck = torch.zeros_like(self.guarded)
        torch.ops.heatc.mark(p.tables, p.program, p.tok_offsets, p.tok_bytes, b.states, self.tails, fed, no_ck,
                             self.lengths, self.ck_step, self.ck_token, self.ck_tail, self.ck_state)  # fmt: skip
        b.step(torch.where(rows, ids, self.null_id)[:, None], rows.to(torch.int64))

    def _record_guard(self, cands: torch.Tensor, mask: torch.Tensor, slots: torch.Tensor | None = None) -> None:
        if slots is not None:  # (the rings are by driver row)
            full_c = torch.full((self.capacity, cands.shape[1]), -1, dtype=cands.dtype, device=cands.device)
            full_m = torch.zeros((self.capacity, cands.shape[1]), dtype=mask.dtype, device=mask.device)
            cands, mask = full_c.index_copy_(0, slots, cands), full_m.index_copy_(0, slots, mask)
        width = cands.shape[1]
        if width > self._ring_cands.shape[2]:  # (start() grows them; not reached in a captured step)
            self._grow_rings(width)
        at = self.cursor.view(1)
        self._ring_cands[:, :, :width].index_copy_(0, at, cands[None])
        self._ring_cands[:, :, width:].index_fill_(0, at, -1)
        self._ring_mask[:, :, :width].index_copy_(0, at, mask[None])
        self._ring_guard.index_fill_(0, at, True)

    @contextmanager
    def capture(self, graph, **kwargs):
        """Capture the steps run in the block (`guard`, then `feed`) into `graph`, a
        `torch.cuda.CUDAGraph` (kwargs go to `torch.cuda.graph`): they are recorded, not run,
        so not counted; call `replayed()` after each replay. Warm the same calls up once on a
        side stream first, as torch asks (a wider k than before grows the rings: a copy)."""
        self.copy_out()  # (so that no copy to the host falls inside the capture)
        issued = self._issued
        with torch.cuda.graph(graph, **kwargs):
            yield
        self._issued = issued

    def replayed(self, steps: int = 1) -> None:
        """Count `steps` replays of a captured step; what they decided is copied to the host
        before the rings wrap (count at most RING steps at a time)."""
        if self._issued + steps - self._copied > self.ring:
            raise ValueError(f"{steps} replays since the last copy overwrite the rings ({self.ring} steps): "
                             "call replayed() after each replay, or copy_out() in between")  # fmt: skip
        self._issued += steps
        if self._issued - self._copied == self.ring:
            self.copy_out()

    def _grow_rings(self, width: int) -> None:
        """Rings of guard's decisions `width` candidates wide (a wider k than before: once)."""
        self.copy_out()
        self._ring_cands = torch.full((self.ring, self.capacity, width), -1, dtype=torch.int64, device=self.device)
        self._ring_mask = torch.zeros((self.ring, self.capacity, width), dtype=torch.uint8, device=self.device)

    def copy_out(self) -> None:
        """Copy what the steps since the last copy decided to the host (one wait for the device)."""
        n = self._issued - self._copied
        if n <= 0:
            return
        at = torch.arange(self._copied, self._issued, device=self.device) % self.ring
        ids, flag = self._ring_ids[at].cpu().numpy(), self._ring_guard[at].cpu().numpy()
        if flag.any():
            cands, mask = self._ring_cands[at].cpu().numpy(), self._ring_mask[at].cpu().numpy()
            for j in np.flatnonzero(flag).tolist():
                self._guards_host[self._copied + j] = (cands[j], mask[j])
        self._ring_guard[at] = False
        self._ids_host.append(ids)
        self._copied = self._issued

    @property
    def _kmax(self) -> int:
        return max((r["options"].k for r in self._rows if r is not None), default=1)

    # -- reports ----------------------------------------------------------------------------

    def end(self, row: int, error: str | None = None) -> GenerationReport:
        """The row's report (one copy of its steps to the host, replayed there), and the row freed."""
        r = self._rows[row]
        if r is None:
            raise ValueError(f"row {row} holds no sequence")
        self._rows[row] = None
        self.alive[row] = False
        self.copy_out()
        first = r["from"]
        held = np.concatenate(self._ids_host) if self._ids_host else np.zeros((0, self.capacity), np.int64)
        ids = held[first - (self._issued - len(held)) :, row]
        guards = [(s - first, c[row], m[row]) for s, (c, m) in self._guards_host.items() if s >= first]
        report = replay(self, row, r, ids, guards, error)
        self._forget()
        return report

    def _forget(self) -> None:
        """Drop the host's copies of steps no live row needs (a long-running engine stays small)."""
        first = min((r["from"] for r in self._rows if r is not None), default=self._issued)
        base = self._issued - sum(len(c) for c in self._ids_host)
        while self._ids_host and base + len(self._ids_host[0]) <= first:
            base += len(self._ids_host.pop(0))
        for s in [s for s in self._guards_host if s < first]:
            del self._guards_host[s]


def _open_number(tails: torch.Tensor) -> torch.Tensor:
    """Rows whose text ends in a number, spaces after it allowed (core.Driver._at_value)."""
    t = tails.to(torch.int64)
    space = (t == 32) | (t == 9)
    # the last byte that is not a space, and the one before it
    idx = torch.where(~space, torch.arange(TAIL, device=t.device)[None, :], -1).amax(1)
    last = t.gather(1, idx.clamp(min=0)[:, None])[:, 0]
    before = t.gather(1, (idx - 1).clamp(min=0)[:, None])[:, 0]
    digit = lambda b: (b >= 48) & (b <= 57)  # noqa: E731
    point = (last == 46) | (last == 44)
    return (idx >= 0) & (digit(last) | (point & (idx >= 1) & digit(before)))


def replay(
    device: DeviceDriver, row: int, r: dict, steps: np.ndarray, guards: list, error: str | None
) -> GenerationReport:
    """The row's report: the native core on the host fed the row's tokens, with guard's decisions
    at the steps they were made (core.Driver, whose policies the device's must equal)."""
    from ..backends.loader import from_bytes, load

    host = getattr(device, "_host", None)
    if host is None:
        m = device.module
        checker = from_bytes(m[0], m[1], backend="native") if isinstance(m, tuple) else load(m, backend="native")
        host = device._host = Driver(checker, device.table, 1, device.vocab_size, device.metrics)
    host.start(0, r["options"], r["prompt"], r["marker"])
    at = {s: (c, m) for s, c, m in guards}
    fed = 0
    for t, token in enumerate(steps.tolist()):
        if t in at:
            cands, mask = at[t]
            usable = cands >= 0
            ok = mask == MASK_ALLOWED
            masked = usable & (mask == MASK_REJECTED)
            if masked.any() or (usable.any() and not ok.any()):
                host._act(np.array([0]), cands[None], usable[None], ok[None], masked[None], np.array([0]),
                          np.full(1, -1, np.int64), np.zeros(1, bool))  # fmt: skip
        if token >= 0:
            host.feed(np.array([0]), np.array([token]))
            fed += 1
    report = host.end(0, error)
    report.backend = "cuda"
    return report
