"""The C++ core's sources: the generated ABI header is current, and the GPU build of the
core compiles (nvcc, for the architectures the CUDA kernel targets), so the source the
native backend runs never stops compiling for the GPU unseen."""

import shutil
import subprocess

import pytest
from conftest import REPO

from heatc.native_header import HEADER_PATH, native_header

CORE_CHECK = REPO / "cuda_bridge" / "src" / "core_check.cu"
NVCC = shutil.which("nvcc")


def test_generated_header_is_current():
    assert HEADER_PATH.read_text(encoding="utf-8") == native_header(), (
        "cuda_bridge/include/heatc_native_abi.h is stale: run `python -m heatc.native_header`"
    )


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed on this machine")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_core_compiles_for_the_gpu(arch, tmp_path):
    # --fmad=false: the number algorithm must never be fused (docs/semantics.md §2)
    cmd = [NVCC, f"-arch={arch}", "-std=c++17", "--fmad=false", "-Werror", "all-warnings",
           "-I", str(REPO / "cuda_bridge" / "include"), "-c", str(CORE_CHECK), "-o", str(tmp_path / "core.o")]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"nvcc -arch={arch} failed:\n{r.stderr}"
    assert (tmp_path / "core.o").stat().st_size > 0
