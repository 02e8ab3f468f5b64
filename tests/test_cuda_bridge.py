"""The C++ core's sources (its generated ABI header is checked by test_abi.py): the GPU build of the
core and of the batch kernels compiles — with nvcc, and with NVRTC the way a user's machine
compiles it (cuda.core, no GPU needed), cubin cache included — for the architectures the
CUDA kernel targets, so the source the native backend runs never stops compiling for the
GPU unseen."""

import shutil
import struct
import subprocess

import pytest
from support import REPO

CORE_CHECK = REPO / "cuda_bridge" / "src" / "core_check.cu"
KERNELS = REPO / "cuda_bridge" / "kernels" / "heatc_step.cu"
NVCC = shutil.which("nvcc")


@pytest.mark.needs("nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_core_and_kernels_compile_for_the_gpu(arch, tmp_path):
    # --fmad=false: the number algorithm must never be fused (docs/semantics.md §2)
    cmd = [NVCC, f"-arch={arch}", "-std=c++17", "--fmad=false", "-Werror", "all-warnings",
           "-I", str(REPO / "cuda_bridge" / "include"), "-c", str(CORE_CHECK), str(KERNELS),
           "--output-directory", str(tmp_path)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"nvcc -arch={arch} failed:\n{r.stderr}"
    assert (tmp_path / "core_check.o").stat().st_size > 0 and (tmp_path / "heatc_step.o").stat().st_size > 0


def _nvrtc():
    from heatc_runtime.cuda import compile as nvrtc

    return nvrtc


@pytest.fixture(scope="module")
def cubins(tmp_path_factory):
    """The kernels compiled by NVRTC for sm_80 and sm_90 into a fresh cache: {arch: (first, again)}."""
    nvrtc = _nvrtc()
    cache = tmp_path_factory.mktemp("cubin")
    return {arch: (nvrtc.compile_cubin(arch, cache), nvrtc.compile_cubin(arch, cache)) for arch in ("sm_80", "sm_90")}


@pytest.mark.needs("cuda-core")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_the_kernels_and_caches_the_cubin(arch, cubins):
    nvrtc = _nvrtc()
    first, again = cubins[arch]
    assert not first.cached and first.cubin[:4] == b"\x7fELF"
    for name in nvrtc.KERNELS:
        assert name.encode() in first.cubin, f"{name} is not in the cubin"
    assert first.path.name.startswith(arch + "-")
    assert again.cached and again.cubin == first.cubin and again.path == first.path
    if arch == "sm_80":
        # a cache file that is not a cubin (a killed write, a stray file) is compiled again
        first.path.write_bytes(b"garbage")
        redo = nvrtc.compile_cubin(arch, first.path.parent)
        assert not redo.cached and redo.cubin == first.cubin


def _kernel_params(cubin: bytes) -> dict[str, list[int]]:
    """Each kernel's parameter sizes in order, from the cubin's .nv.info.<kernel> sections
    (EIATTR_KPARAM_INFO records: ordinal, offset, size in bits 18-31)."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    strings = sections[shstrndx][4]
    out = {}
    for name, _, _, _, off, size in sections:
        title = cubin[strings + name : cubin.index(b"\0", strings + name)].decode()
        if not title.startswith(".nv.info.") or title == ".nv.info.":
            continue
        blob, i, params = cubin[off : off + size], 0, []
        while i < len(blob):
            fmt, attr = blob[i], blob[i + 1]
            if fmt == 4:  # EIFMT_SVAL: u16 size, then the value
                (n,) = struct.unpack_from("<H", blob, i + 2)
                if attr == 0x17:
                    _, ordinal, offset, bits = struct.unpack_from("<IHHI", blob, i + 4)
                    params.append((ordinal, offset, bits >> 18 & 0x3FFF))
                i += 4 + n
            else:
                i += 2 if fmt == 1 else 4
        out[title.removeprefix(".nv.info.")] = [size for _, _, size in sorted(params)]
    return out


@pytest.mark.needs("cuda-core")
def test_kernel_parameters_match_the_launcher(cubins):
    """The launcher packs each kernel's arguments (heatc_runtime.cuda.driver.SIGNATURES, the
    structs of heatc_runtime.cuda.layout) exactly as the compiled kernels take them."""
    import ctypes

    from heatc_runtime.cuda import layout
    from heatc_runtime.cuda.driver import SIGNATURES

    params = _kernel_params(cubins["sm_90"][0].cubin)
    for name, (n_structs, scalars) in SIGNATURES.items():
        structs = [layout.PROGRAM.size, layout.TOKENS.size][:n_structs]
        assert params[name] == structs + [ctypes.sizeof(t) for t in scalars], name


@pytest.mark.needs("cuda-core")
def test_cubin_cache_key_follows_source_and_arch(monkeypatch):
    nvrtc = _nvrtc()
    key80, key90 = nvrtc.cache_key("sm_80", "13.0"), nvrtc.cache_key("sm_90", "13.0")
    assert key80.split("-")[1] == key90.split("-")[1] and key80 != key90
    assert nvrtc.cache_key("sm_90", "13.1") != key90  # another NVRTC
    real = nvrtc.sources()
    monkeypatch.setattr(nvrtc, "sources", lambda: {**real, "heatc_core.h": real["heatc_core.h"] + "// changed\n"})
    assert nvrtc.cache_key("sm_90", "13.0") != key90
    with pytest.raises(Exception, match="not a CUDA architecture"):
        nvrtc.cache_key("compute_90; rm -rf", "13.0")
