"""Build time of generated heatmaps: 1,000 and 10,000 rules (targets: ≤ 2 s and ≤ 20 s),
and how it grows. `python bench/build_time.py` (part of `make bench`).

The heatmaps are generated: N categories of keywords (two literals each, English and
Chinese), 20 units, and one range cell per keyword (with a unit for every other one), the
shape a learned heatmap has. The build is everything `heatc build` does: validate and lower
the heatmap, compile, build the lexer automaton, pack, generate and assemble the WASM, write
the token table (bytes), the CUDA tables and the manifest.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import itertools

from heatc.heatmap.build import build

WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()


def heatmap(n_rules: int) -> str:
    lines = [
        "heatmap: 1", f"name: gen{n_rules}", "tokenizer: {bytes: true}", "options: {chinese_numbers: true}",
        "thresholds: {sensitivity: 0.5}", "categories:", '  period: {kind: punct, literals: [".", "。"]}',
    ]  # fmt: skip
    for u in range(20):
        lines.append(f"  unit{u}: {{kind: unit, literals: [u{u}x, 单位{u}]}}")
    for k in range(n_rules):
        a, b = WORDS[k % len(WORDS)], WORDS[(k // len(WORDS)) % len(WORDS)]
        lines.append(f"  kw{k}: {{kind: keyword, literals: [{a}{b}{k}, 关键词{k}]}}")
    lines += ["triggers: {at: [period], barrier: [period]}", "cells:"]
    for k in range(n_rules):
        unit = f", unit: unit{k % 20}" if k % 2 else ""
        lines.append(f"  - {{pair: [kw{k}, number]{unit}, score: {0.5 + (k % 50) / 100}, support: {k % 97 + 1}, "
                     f"stats: {{q01: {k % 13 + 1}, q99: {k % 13 + 100}}}}}")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[100, 1000, 10000], help="rules per generated heatmap")
    parser.add_argument(
        "--markdown", type=Path, help="also rewrite the build-time table of this page (docs/performance.md)"
    )
    args = parser.parse_args()
    print(
        f"heatc build time — {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    sizes = args.sizes
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"gen{n}.yaml"
            path.write_text(heatmap(n))
            t = time.perf_counter()
            result = build(path, Path(tmp) / "out")
            times[n] = time.perf_counter() - t
            size = result.manifest["build"]["artifacts"]["module.wasm"]["size"]
            print(
                f"  {n:>6} rules: {times[n]:6.2f} s  (module {size / 1e6:.2f} MB, lexer {result.program.lexer.n_states} states)"
            )
    for small, large in itertools.pairwise(sizes):
        print(
            f"  growth {small} -> {large} rules: x{times[large] / times[small]:.1f} time for x{large / small:.0f} rules"
        )
    targets = {1000: 2.0, 10000: 20.0}
    for n, limit in targets.items():
        if n in times:
            print(f"  target {n} rules <= {limit:g} s: {'met' if times[n] <= limit else 'NOT met'} ({times[n]:.2f} s)")
    if args.markdown:
        import report  # bench/report.py, beside this script
        from run import machine  # bench/run.py: CPU model, cores, versions

        report.update(args.markdown, {"build": report.build_section(times, machine())})
        print(f"{args.markdown}: build-time table rewritten")


if __name__ == "__main__":
    main()
