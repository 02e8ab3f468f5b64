"""What the tests share: paths, a cached rule compiler and wasm-validate here; the generators,
oracles, harnesses and fixtures' makers in the modules beside this one. Test modules import
from this package, never from each other or from conftest.py (tests/test_layout.py checks)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# (beside the checkout; HEATC_SHARED_DATA names it for a checkout elsewhere, a git worktree say)
SHARED_DATA = Path(os.environ.get("HEATC_SHARED_DATA") or REPO.parent / "shared" / "data")
EXAMPLES = REPO / "examples"
WASM_VALIDATE = shutil.which("wasm-validate")


@functools.lru_cache(maxsize=512)
def compile_cached(source: str):
    from heatc.lang.compiler import compile_source

    return compile_source(source, "generated.heat")


def wasm_validate(path) -> subprocess.CompletedProcess:
    """wasm-validate with the features a module of this ABI may use (docs/abi.md)."""
    return subprocess.run([WASM_VALIDATE or "wasm-validate", "--enable-relaxed-simd", str(path)],
                          capture_output=True, text=True)  # fmt: skip
