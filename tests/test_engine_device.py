"""The decode loop on the torch ops (backend "cuda"), here through the ops' CPU kernels: the
device driver decides what the host driver decides — each step's scores after guard, the
stop flags, and the reports (replayed by the native core) — on random sequences of steps with
every policy. On a GPU, cuda_bridge/device_check.py runs the same with no host sync a step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO

from heatc.lang.compiler import compile_file
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime import from_bytes
from heatc_runtime.engines import device as device_module
from heatc_runtime.engines.core import Driver
from heatc_runtime.engines.device import DeviceDriver
from heatc_runtime.engines.masking import guard_scores
from heatc_runtime.engines.options import MARKER, RowOptions, marker_ids
from heatc_runtime.engines.tokens import TokenTable

pytestmark = pytest.mark.needs("torch")

PROGRAM = compile_file(REPO / "examples" / "medical.heat")
MODULE = compile_wasm(PROGRAM)
HCT = hct_bytes(PROGRAM, pack(PROGRAM), (0, 0))
VOCAB = [
    b"", b" glucose", b" ", b"5", b"0", b"00", b"000", b" mg/dL", b".", b" heart rate", b"1", b"2", b"9", b"8",
    b" was", b" temperature", b"[un", b"verified", b"]", b" bpm", b",", b" and", b"3", b" C", b" F", b"7",
]  # fmt: skip
TABLE = TokenTable("test", VOCAB, "test", "")
MARK = marker_ids(MARKER, VOCAB)
EOS = 0
POLICIES = ("withhold", "stop", "steer")


def _report(r) -> tuple:
    return (r.text, r.delivered, r.tokens, dict(r.verdicts), r.events, r.stopped_at, r.exhausted_at,
            [(iv.step, iv.action, iv.top, [x.token for x in iv.refused], iv.value, iv.escape) for iv in r.interventions])  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_the_device_driver_decides_what_the_host_driver_decides(data):
    _compare(data, 0)


def _compare(data, ring: int) -> None:
    """Three rows (guard with a policy each, and stop mode), random scores each step: after guard
    the device's scores pick what the host's pick (greedy) or allow what they allow
    (sampling); the rows stop alike; the reports are equal."""
    greedy = data.draw(st.booleans())
    rows = 3
    options = [RowOptions("guard", k=4, policy=data.draw(st.sampled_from(POLICIES))),
               RowOptions("guard", k=6, policy=data.draw(st.sampled_from(POLICIES))), RowOptions("stop")]  # fmt: skip
    if ring:
        device_module.RING = ring
    device = DeviceDriver((MODULE.manifest, HCT), TABLE, rows, 0, "cpu")
    assert device.ring == (ring or 128)
    host = Driver(from_bytes(MODULE.manifest, HCT, backend="native"), TABLE, rows)
    for row, o in enumerate(options):
        device.start(row, o, marker=MARK)
        host.start(row, o, marker=MARK)
    live = np.ones(rows, bool)
    eos = torch.tensor([EOS])
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    for _ in range(data.draw(st.integers(3, 40 if ring else 18))):
        scores = torch.from_numpy(rng.normal(size=(rows, len(VOCAB))).astype(np.float32))
        scores[:, EOS] -= 3.0  # (EOS rarely first)
        on = np.flatnonzero(live)
        guarded = [r for r in on.tolist() if options[r].mode == "guard"]
        mine = device.guard(scores.clone(), eos, greedy)
        theirs = scores.clone()
        if guarded:
            idx = np.array(guarded, np.int64)
            guard_scores(host, theirs, idx, idx, [[EOS]] * len(idx), greedy)
        for r in guarded:
            if greedy:
                assert int(mine[r].argmax()) == int(theirs[r].argmax()), (r, mine[r], theirs[r])
            else:
                assert torch.equal(torch.isfinite(mine[r]), torch.isfinite(theirs[r])), (r, mine[r], theirs[r])
        chosen = theirs.argmax(1).numpy().astype(np.int64)
        ids = np.where(live, chosen, 0)
        stopped_device = device.feed(torch.from_numpy(ids), torch.from_numpy(live), eos)
        stopped_host = host.feed(on, chosen[on])
        assert sorted(np.flatnonzero(stopped_device.numpy() & live).tolist()) == sorted(stopped_host)
        live &= (chosen != EOS) & ~stopped_device.numpy()
        if not live.any():
            break
    for row in range(rows):
        assert _report(device.end(row)) == _report(host.end(row)), row


def test_a_device_step_reads_nothing_back(monkeypatch):
    """No step of the device driver copies to the host: Tensor.cpu, .item and .numpy are not
    called between start and the report (on a GPU, torch.cuda.set_sync_debug_mode('error') in
    the device check)."""
    device = DeviceDriver((MODULE.manifest, HCT), TABLE, 2, 0, "cpu")
    for row in range(2):
        device.start(row, RowOptions("guard", policy="withhold"), marker=MARK)
    calls = []
    host = device.program.program  # (the ops' parameters: a CPU tensor by design, read by the host)

    def watch(name, real):
        def call(self, *a, **k):
            if self is not host:
                calls.append(name)
            return real(self, *a, **k)

        return call

    for name in ("cpu", "item", "numpy", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, watch(name, getattr(torch.Tensor, name)))
    eos = torch.tensor([EOS])
    for token in (b" glucose", b" ", b"5", b"00", b"0", b" mg/dL"):
        scores = torch.zeros(2, len(VOCAB))
        scores[:, VOCAB.index(token)] = 5.0
        out = device.guard(scores, eos, greedy=True)
        device.feed(out.argmax(1))
    assert calls == []
    monkeypatch.undo()
    assert device.end(0).interventions  # (the report, made on the host, says what guard did)


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_decisions_copied_out_every_few_steps_make_the_same_reports(data):
    """With a ring of 4 steps the decisions go to the host every 4 steps: the same reports."""
    ring = device_module.RING
    try:
        _compare(data, 4)
    finally:
        device_module.RING = ring
