"""What Prometheus metrics cost per decoding step (docs/metrics.md): the same token stream
stepped through a batch of a checker with metrics attached and of one without, in
alternating rounds (A B A B …, so that a machine's drift hits both), medians reported.

    python bench/metrics_overhead.py [--rules examples/legal.heat] [--rounds 15] [--steps 2000] [--sample-every 64]

Target: the metrics-on step within 5 % of the metrics-off step. `--sample-every 1` measures
what timing every step would cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "runtime")]


def stepper(checker, pieces: list[bytes], n: int):
    import numpy as np

    table = sorted(set(pieces))
    index = {p: i for i, p in enumerate(table)}
    checker.set_token_table(table)
    batch = checker.batch(n)
    ids = [[index[p]] if n == 1 else np.full(n, index[p], np.uint32) for p in pieces]

    def run(steps: int) -> float:
        """Seconds per step over `steps` steps (the stream restarts when it runs out)."""
        batch.reset()
        feed = batch.feed_ids
        k = 0
        t0 = time.perf_counter()
        for _ in range(steps):
            feed(ids[k])
            k += 1
            if k == len(ids):
                k = 0
                batch.reset()
        return (time.perf_counter() - t0) / steps

    return run


def main() -> int:
    from prometheus_client import CollectorRegistry

    from heatc.lang.compiler import compile_file
    from heatc.verify.backends import native_checker, wasm_checker
    from heatc_runtime.metrics import Metrics

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", type=Path, default=REPO / "examples" / "legal.heat")
    parser.add_argument("--text", type=Path, default=REPO / "examples" / "texts" / "service_agreement_en.txt")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--sample-every", type=int, default=None, help="Metrics(sample_every=…); default: its default")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    program = compile_file(args.rules)
    text = args.text.read_bytes()
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]  # ~4 bytes a token, as BPE vocabularies give
    rows = []
    for backend, make in (("wasm", wasm_checker), ("native", native_checker)):
        for n in (1, 32):
            off = stepper(make(program).clone(), pieces, n)
            on_checker = make(program).clone()
            sampling = {} if args.sample_every is None else {"sample_every": args.sample_every}
            Metrics(CollectorRegistry(), **sampling).attach(on_checker)
            on = stepper(on_checker, pieces, n)
            off(args.steps), on(args.steps)  # warm up
            t_off, t_on = [], []
            for _ in range(args.rounds):
                t_off.append(off(args.steps))
                t_on.append(on(args.steps))
            ratios = [b / a for a, b in zip(t_off, t_on, strict=True)]
            row = {
                "backend": backend, "batch": n, "off_us": round(statistics.median(t_off) * 1e6, 2),
                "on_us": round(statistics.median(t_on) * 1e6, 2),
                "overhead_pct": round((statistics.median(ratios) - 1) * 100, 1),
            }  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
