"""Decoding steps through the torch op `heatc::step` (its CPU kernel: the native core) beside
the Python API, in one run: `python bench/torch_op.py [--quick]`.

µs per sequence-token at batch 1, 64 and 1,024, medical rules, a 32,000-token vocabulary,
each sequence stepping its own continuation after a 512-token prefix (fed in one op call,
as a [batch, 512] row of ids):
  op           OpBatch.step(ids): the op through torch's dispatcher, ids a CPU tensor
  op direct    torch.ops.heatc.step(...) with its arguments prepared once
  native step  the native backend's fastest Python path (bench/native.py: one bound
               step_batch call, buffers cleared undecoded)
  feed_ids     the Python API (Batch.feed_ids), events and snapshots decoded
Each: wall-clock µs (this process's CPU µs), median of 5 runs. On a GPU the same op runs
the CUDA kernel: cuda_bridge/device_check.py measures that.
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
import torch
from native import _step_cost, checkers
from run import DATA, machine, medical_text, tokenizer

from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime.backends.hct import read_hct
from heatc_runtime.cuda.program import OpProgram


def _timed(fn, rows: list, n_seq: int) -> tuple[float, float]:
    t, cpu = time.perf_counter(), time.process_time()
    for row in rows:
        fn(row)
    n = len(rows) * n_seq
    return (time.perf_counter() - t) / n * 1e6, (time.process_time() - cpu) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"bench: {DATA} is missing (the shared data sits beside the repository)")
    torch.set_num_threads(1)
    print("heatc torch op (CPU kernel) vs the Python API —", machine(), f"— torch {torch.__version__}")
    text = medical_text(3_000_000)
    vocab, encode = tokenizer(text)
    stream = np.array(encode(text), dtype=np.int64)
    program, _, native = checkers("medical")
    native.set_token_table(vocab)
    packed = pack(program)
    op = OpProgram(compile_wasm(program, packed).manifest, read_hct(hct_bytes(program, packed, (0, 0))), vocab)
    print(f"  medical rules, {len(vocab)}-token vocabulary, context 512; wall-clock µs per sequence-token (CPU µs)")
    print("  batch | op | op direct | native step | feed_ids")
    context = 512
    for batch_size in (1, 64, 1024):
        steps = {1: 2000, 64: 200, 1024: 20}[batch_size] // (4 if args.quick else 1)
        starts = 5000 + (np.arange(batch_size) * 7919) % (len(stream) - 5000 - 5 * steps - 10)
        ob = op.batch(batch_size, ev_keep=8, snap_keep=2)
        prefix = np.stack([stream[s - context : s] for s in starts])
        ob.step(torch.from_numpy(prefix))  # the whole prefix in one call
        nb = native.batch(batch_size)
        for k in range(context, 0, -1):
            nb.feed_ids(stream[starts - k])
        twin = native.batch(batch_size)
        for i in range(batch_size):
            twin.fork_from(i, nb, i)
        p = op.program
        fixed = (ob.program.tables, p, op.tok_offsets, op.tok_bytes, ob.states)
        res = {k: [] for k in ("op", "op direct", "native step", "feed_ids")}
        for run in range(5):
            ids = [stream[starts + run * steps + s] for s in range(steps)]
            tensors = [torch.from_numpy(np.ascontiguousarray(r)) for r in ids]
            snapshot = ob.states.clone()
            res["op"].append(_timed(ob.step, tensors, batch_size))
            ob.states.copy_(snapshot)  # (the direct run steps the same tokens from the same states)
            res["op direct"].append(
                _timed(lambda t, f=fixed, o=ob.out: torch.ops.heatc.step(*f, t, None, o, 8, 2, 1), tensors, batch_size)
            )
            res["native step"].append(_step_cost(nb, ids, raw=True))
            res["feed_ids"].append(_step_cost(twin, ids, raw=False))
        cells = []
        for v in res.values():
            cells.append(f"{statistics.median(w for w, _ in v):.3f} ({statistics.median(c for _, c in v):.3f})")
        print(f"  {batch_size:5d} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
