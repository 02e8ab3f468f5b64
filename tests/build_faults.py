"""Builds killed at random points and builds racing into one target, run in a process of
their own (forking the test runner, with its threads, would not be safe): `python
tests/build_faults.py kill|race HEATMAP OUT SEED N` prints one JSON object.

After every kill and every race the target must be a complete build — the old one or a new
one, loading and scanning as built — never a half build, a dangling link or a traceback.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import traceback
from pathlib import Path

import heatc_runtime as rt
from heatc.errors import HeatError
from heatc.heatmap.build import build

PROBE = "glucose 5000 mg/dL."


def variant(heatmap: Path, out: Path, k: int) -> Path:
    """The heatmap with its first cell's score changed: a build of other content."""
    path = out.parent / f"variant-{k}.yaml"
    path.write_text(heatmap.read_text().replace("score: 0.9,", f"score: 0.{900 + k},"))
    return path


def state(out: Path, name: str) -> dict:
    """What the target holds: the build the link points to, whether it loads, what is left."""
    link = out / name
    info: dict = {"entries": sorted(p.name for p in out.iterdir())}
    if not link.is_symlink():
        info["link"] = None
        return info
    info["link"] = os.readlink(link)
    try:
        checker = rt.load(link, rt.Limits.trusted())  # (no deadline: no engine thread before the next fork)
        info["rejected"] = checker.scan(PROBE).rejected
        info["heat"] = json.loads((link / "manifest.json").read_text())["build"]["rules"][0]["heat"]
        checker.close()
    except Exception as e:
        info["error"] = f"{type(e).__name__}: {e}"
    return info


def child(heatmap: Path, out: Path) -> None:
    """A forked build: exit 0 on success, 1 with a clear refusal, 2 on anything else."""
    try:
        build(heatmap, out)
        code = 0
    except HeatError:
        code = 1
    except BaseException:
        traceback.print_exc()
        code = 2
    os._exit(code)


def kill(heatmap: Path, out: Path, seed: int, n: int) -> dict:
    rng = random.Random(seed)
    first = build(heatmap, out)
    started = time.monotonic()
    build(variant(heatmap, out, 0), out.parent / "timing")
    duration = time.monotonic() - started
    targets = {first.target.name: first.manifest["build"]["rules"][0]["heat"]}
    runs = []
    for k in range(1, n + 1):
        source = variant(heatmap, out, k)
        pid = os.fork()
        if pid == 0:
            child(source, out)
        delay = rng.uniform(0, duration * 1.2)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        targets[f"variant-{k}"] = float(f"0.{900 + k}")
        runs.append({"delay": round(delay, 3), "status": status, **state(out, first.directory.name)})
    last = build(heatmap, out)  # a later build cleans up after the killed ones
    return {"duration": duration, "runs": runs, "after": state(out, last.directory.name), "final": last.target.name}


def race(heatmap: Path, out: Path, seed: int, n: int) -> dict:
    """`n` rounds: four builds of different content at once, then four of the same."""
    rounds = []
    name = build(heatmap, out).directory.name
    for r in range(n):
        for same in (False, True):
            sources = [variant(heatmap, out, 1 if same else 10 * r + k + 1) for k in range(4)]
            pids = []
            for source in sources:
                pid = os.fork()
                if pid == 0:
                    child(source, out)
                pids.append(pid)
            codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
            rounds.append({"same": same, "codes": codes, **state(out, name)})
    return {"rounds": rounds}


if __name__ == "__main__":
    mode, heatmap, out, seed, n = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    print(json.dumps((kill if mode == "kill" else race)(heatmap, out, seed, n)))
