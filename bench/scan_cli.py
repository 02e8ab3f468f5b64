"""What `heatc scan` costs as a user runs it: the command itself, start-up, scan, report and
output, on a large file. `python bench/scan_cli.py`

For each rule set (the hand-written `examples/medical.heat`, compiled and cached by the
command, and a build of the learned `heatmaps/medical.yaml`) and each output (the table,
`--json`), it times the installed `heatc` console script on a 32 MB file of MTSamples notes
from ../shared/data and on a one-line file, alternating the two, several rounds, and reports
the medians: start-up (the one-line file) and MB/s beyond start-up, 32 MB / (t(32 MB) −
t(one line)). Target: at least 100 MB/s. The runtime's own scan of the same text (no
command, no report) is timed in this process beside it.

`--baseline DIR` times another checkout's code (say the main branch's) in the same run, its
rows beside this tree's: before and after a change, on one machine under one load. MB/s
beyond start-up is given at p50 and p99 over the rounds (each round's large run less its
one-line run; p99 is the slow end). Every command runs with its bytecode cached (written by
the first, untimed run), as an installed heatc's is.

On a shared machine compare figures of one run only: the rounds alternate so that load
changes touch every figure alike.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
HEATC = str(Path(sys.executable).parent / "heatc")  # the console script installed beside this Python
TARGET_MB_S = 100.0


def notes(size: int) -> bytes:
    """MTSamples transcriptions, each once, repeated to `size` bytes (cut at a line end)."""
    seen: set[str] = set()
    texts = []
    with gzip.open(DATA / "medical/text/mtsamples_all4999.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            t = json.loads(line).get("transcription") or ""
            if t and t not in seen:
                seen.add(t)
                texts.append(t)
    body = "\n\n".join(texts).encode() + b"\n\n"
    data = body * (size // len(body) + 1)
    return data[: data.rfind(b"\n", 0, size) + 1]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of one command; the output goes where a user's pipe would take it."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if done.returncode not in (0, 3):
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return wall, cpu


def percentile(xs: list[float], q: float) -> float:
    """The q-th percentile of xs (linear between the nearest ranks)."""
    xs = sorted(xs)
    at = (len(xs) - 1) * q / 100
    lo = int(at)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (at - lo)


def tree_env(tree: Path, cache: Path) -> dict:
    """The environment that runs `tree`'s heatc (its packages first on the path) with a
    compile cache of its own, bytecode written."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "runtime")])
    env["HEATC_CACHE"] = str(cache)
    return env


def runtime_scan(rules: Path, data: bytes, rounds: int) -> float:
    """The runtime alone: load, then the median seconds of `scan()` with its events read."""
    import heatc_runtime as rt

    checker = rt.load(rules, limits=rt.Limits.trusted())
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        checker.scan(data).events  # noqa: B018  (decoding the events is part of what a scan costs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=32, help="size of the large file, MB (default 32)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; each times every case once (default 5)")
    ap.add_argument("--baseline", type=Path, help="another checkout, timed in the same run (before / after)")
    ap.add_argument("--only", choices=["learned", "rules"], help="one rule set only (default both)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="heatc-scan-cli-"))
    trees = {"": REPO} if args.baseline is None else {"this tree": REPO, "baseline": args.baseline.resolve()}
    envs = {label: tree_env(tree, work / f"cache-{i}") for i, (label, tree) in enumerate(trees.items())}
    env = envs[next(iter(trees))]
    big, tiny = work / "notes.txt", work / "one_line.txt"
    big.write_bytes(notes(args.mb << 20))
    tiny.write_bytes(b"Pulse 88.\n")
    size_mb = big.stat().st_size / 1e6
    paths: dict[str, dict[str, Path]] = {}  # tree → rule set → what its heatc scans
    for i, (label, tree) in enumerate(trees.items()):  # (each tree builds its own: their ABIs may differ)
        subprocess.run([HEATC, "build", str(tree / "heatmaps/medical.yaml"), "-o", str(work / f"build-{i}")],
                       check=True, stdout=subprocess.DEVNULL, env=envs[label])  # fmt: skip
        paths[label] = {
            "examples/medical.heat": tree / "examples/medical.heat",
            "heatmaps/medical.yaml (built)": work / f"build-{i}/medical",
        }
    rule_sets = paths[next(iter(trees))]
    if args.only:
        rule_sets = {k: v for k, v in rule_sets.items() if (args.only == "learned") == k.startswith("heatmaps")}
    cases = [(label, name, out) for label in trees for name in rule_sets for out in ("table", "--json")]
    for label, name, _ in cases:  # (the first run compiles a rule file and the bytecode: not timed)
        run([HEATC, "scan", str(paths[label][name]), str(tiny)], envs[label])
    times: dict[tuple, list[tuple[float, float]]] = {(c, f): [] for c in cases for f in (tiny, big)}
    for _ in range(args.rounds):
        for label, name, out in cases:
            for f in (tiny, big):
                argv = [HEATC, "scan", str(paths[label][name]), str(f), *([out] if out != "table" else [])]
                times[(label, name, out), f].append(run(argv, envs[label]))
    print(f"heatc scan, {size_mb:.1f} MB of MTSamples notes; {args.rounds} rounds; load {os.getloadavg()[0]:.1f}")
    # (wall time on an idle machine; CPU time, which another job's load moves less, beside it)
    print(f"{'tree':10} {'rules':30} {'output':7} {'start-up s':>10} {'large s':>8} "
          f"{'MB/s beyond start-up p50':>25} {'p99':>5} {'(by CPU s)':>10}")  # fmt: skip
    ok = True
    for case in cases:
        label, name, out = case
        small, large = times[case, tiny], times[case, big]
        t0, t1 = (statistics.median(w for w, _ in x) for x in (small, large))
        c0, c1 = (statistics.median(c for _, c in x) for x in (small, large))
        beyond = [w1 - w0 for (w0, _), (w1, _) in zip(small, large, strict=True)]  # (one round's pair)
        p50, p99 = (size_mb / max(percentile(beyond, q), 1e-9) for q in (50, 99))
        cpu_rate = size_mb / max(c1 - c0, 1e-9)
        ok &= p50 >= TARGET_MB_S or label == "baseline"
        print(f"{label:10} {name:30} {out:7} {t0:10.2f} {t1:8.2f} {p50:25.0f} {p99:5.0f} {cpu_rate:10.0f}")
    for name in rule_sets:
        built = rule_sets[name] if rule_sets[name].is_dir() else None
        if built is None:
            from heatc.heatmap.build_cache import cached_build

            os.environ["HEATC_CACHE"] = env["HEATC_CACHE"]
            built = cached_build(rule_sets[name])
        s = runtime_scan(built, big.read_bytes(), args.rounds)
        print(f"runtime scan alone, {name}: {size_mb / s:.0f} MB/s (events read)")
    print(f"target: {TARGET_MB_S:g} MB/s beyond start-up (wall, p50): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
