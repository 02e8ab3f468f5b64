"""The native backend against the WASM one, in one run: `python bench/native.py [--quick]`.

Prints, from one run on this machine:
  (a) scan MB/s of whole documents (rules, events and the Python report included) on the
      native core and the WASM module (default limits and trusted), beside hyperscan's
      block-mode engine without a match callback, on the texts and rule sets of bench/run.py
      (each domain's hand-written rules and its learned heatmap), and native / WASM per row;
  (b) µs per sequence-token of a decoding step at batch 1, 64 and 1,024, on both backends:
      `step` is the fastest Python path (the ids written into the module's memory, one bound
      step_batch call, the buffers cleared undecoded), `feed_ids` the Python API. Each
      sequence steps the *same* continuation after a 512- and a 4,096-token prefix, so the
      two contexts compare equal work.
Targets (printed at the end): native step ≤ 0.5 µs at batch 1 and ≤ 0.05 µs per sequence at
batch 64, native scan ≥ 1.3 × WASM's (CPU time: on a shared machine the figure to compare).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from run import DATA, REPO, build_peers, finance_text, legal_text, machine, medical_text, tokenizer

import heatc_runtime as rt
from heatc.heatmap.build import compile_heatmap
from heatc.lang.compiler import compile_file
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime.abi import EV_COUNT, SNAP_COUNT
from heatc_runtime.backends.extension import native_extension

HS = "hyperscan (no callback)"
SCAN_TARGET = 1.3  # native / WASM (default limits), CPU time, on every row
STEP_TARGETS = {1: 0.5, 64: 0.05}  # µs per sequence-token of a native step, by batch
# (row, corpus, rules): each domain's hand-written rules, then its learned heatmap (bench/run.py's)
ROWS = [(name, name, REPO / "examples" / f"{name}.heat") for name in ("medical", "legal", "finance")]
ROWS += [(f"{name} learned", name, REPO / "heatmaps" / f"{name}.yaml") for name in ("medical", "legal", "finance")]


def checkers(name: str, limits: rt.Limits | None = None, rules: Path | None = None):
    """The program of `rules` (examples/<name>.heat unless given), on WASM and native."""
    rules = rules or REPO / "examples" / f"{name}.heat"
    program = compile_heatmap(rules)[0] if rules.suffix == ".yaml" else compile_file(rules)
    packed = pack(program)
    module = compile_wasm(program, packed)
    native = rt.from_bytes(module.manifest, hct_bytes(program, packed, (0, 0)), limits, backend="native")
    return program, rt.from_bytes(module.manifest, module.wasm, limits), native


def _scan_rates(fns: dict, data: bytes, repeat: int) -> dict[str, tuple[float, float]]:
    """MB/s of each engine over `data`, wall-clock and CPU time, medians of `repeat` rounds
    that run every engine once in turn (a slow spell of a shared machine hits them all)."""
    for fn in fns.values():
        fn(data[:1000])
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t, cpu = time.perf_counter(), time.process_time()
            fn(data)
            seen[name].append((time.perf_counter() - t, time.process_time() - cpu))
    mb = len(data) / 1e6
    return {
        n: (mb / statistics.median(w for w, _ in v), mb / statistics.median(c for _, c in v)) for n, v in seen.items()
    }


def bench_scan(quick: bool) -> list[dict]:
    size, repeat = (1_000_000, 3) if quick else (4_000_000, 9)
    print(
        f"\n(a) scan: whole documents, MB/s wall-clock (CPU time), median of {repeat} rounds (each engine once a round);"
        f"\n    native skipper: {native_extension().skipper()}"
    )
    cols = ["native", "wasm", "wasm trusted", HS]
    print("  corpus | MB | " + " | ".join(cols) + " | native / wasm (CPU time)")
    loaders = {"medical": medical_text, "legal": legal_text, "finance": finance_text}
    texts: dict[str, bytes] = {}
    rows = []
    for name, corpus, rules in ROWS:
        if corpus not in texts:
            texts[corpus] = loaders[corpus](size)
        text = texts[corpus]
        program, wasm, native = checkers(corpus, rules=rules)
        trusted = checkers(corpus, rt.Limits.trusted(), rules)[1]
        assert native.scan(text) == wasm.scan(text), f"{name}: the backends disagree"
        fns = {"native": native.scan, "wasm": wasm.scan, "wasm trusted": trusted.scan}
        fns.update({k: v for k, v in build_peers(program).items() if k == HS})
        measured = _scan_rates(fns, text, repeat)
        row = {"corpus": name, "MB": len(text) / 1e6, **{k: w for k, (w, _) in measured.items()}}
        row.update({f"{k} cpu": c for k, (_, c) in measured.items()})
        rows.append(row)
        print(f"  {name} | {row['MB']:.1f} | "
              + " | ".join(f"{row[c]:.1f} ({row[c + ' cpu']:.1f})" if c in row else "—" for c in cols)
              + f" | {row['native cpu'] / row['wasm cpu']:.2f}x")  # fmt: skip
    return rows


def _step_cost(batch, ids: list[np.ndarray], raw: bool) -> tuple[float, float]:
    """µs per sequence-token of stepping `ids` (one array of batch ids per step): wall-clock
    and this process's CPU time (on a shared machine the second is the one to compare)."""
    c = batch.checker
    t, cpu = time.perf_counter(), time.process_time()
    if raw:
        view, step, ctl = batch._ids_view, batch._step, c.ctl_words
        for row in ids:
            view[:] = row
            if step() != batch.n:
                raise RuntimeError("a step returned early")
            ctl[EV_COUNT] = ctl[SNAP_COUNT] = 0  # dropped undecoded: full buffers would stop a step
    else:
        for row in ids:
            batch.feed_ids(row)
    n = len(ids) * batch.n
    return (time.perf_counter() - t) / n * 1e6, (time.process_time() - cpu) / n * 1e6


