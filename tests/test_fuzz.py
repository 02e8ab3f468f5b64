"""The DSL and heatmap fuzz target (tests/fuzz.py): mutants of the shipped rule files and
heatmaps, each checked as `heatc check` checks a file — a precise error or a checked
program, never a traceback, never a mutant over 10 s, the process under 1 GB.

CI runs `HEATC_FUZZ_MUTANTS` (default 240) mutants from `HEATC_FUZZ_SEED` (default 16);
the long profile is in docs/testing.md.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import fuzz

HERE = Path(__file__).parent


def test_mutants_of_the_shipped_files_get_precise_errors():
    n = int(os.environ.get("HEATC_FUZZ_MUTANTS", "240"))
    seed = os.environ.get("HEATC_FUZZ_SEED", "16")
    r = subprocess.run(
        [sys.executable, str(HERE / "fuzz.py"), seed, str(n)], capture_output=True, text=True, timeout=max(600, n)
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout)
    assert result["error"] + result["ok"] + len(result["failures"]) == n
    for f in result["failures"][:5]:
        print(f"{f['kind']} on a mutant of {f['file']} ({', '.join(f['mutations'])}):\n{f.get('detail', '')}")
    assert result["failures"] == [], f"{len(result['failures'])} of {n} mutants failed (printed above)"
    assert result["error"] > n // 2 and result["ok"] > 0  # (the mutations reach both outcomes)
    assert result["slowest"][0] < fuzz.HANG_S and result["peak_rss"] < fuzz.MEMORY_LIMIT
