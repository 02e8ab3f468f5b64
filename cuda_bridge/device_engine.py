"""The engines' GPU path, for cuda_bridge/device_check.py ("engine"): the decode loop's checks
on the torch ops (`heatc_runtime.engines.device.DeviceDriver`, what the transformers and vLLM
adapters run with backend "cuda"), fed synthetic scores over the model's real token table —
a GPU machine has torch and cuda-python, not transformers.

Each step: scores [batch, vocabulary] (a fixed random draw, the next token of real clinical
text on top), `guard` over them, the greedy pick, `feed`. Half the rows guard (withhold), half
observe. Checked and measured:

  no_sync     a step runs under torch.cuda.set_sync_debug_mode("error"): nothing waits for the
              host
  graph       a step captured in a CUDA graph (DeviceDriver.capture) and replayed gives the
              eager steps' states, tails, picks and recorded decisions
  timing      µs per step (guard + feed, CUDA events around 50 steps), eager and replayed, at
              batch 1, 64 and 256, with one top-k over the same scores alone beside it
  reports     each row's report after the steps (one copy to the host, replayed by the native
              core, when it is built here)
"""

from __future__ import annotations

import pickle
import time
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from heatc_runtime.engines.device import DeviceDriver
from heatc_runtime.engines.options import MARKER, RowOptions, marker_ids

STEPS = 50
BATCHES = (1, 64, 256)


def _inputs(data: Path):
    """The shipped medical heatmap's module, the model's token table and real text's ids."""
    programs = pickle.loads(zlib.decompress((data / "bench" / "programs.zpkl").read_bytes()))
    vocab = pickle.loads((data / "bench" / "model.vocab.pkl").read_bytes())
    ids = np.load(data / "bench" / "model.ids.npy")
    return programs["medlearned"], SimpleNamespace(tokens=vocab), ids


def _driver(module, table, n: int, device) -> DeviceDriver:
    d = DeviceDriver(module, table, n, len(table.tokens), device)
    marker = marker_ids(MARKER, table.tokens)
    for row in range(n):
        options = RowOptions("guard", policy="withhold") if row % 2 == 0 else RowOptions("observe")
        d.start(row, options, marker=marker)
    return d


class _Scores:
    """Each step's scores, made on the device from one random draw: the text's next token on top."""

    def __init__(self, ids: np.ndarray, n: int, vocab: int, device):
        g = torch.Generator(device="cpu").manual_seed(0)
        self.base = torch.randn((n, vocab), generator=g).to(device)
        starts = (np.arange(n) * 7919) % (len(ids) - STEPS - 1)
        self.next = torch.from_numpy(np.stack([ids[starts + k] for k in range(STEPS)])).to(device)
        self.rows = torch.arange(n, device=device)

    def at(self, k, out: torch.Tensor) -> torch.Tensor:
        out.copy_(self.base)
        out[self.rows, self.next[k]] = 10.0
        return out


def _step(d: DeviceDriver, scores: torch.Tensor, eos: torch.Tensor, pick: torch.Tensor) -> None:
    d.guard(scores, eos, greedy=True)
    pick.copy_(scores.argmax(dim=1))
    d.feed(pick)


def _state(d: DeviceDriver) -> list[torch.Tensor]:
    return [d.batch.states.clone(), d.tails.clone(), d.lengths.clone(), d.mpos.clone(), d._ring_ids.clone(),
            d._ring_mask.clone(), d._ring_cands.clone()]  # fmt: skip


def part_engine(run, deadline: float, data: Path) -> dict:
    module, table, ids = _inputs(data)
    dev, v = run.device, len(table.tokens)
    eos = torch.tensor([2], dtype=torch.int64, device=dev)  # (SmolLM2's <|im_end|>)
    out: dict = {"module": "heatmaps/medical.yaml", "vocabulary": v, "rows": []}

    # no_sync and graph, at batch 64
    n = 64
    src = _Scores(ids, n, v, dev)
    scores = torch.empty((n, v), device=dev)
    pick = torch.empty(n, dtype=torch.int64, device=dev)
    eager = _driver(module, table, n, dev)
    snaps = []
    for k in range(8):
        if k == 4 and run.cuda:
            torch.cuda.synchronize(dev)
            torch.cuda.set_sync_debug_mode("error")
        try:
            _step(eager, src.at(k, scores), eos, pick)
        except RuntimeError as e:
            out["no_sync"] = f"FAILED: {str(e)[:400]}"
            break
        finally:
            if run.cuda:
                torch.cuda.set_sync_debug_mode("default")
        snaps.append([pick.clone(), *_state(eager)])
    else:
        out["no_sync"] = "passed: 4 steps under set_sync_debug_mode('error')" if run.cuda else "skipped: no GPU"
    out["reports"] = _reports(eager)
    if run.cuda and "FAILED" not in out["no_sync"]:
        out["graph"] = _graph(run, module, table, src, eos, snaps, out["reports"])
    else:
        out["graph"] = {"skipped": "no GPU: CUDA graphs need one" if not run.cuda else "the eager step synchronised"}

    for n in BATCHES:
        if time.perf_counter() > deadline:
            out["rows"].append({"batch": n, "not_run": "out of time"})
            continue
        out["rows"].append(_timing(run, module, table, ids, n, eos))
    return out


