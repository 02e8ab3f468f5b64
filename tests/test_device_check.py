"""The device check's dry run: cuda_bridge/device_data.py makes a small data set (a few corpus
cases and generated rule sets, the benchmark programs) with the reference interpreter, and
cuda_bridge/device_check.py --device cpu runs every part that needs no GPU on it, on the ops'
CPU kernel — the files, the wrappers and the comparisons the GPU run will make."""

import json
import subprocess
import sys

import pytest
from support import REPO, SHARED_DATA

pytestmark = pytest.mark.needs("torch", "native")


@pytest.mark.skipif(not SHARED_DATA.exists(), reason=f"{SHARED_DATA} (the benchmark texts) is missing")
def test_device_check_dry_run(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    made = subprocess.run(
        [sys.executable, str(REPO / "cuda_bridge" / "device_data.py"), "-o", str(data), "--conformance", "6",
         "--generated", "4", "--skip-10k"], capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    r = subprocess.run(
        [sys.executable, str(REPO / "cuda_bridge" / "device_check.py"), "--device", "cpu", "--data", str(data),
         "--out", str(out), "--budget", "600"], capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    parts = json.loads((out / "device_check.json").read_text())["parts"]
    assert "error" not in json.dumps(parts), json.dumps(parts)[:3000]
    diff = parts["differential"]
    assert diff["ok"] and diff["complete"] and diff["programs"] == 10 and diff["guard_probes"] == 8, diff
    assert {r["batch"] for r in parts["timing"]["rows"] if "batch" in r and "cpu_op_us_per_step" in r} == {1, 64}
    assert parts["checks"]["opcheck_step"] == "passed" and parts["checks"]["bad_token"].startswith("refused")
    assert "skipped" in parts["tiers10k"] and "skipped" in parts["graph"]
    engine = parts["engine"]  # (the engines' decode loop on the ops, the model's 49,152 tokens)
    assert engine["vocabulary"] == 49152 and engine["reports"]["rows"] == 64, engine
    assert [r["batch"] for r in engine["rows"] if r.get("eager_step_us", 0) > 0] == [1, 64, 256], engine
    assert "skipped" in engine["graph"] and engine["no_sync"].startswith("skipped"), engine