def bench_step(quick: bool) -> list[dict]:
    text = medical_text(3_000_000)
    vocab, encode = tokenizer(text)
    stream = np.array(encode(text), dtype=np.uint32)
    _, wasm, native = checkers("medical")
    for c in (wasm, native):
        c.set_token_table(vocab)
    print("\n(b) decoding steps: µs per sequence-token, medical rules, a "
          f"{len(vocab)}-token vocabulary; median of 5 runs")  # fmt: skip
    print("    step = ids written into memory + one bound step_batch call; feed_ids = the Python API;")
    print("    each: wall-clock µs (this process's CPU µs)")
    print("  context | batch | native step | native feed_ids | wasm step | wasm feed_ids")
    rows = []
    for batch_size in (1, 64, 1024):
        steps = {1: 2000, 64: 200, 1024: 20}[batch_size] // (4 if quick else 1)
        # each sequence's continuation starts at its own place; both contexts step it
        starts = 5000 + (np.arange(batch_size) * 7919) % (len(stream) - 5000 - 5 * steps - 10)
        for context in (512, 4096):
            row = {"context": context, "batch": batch_size}
            for label, checker in (("native", native), ("wasm", wasm)):
                b = checker.batch(batch_size)
                for k in range(context, 0, -1):
                    b.feed_ids(stream[starts - k])
                # a twin from the same states: the API runs step the same tokens from them
                twin = checker.batch(batch_size)
                for i in range(batch_size):
                    twin.fork_from(i, b, i)
                raw, api = [], []
                for run in range(5):
                    ids = [stream[starts + run * steps + s] for s in range(steps)]
                    raw.append(_step_cost(b, ids, raw=True))
                    api.append(_step_cost(twin, ids, raw=False))
                row[f"{label} step"] = statistics.median(w for w, _ in raw)
                row[f"{label} feed_ids"] = statistics.median(w for w, _ in api)
                row[f"{label} step cpu"] = statistics.median(c for _, c in raw)
                row[f"{label} feed_ids cpu"] = statistics.median(c for _, c in api)
            rows.append(row)
            print(f"  {context:7d} | {batch_size:5d} | " + " | ".join(
                f"{row[k]:.3f} ({row[k + ' cpu']:.3f})" for k in ("native step", "native feed_ids", "wasm step", "wasm feed_ids")))  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer repeats")
    parser.add_argument("--only", choices=["scan", "step"], help="one of the two parts")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"bench: {DATA} is missing (the shared data sits beside the repository)")
    print("heatc native vs wasm —", machine())
    scan = bench_scan(args.quick) if args.only != "step" else []
    step = bench_step(args.quick) if args.only != "scan" else []
    print("\ntargets:")
    for row in scan:
        hs = f", / hyperscan {row['native cpu'] / row[HS + ' cpu']:.2f}x" if HS in row else ""
        ratio = row["native cpu"] / row["wasm cpu"]
        print(
            f"  scan {row['corpus']} (CPU time): native / wasm {ratio:.2f}x >= {SCAN_TARGET} "
            f"({'ok' if ratio >= SCAN_TARGET else 'MISSED'}), "
            f"/ wasm trusted {row['native cpu'] / row['wasm trusted cpu']:.2f}x{hs}"
        )
    for row in step:
        if row["batch"] in STEP_TARGETS:
            limit = STEP_TARGETS[row["batch"]]
            wall, cpu = row["native step"], row["native step cpu"]
            ok = "ok" if wall <= limit else "ok in CPU time" if cpu <= limit else "MISSED"
            print(
                f"  step batch {row['batch']} context {row['context']}: {wall:.3f} µs ({cpu:.3f} CPU) <= {limit} ({ok})"
            )


if __name__ == "__main__":
    main()