def _graph(run, module, table, src: _Scores, eos: torch.Tensor, snaps: list, eager_reports: dict) -> dict:
    dev, n = run.device, src.base.shape[0]
    d = _driver(module, table, n, dev)
    scores = torch.empty_like(src.base)
    pick = torch.empty(n, dtype=torch.int64, device=dev)
    k_at = torch.zeros((), dtype=torch.int64, device=dev)
    # warm-up on another driver (the capture must not be the first use of these calls), on a
    # side stream as torch asks
    warm = _driver(module, table, n, dev)
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        _step(warm, src.at(0, scores), eos, pick)
    torch.cuda.current_stream(dev).wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with d.capture(g):
        scores.copy_(src.base)
        scores[src.rows, src.next.index_select(0, k_at.view(1))[0]] = 10.0
        _step(d, scores, eos, pick)
        k_at.add_(1)
    same = []
    for k in range(len(snaps)):
        g.replay()
        d.replayed()
        got = [pick, *_state(d)]
        same.append(all(torch.equal(a, b) for a, b in zip(got, snaps[k], strict=True)))
    torch.cuda.synchronize(dev)
    reports_equal = _reports(d) == eager_reports
    return {"captured": True, "steps": len(snaps), "replays_equal_eager": all(same), "each": same,
            "reports_equal_eager": reports_equal}  # fmt: skip


def _reports(d: DeviceDriver) -> dict:
    try:
        reports = [d.end(row) for row in range(d.capacity)]
    except (ImportError, OSError) as e:  # (the native core replays the reports: built here or not)
        return {"skipped": f"the native core is not built here ({e})"}
    guard = [r for r in reports if r.mode == "guard"]
    return {"rows": len(reports), "interventions": sum(len(r.interventions) for r in guard),
            "rejected_rows": sum(any(v.name == "REJECTED" for v in r.verdicts.values()) for r in reports),
            "texts": [r.text[:60] for r in reports[:2]]}  # fmt: skip


def _timing(run, module, table, ids: np.ndarray, n: int, eos: torch.Tensor) -> dict:
    dev, v = run.device, len(table.tokens)
    src = _Scores(ids, n, v, dev)
    d = _driver(module, table, n, dev)
    scores = torch.empty((n, v), device=dev)
    pick = torch.empty(n, dtype=torch.int64, device=dev)
    row = {"batch": n, "guard_rows": (n + 1) // 2, "k": 8}
    steps = STEPS if run.cuda else 5

    def timed(fn) -> float:
        if run.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(dev)
            a.record()
            for k in range(steps):
                fn(k)
            b.record()
            torch.cuda.synchronize(dev)
            return a.elapsed_time(b) * 1000 / steps
        t = time.perf_counter()
        for k in range(steps):
            fn(k)
        return (time.perf_counter() - t) * 1e6 / steps

    row["topk_alone_us"] = timed(lambda k: torch.topk(src.at(k, scores), 8, dim=-1))
    row["scores_alone_us"] = timed(lambda k: src.at(k, scores))
    row["eager_step_us"] = timed(lambda k: _step(d, src.at(k, scores), eos, pick))
    if run.cuda:
        k_at = torch.zeros((), dtype=torch.int64, device=dev)
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            _step(d, src.at(0, scores), eos, pick)
        torch.cuda.current_stream(dev).wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with d.capture(g):
            scores.copy_(src.base)
            scores[src.rows, src.next.index_select(0, (k_at % STEPS).view(1))[0]] = 10.0
            _step(d, scores, eos, pick)
            k_at.add_(1)
        d.copy_out()

        def replay(k):
            g.replay()
            d.replayed()

        row["graph_step_us"] = timed(replay)
    step = row.get("graph_step_us", row["eager_step_us"])
    row["beyond_topk_and_scores_us"] = step - row["topk_alone_us"] - row["scores_alone_us"]
    print("   ", row, flush=True)
    return row
