"""The CUDA backend checked and measured in one go on a GPU machine (docs/cuda.md, "The device
check"): `python cuda_bridge/device_check.py [--device cuda] [--budget 420] [--out DIR]`.

Needs only what such a machine has — torch with CUDA, cuda-python (cuda.core, cuda.bindings)
and NVRTC — plus this checkout and cuda_bridge/.device/ (made here beforehand by
`python cuda_bridge/device_data.py`: the programs, inputs and the reference interpreter's
expected outputs). It installs nothing and imports nothing of the compiler. Parts, each
within its share of `--budget` seconds (what does not fit is reported as not run):

  compile      NVRTC compiles the kernels for this GPU (cubin cache under --out)
  differential the conformance corpus and the generated cases on the CUDA kernels, a warp
               per sequence (every third case a thread per sequence too): every snapshot of
               every step, document scans, guard masks, against the reference's
  graph        a step captured in a CUDA graph and replayed gives the eager steps' states and
               rows; a warp per sequence (sharing snapshots) gives a thread per sequence's
  timing       µs per decode step at batch 1, 64, 1,024 and 8,192, a thread or a warp per
               sequence, the L2 window on and off: warm (CUDA events around graph replays of
               50 steps) and cold (each step alone after a same-stream copy evicted L2), the
               single steps split by snapshots taken; eager launches; the guard at batch 64
               with 8 candidates
  tiers10k     the 10,000-rule heatmap with its three tiers placed (and verified), its scans
               against the reference, and its step time
  checks       torch.library.opcheck on the CUDA kernels; bad input refused
  engine       the engines' decode loop on the ops (cuda_bridge/device_engine.py): guard and
               feed with no host sync, captured in a CUDA graph, µs per step at batch 1, 64, 256
Results: printed as it goes and written to <out>/device_check.json after each part.
`--device cpu` dry-runs every part that needs no GPU on the ops' CPU kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import sys
import time
import traceback
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "cuda_bridge" / ".device"
sys.path[:0] = [str(REPO / "runtime")]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from heatc_runtime import abi  # noqa: E402
from heatc_runtime.backends.hct import read_hct  # noqa: E402
from heatc_runtime.cuda import layout, ops  # noqa: E402
from heatc_runtime.cuda.program import OpProgram, load  # noqa: E402

sys.path.insert(0, str(REPO / "cuda_bridge"))
from device_engine import part_engine  # noqa: E402

SHARES = {"compile": 0.1, "differential": 0.3, "graph": 0.04, "timing": 0.26, "tiers10k": 0.14, "checks": 0.08,
          "engine": 0.08}  # fmt: skip


class Run:
    def __init__(self, args):
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.budget = args.budget
        self.t0 = time.perf_counter()
        self.results: dict = {"parts": {}}
        self.quick = args.quick

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def deadline(self, part: str, start: float) -> float:
        return start + SHARES[part] * self.budget

    def save(self) -> None:
        (self.out / "device_check.json").write_text(json.dumps(self.results, indent=1, default=str))

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


def say(*parts) -> None:
    print(*parts, flush=True)


def plain(s) -> tuple:
    return (list(s.events), {k: v.value for k, v in s.verdicts.items()}, dict(s.counters), s.final)


_PROGRAMS: dict[Path, dict] = {}


def program_of(pid: str, vocabulary, device, d: Path | None = None, l2: bool = True) -> OpProgram:
    d = d or DATA
    if d not in _PROGRAMS:  # (programs.zpkl: {id: (manifest, rules.hct)}, cuda_bridge/device_data.py)
        _PROGRAMS[d] = pickle.loads(zlib.decompress((d / "programs.zpkl").read_bytes()))
    manifest, hct = _PROGRAMS[d][pid]
    return OpProgram(manifest, read_hct(hct, pid), vocabulary, device, l2=l2)


# ---- parts -----------------------------------------------------------------------------------


def part_env(run: Run) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "device": str(run.device)}
    for mod in ("cuda.core", "cuda.bindings"):
        try:
            env[mod] = __import__(mod, fromlist=["__version__"]).__version__
        except Exception as e:  # (reported, not fatal)
            env[mod] = f"missing ({e})"
    if run.cuda:
        from heatc_runtime.cuda import compile as nvrtc
        from heatc_runtime.cuda.driver import device_attrs

        env["nvrtc"] = nvrtc.nvrtc_version()
        a = device_attrs(run.device.index or 0)
        env["gpu"] = {"name": a.name, "arch": a.arch, "l2_bytes": a.l2_bytes, "persisting_max": a.persisting_max,
                      "window_max": a.window_max}  # fmt: skip
    return env


def part_compile(run: Run, deadline: float) -> dict:
    if not run.cuda:
        return {"skipped": "no GPU: the NVRTC compile is tested by tests/test_cuda_bridge.py"}
    from heatc_runtime.cuda.driver import kernels_for

    t = time.perf_counter()
    k = kernels_for(run.device.index or 0)
    return {"seconds": time.perf_counter() - t, "cached": k.compiled.cached, "cubin_bytes": len(k.compiled.cubin),
            "arch": k.attrs.arch, "cache": str(k.compiled.path)}  # fmt: skip


def _stream_case(p: OpProgram, case: dict, lanes: int, fails: list) -> int:
    streams, steps = case["streams"], case["steps"]
    b = p.batch(len(streams), ev_keep=64, snap_keep=64, lanes=lanes)
    bad = 0
    for k, want in enumerate(steps):
        have = [k < len(s) for s in streams]
        ids = torch.tensor([[s[k] if k < len(s) else 0] for s in streams], dtype=torch.int64, device=p.device)
        if all(have):
            b.step(ids[:, 0])
        else:
            b.step(ids, torch.tensor([int(h) for h in have], dtype=torch.int64, device=p.device))
        got = {i: [plain(s) for s in v] for i, v in b.results().items() if v}
        if got != {int(i): v for i, v in want.items()}:
            bad += 1
            if len(fails) < 5:
                fails.append({"case": case["name"], "lanes": lanes, "step": k, "got": got, "want": want})
    if b.dropped:
        fails.append({"case": case["name"], "dropped": b.dropped})
    return bad


def _scan_case(p: OpProgram, case: dict, lanes: int, fails: list) -> int:
    docs = [d for d, _, _ in case["scans"]]
    b = p.batch(len(docs), ev_keep=512, snap_keep=2, lanes=lanes)
    b.feed_texts(docs, scan=True)
    got = b.results()
    bad = 0
    for i, (_, events, final) in enumerate(case["scans"]):
        snap = got.get(i, [None])[-1]
        ok = snap is not None and snap.final and plain(snap)[1:] == final and snap.events == events
        if not ok:
            bad += 1
            if len(fails) < 5:
                fails.append(
                    {"case": case["name"], "scan": i, "lanes": lanes, "got": snap and plain(snap), "want": final}
                )
    return bad


def _guard_case(p: OpProgram, case: dict, lanes: int, fails: list) -> int:
    bad = 0
    for probe in case["guard"]:
        p.set_token_table(probe["cands"])
        b = p.batch(1, lanes=lanes)
        b.feed_texts([probe["prefix"]])
        cands = torch.arange(len(probe["cands"]), dtype=torch.int64, device=p.device)[None, :]
        mask = b.guard(cands, look=ops.LOOK_ENDED if probe["flush"] else ops.LOOK_FED).cpu()[0].tolist()
        want = [abi.MASK_REJECTED if r else abi.MASK_ALLOWED for r in probe["rejected"]]
        if mask != want:
            bad += 1
            if len(fails) < 5:
                fails.append({"case": case["name"], "guard": probe, "lanes": lanes, "got": mask, "want": want})
    return bad


def part_differential(run: Run, deadline: float) -> dict:
    cases = pickle.loads((DATA / "cases.pkl").read_bytes())
    lanes_all = (32, 1) if run.cuda else (1,)
    stats = {"programs": 0, "streams": 0, "scans": 0, "guard_probes": 0, "step_mismatches": 0,
             "scan_mismatches": 0, "guard_mismatches": 0, "of": len(cases)}  # fmt: skip
    fails: list = []
    for n, case in enumerate(cases):
        if time.perf_counter() > deadline or (run.quick and stats["programs"] >= 40):
            break
        p = program_of(case["program"], case["vocabulary"], run.device)
        # every case with a warp per sequence; every third with a thread per sequence too
        for lanes in lanes_all if n % 3 == 0 else lanes_all[:1]:
            stats["step_mismatches"] += _stream_case(p, case, lanes, fails)
            stats["scan_mismatches"] += _scan_case(p, case, lanes, fails)
        stats["guard_mismatches"] += _guard_case(p, case, lanes_all[0], fails)
        stats["programs"] += 1
        stats["streams"] += len(case["streams"])
        stats["scans"] += len(case["scans"])
        stats["guard_probes"] += len(case["guard"])
        p.close()
    stats["ok"] = not (stats["step_mismatches"] or stats["scan_mismatches"] or stats["guard_mismatches"])
    stats["complete"] = stats["programs"] == len(cases)
    stats["first_failures"] = fails
    return stats


# benchmark programs timed on another's token table and ids (device_data.bench_data writes them once)
TOKENS_OF = {"medlearned": "medical"}


def _bench_program(name: str, device, l2: bool = True) -> tuple[OpProgram, np.ndarray]:
    d, tokens = DATA / "bench", TOKENS_OF.get(name, name)
    vocab = pickle.loads((d / f"{tokens}.vocab.pkl").read_bytes())
    return program_of(name, vocab, device, d, l2), np.load(d / f"{tokens}.ids.npy")


def _prefilled(p: OpProgram, ids: np.ndarray, n: int, lanes: int, context: int):
    b = p.batch(n, ev_keep=4, snap_keep=1, lanes=lanes)
    starts = context + (np.arange(n) * 7919) % (len(ids) - context - 200)
    rows = np.stack([ids[s - context : s] for s in starts])
    b.step(torch.from_numpy(rows).to(p.device))
    return b, starts


def part_graph(run: Run, deadline: float) -> dict:
    if not run.cuda:
        return {"skipped": "no GPU: CUDA graphs need one"}
    p, ids = _bench_program("medical", run.device)
    b, starts = _prefilled(p, ids, 64, 32, 256)
    steps = [torch.from_numpy(ids[starts + k]).to(run.device) for k in range(20)]
    s0 = b.states.clone()
    eager_states, eager_out = [], []
    for x in steps:
        b.out.zero_()  # (a row's bytes past what a step writes keep older steps' bytes: start equal)
        b.step(x)
        eager_states.append(b.states.clone())
        eager_out.append(b.out.clone())
    b.states.copy_(s0)
    static = torch.empty_like(steps[0])
    static.copy_(steps[0])
    side = torch.cuda.Stream(run.device)
    side.wait_stream(torch.cuda.current_stream(run.device))
    with torch.cuda.stream(side):  # (warm-up on a side stream, as torch asks before a capture)
        b.step(static)
    torch.cuda.current_stream(run.device).wait_stream(side)
    b.states.copy_(s0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        b.step(static)
    b.states.copy_(s0)
    states_same = rows_same = 0
    for k, x in enumerate(steps):
        static.copy_(x)
        b.out.zero_()
        g.replay()
        states_same += bool(torch.equal(b.states, eager_states[k]))
        rows_same += bool(torch.equal(b.out, eager_out[k]))
    run.sync()
    p.close()
    same = states_same == rows_same == len(steps)
    return {"captured": True, "replays_equal_eager": same, "steps": len(steps), "states_equal": states_same,
            "rows_equal": rows_same, "shared_verdicts_equal_one_lane": _lanes_agree(run)}  # fmt: skip


def _lanes_agree(run: Run) -> dict:
    """Programs of 64 rules or more share a snapshot's verdicts among a warp's lanes: 40 steps
    of 256 sequences with a warp each give the states and rows of a thread each."""
    out = {}
    for name in ("medlearned", "gen400"):
        p, ids = _bench_program(name, run.device)
        (a, starts), (b, _) = _prefilled(p, ids, 256, 32, 256), _prefilled(p, ids, 256, 1, 256)
        equal = bool(torch.equal(a.states, b.states))
        for k in range(40):
            x = torch.from_numpy(ids[starts + k]).to(run.device)
            a.out.zero_()
            b.out.zero_()
            a.step(x)
            b.step(x)
            equal &= bool(torch.equal(a.states, b.states) and torch.equal(a.out, b.out))
        run.sync()
        out[name] = equal
        p.close()
    return out


class Flusher:
    """Evicts L2 between steps: a copy of 256 MB (over four times the L2) on the step's own
    stream, so that it is over before the step starts and only the persisting lines survive.
    (Copies on another stream *during* the steps measured the copies, not L2: they hold the
    SMs, and a batch-1 step read 250 µs.)"""

    def __init__(self, device):
        self.a = torch.empty(256 << 20, dtype=torch.uint8, device=device)
        self.b = torch.empty_like(self.a)

    def __call__(self) -> None:
        self.b.copy_(self.a)


def _graph_time(run: Run, fn, k: int, reset, reps: int = 5) -> float:
    """µs per call of fn(i) for i < k, captured in one graph, median of `reps` replays (warm L2)."""
    fn(0)
    run.sync()
    reset()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(k):
            fn(i)
    times = []
    for _ in range(reps):
        reset()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / k)
    run.sync()
    return float(np.median(times))


def _each_step(run: Run, b, x: torch.Tensor, reset, flush: Flusher | None) -> tuple[list[float], list[int]]:
    """µs of each step x[i] alone (a one-step graph replayed between CUDA events), after an L2
    flush when `flush`, and how many sequences took a snapshot in it."""
    static = x[0].clone()
    b.step(static)
    run.sync()
    reset()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        b.step(static)
    reset()
    events, snaps = [], []
    col = layout.OUT_OFFSETS["snapshots"] // 4
    for i in range(len(x)):
        static.copy_(x[i])
        if flush:
            flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        events.append((start, end))
        snaps.append(b.out.view(b.n, -1)[:, : layout.OUT_HEAD].contiguous().view(torch.int32)[:, col].gt(0).sum())
    run.sync()
    return [s.elapsed_time(e) * 1e3 for s, e in events], [int(v) for v in snaps]


def _cpu_time(fn, k: int, reset) -> float:
    reset()
    t = time.perf_counter()
    for i in range(k):
        fn(i)
    return (time.perf_counter() - t) / k * 1e6


def _split_by_snapshots(times: list[float], snaps: list[int]) -> dict:
    quiet = [t for t, s in zip(times, snaps, strict=True) if s == 0]
    busy = [t for t, s in zip(times, snaps, strict=True) if s > 0]
    return {
        "steps_without_snapshot": len(quiet), "us_median_without": float(np.median(quiet)) if quiet else None,
        "steps_with_snapshots": len(busy), "us_median_with": float(np.median(busy)) if busy else None,
        "us_max": max(times), "sequences_with_snapshot_per_step": float(np.mean(snaps)),
    }  # fmt: skip


def part_timing(run: Run, deadline: float) -> dict:
    rows = []
    batches = (1, 64, 1024, 8192) if run.cuda else (1, 64)
    flush = Flusher(run.device) if run.cuda else None
    for name in ("medical", "medlearned", "gen400"):
        for l2 in (True, False) if run.cuda else (True,):
            p, ids = _bench_program(name, run.device, l2)
            for n in batches:
                for lanes in (32, 1, None) if run.cuda else (1,):
                    if time.perf_counter() > deadline:
                        rows.append({"program": name, "batch": n, "not_run": "out of time"})
                        continue
                    b, starts = _prefilled(p, ids, n, lanes, 512 if n <= 1024 else 128)
                    if lanes is None and b.lanes in (1, 32):  # (the default is one of the two above)
                        rows.append({"program": name, "l2": l2, "batch": n, "default_lanes": b.lanes})
                        continue
                    k = 50 if run.cuda else 5
                    x = torch.from_numpy(np.stack([ids[starts + i] for i in range(k)])).to(run.device)
                    s0 = b.states.clone()

                    def fn(i, b=b, x=x):
                        b.step(x[i])

                    def reset(b=b, s0=s0):
                        b.states.copy_(s0)

                    row = {"program": name, "l2": l2, "batch": n, "lanes": b.lanes, "state_bytes": p.state_size}
                    if lanes is None:
                        row["lanes_chosen_by_default"] = True
                    if run.cuda:
                        row["us_per_step_warm"] = _graph_time(run, fn, k, reset)
                        cold, snaps = _each_step(run, b, x, reset, flush)
                        row["us_per_step_cold_median"] = float(np.median(cold))
                        if lanes == 32 and n in (1024, 8192):
                            warm, snaps = _each_step(run, b, x, reset, None)
                            row["one_step_alone_warm"] = _split_by_snapshots(warm, snaps)
                            row["one_step_alone_cold"] = _split_by_snapshots(cold, snaps)
                        if n == 1024 and lanes == 32:
                            reset()
                            run.sync()
                            row["eager_wall_us_per_step"] = _cpu_time(fn, k, reset)
                            run.sync()
                    else:
                        row["cpu_op_us_per_step"] = _cpu_time(fn, k, reset)
                    row["us_per_sequence"] = row.get("us_per_step_warm", row.get("cpu_op_us_per_step")) / n
                    rows.append(row)
                    say("   ", row)
                    del b, x, s0
            if name == "medical" and l2:
                rows += _guard_timing(run, p, ids)
            p.close()
    out = {"rows": rows}
    for name in ("medical", "medlearned"):
        hit = [r for r in rows if r.get("batch") == 1024 and r.get("program") == name and "us_per_step_warm" in r]
        if hit:
            best = min(r["us_per_step_warm"] for r in hit)
            out[f"target_1024_le_10us_{name}"] = {"best_us": best, "met": best <= 10.0}
    return out


def _guard_timing(run: Run, p: OpProgram, ids: np.ndarray) -> list[dict]:
    out = []
    for lanes in (32, 1) if run.cuda else (1,):
        b, starts = _prefilled(p, ids, 64, lanes, 256)
        cands = torch.from_numpy(np.stack([ids[starts + j] for j in range(8)], axis=1)).to(run.device)
        scratch = torch.empty((64 * 8, p.state_size + p.event_size), dtype=torch.uint8, device=run.device)

        def fn(i, b=b, c=cands, s=scratch):
            b.guard(c, scratch=s)

        row = {"guard": True, "batch": 64, "k": 8, "lanes": lanes}
        if run.cuda:
            row["us_per_call_warm"] = _graph_time(run, fn, 20, lambda: None)
        else:
            row["cpu_op_us_per_call"] = _cpu_time(fn, 5, lambda: None)
        say("   ", row)
        out.append(row)
    return out


def part_tiers10k(run: Run, deadline: float) -> dict:
    d = DATA / "gen10000"
    if not (d / "rules.hct").exists():
        return {"skipped": f"{d} is missing (python cuda_bridge/device_data.py builds it)"}
    p = load(d, run.device)
    out = {"tiers": p.tiers.lines(), "rules_per_tier": p.tiers.rules, "placed": p.tiers.placed}
    say("\n".join(out["tiers"]))
    expected = pickle.loads((d / "expected.pkl").read_bytes())
    docs = [doc for doc, _, _ in expected["scans"]]
    b = p.batch(len(docs), ev_keep=1024, snap_keep=2)
    b.feed_texts(docs, scan=True)
    got = b.results()
    out["scans_equal_reference"] = [
        bool(got.get(i) and plain(got[i][-1])[1:] == final and got[i][-1].events == events)
        for i, (_, events, final) in enumerate(expected["scans"])
    ]
    rejected = {n for _, _, final in expected["scans"] for n, v in final[0].items() if v == 2}
    out["rejected_rules_by_tier"] = {
        t: sum(expected["tiers"][n] == t for n in rejected) for t in ("l2", "device", "host")
    }
    if run.cuda and time.perf_counter() < deadline:
        text = np.frombuffer(b"".join(docs), dtype=np.uint8).astype(np.int64)
        bb = p.batch(1024, ev_keep=4, snap_keep=1)
        starts = (np.arange(1024) * 7919) % (len(text) - 100)
        x = torch.from_numpy(np.stack([text[starts + i] for i in range(50)])).to(run.device)
        s0 = bb.states.clone()
        reset = lambda: bb.states.copy_(s0)  # noqa: E731
        out["us_per_step_1024_warm"] = _graph_time(run, lambda i: bb.step(x[i]), 50, reset)
        cold, _ = _each_step(run, bb, x, reset, Flusher(run.device))
        out["us_per_step_1024_cold_median"] = float(np.median(cold))
    p.close()
    return out


def part_checks(run: Run, deadline: float) -> dict:
    p, _ = _bench_program("medical", run.device)
    b = p.batch(4, ev_keep=4, snap_keep=2)
    out = {}
    x = torch.tensor([1, 2, 3, 10**7], dtype=torch.int64, device=run.device)
    try:
        torch.library.opcheck(torch.ops.heatc.step.default,
                              (p.tables, p.program, p.tok_offsets, p.tok_bytes, b.states.clone(), x, None,
                               b.out.clone(), 4, 2, b.lanes))  # fmt: skip
        out["opcheck_step"] = "passed"
    except Exception as e:
        out["opcheck_step"] = f"FAILED: {str(e)[:500]}"
    b.step(x)
    try:
        b.results()
        out["bad_token"] = "NOT refused"
    except ValueError as e:
        out["bad_token"] = f"refused: {e}"
    try:
        short = torch.zeros((4, 8), dtype=torch.uint8, device=run.device)
        torch.ops.heatc.step(p.tables, p.program, p.tok_offsets, p.tok_bytes, short, x, None, b.out, 4, 2, 32)
        out["bad_state_size"] = "NOT refused"
    except ValueError as e:
        out["bad_state_size"] = f"refused: {e}"
    p.close()
    return out


def main() -> None:
    global DATA
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for all parts (default 420)")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/heatc-device-check"))
    parser.add_argument("--quick", action="store_true", help="a subset of the differential (for a dry run)")
    parser.add_argument("--only", nargs="*", choices=list(SHARES), help="run only these parts")
    parser.add_argument("--data", type=Path, default=DATA, help="what device_data.py made (cuda_bridge/.device)")
    args = parser.parse_args()
    DATA = args.data
    os.environ.setdefault("HEATC_CACHE_DIR", str(Path(args.out) / "cache"))
    if not (DATA / "cases.pkl").exists():
        sys.exit(f"{DATA}/cases.pkl is missing: run `python cuda_bridge/device_data.py` (where heatc is installed)")
    run = Run(args)
    run.results["env"] = part_env(run)
    say("env:", run.results["env"])
    parts = {"compile": part_compile, "differential": part_differential, "graph": part_graph,
             "timing": part_timing, "tiers10k": part_tiers10k, "checks": part_checks,
             "engine": lambda run, deadline: part_engine(run, deadline, DATA)}  # fmt: skip
    for name, fn in parts.items():
        if args.only and name not in args.only:
            continue
        start = time.perf_counter()
        say(f"== {name} (at {run.elapsed():.0f} s)")
        try:
            res = fn(run, run.deadline(name, start))
        except Exception:
            res = {"error": traceback.format_exc()[-3000:]}
        res["seconds"] = round(time.perf_counter() - start, 1)
        run.results["parts"][name] = res
        say(json.dumps(res, default=str)[:3000])
        run.save()
    say(f"done in {run.elapsed():.0f} s; results in {run.out / 'device_check.json'}")


if __name__ == "__main__":
    main()
