"""The CUDA kernels compiled at run time with NVRTC (cuda-python's `cuda.core`), so that a user
needs no CUDA toolkit: `pip install heatc[cuda]` brings NVRTC (`nvidia-cuda-nvrtc`).

The source is cuda_bridge/kernels/heatc_step.cu and the headers it includes (the same core
the native backend runs). A cubin is cached on disk by the sha256 of the sources, the
compile options, NVRTC's version and the architecture, under `$HEATC_CACHE_DIR` or
`~/.cache/heatc/cubin`; a cache file is written atomically and checked when read (an ELF
file of the right name), so a killed compile or a stray file only costs a compile.

Public surface: `KERNELS`, `SOURCE_FILES`, `sources()`, `cache_dir()`, `cache_key(arch)`,
`compile_cubin(arch, cache=None) -> Compiled`, `Compiled`, `nvrtc_version()`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModuleError

#: The kernels' entry points (extern "C" in heatc_step.cu).
KERNELS = ("heatc_step", "heatc_text", "heatc_guard", "heatc_mark")
KERNEL_FILE = "heatc_step.cu"
HEADERS = ("heatc_kernels.h", "heatc_core.h", "heatc_abi.h")
SOURCE_FILES = (KERNEL_FILE, *HEADERS)
#: NVRTC options. --fmad=false: float64 values must never be fused (docs/semantics.md §2).
OPTIONS = ("--std=c++17", "--fmad=false")


def _source_dirs() -> tuple[Path, Path]:
    """(kernels, include): a checkout's cuda_bridge/, else the copy installed with the package."""
    here = Path(__file__).resolve().parent
    for root in (here.parents[2] / "cuda_bridge", here / "src"):
        if (root / "kernels" / KERNEL_FILE).exists() and (root / "include" / "heatc_core.h").exists():
            return root / "kernels", root / "include"
    raise ModuleError(
        "the CUDA kernel sources are missing (cuda_bridge/kernels and cuda_bridge/include in a checkout, "
        "heatc_runtime/cuda/src in an installed package): reinstall heatc"
    )


def sources() -> dict[str, str]:
    """The kernel source and its headers, by file name."""
    kernels, include = _source_dirs()
    out = {KERNEL_FILE: (kernels / KERNEL_FILE).read_text(encoding="utf-8")}
    for name in HEADERS:
        out[name] = (include / name).read_text(encoding="utf-8")
    return out


def _cuda_core():
    try:
        try:
            from cuda.core import Program, ProgramOptions
        except ImportError:  # cuda-core before 0.5 has them only here (deprecated since)
            from cuda.core.experimental import Program, ProgramOptions
    except ImportError as e:
        raise ModuleError(
            f"the CUDA backend needs cuda-python's cuda.core and NVRTC ({e}): pip install 'heatc[cuda]'"
        ) from None
    return Program, ProgramOptions


def nvrtc_version() -> str:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        from cuda import nvrtc  # (cuda-python before cuda-bindings 12.6)
    err, major, minor = nvrtc.nvrtcVersion()
    if int(err) != 0:
        raise ModuleError(f"NVRTC could not be loaded: {err}")
    return f"{major}.{minor}"


def cache_dir() -> Path:
    base = os.environ.get("HEATC_CACHE_DIR")
    return Path(base) / "cubin" if base else Path.home() / ".cache" / "heatc" / "cubin"


def _check_arch(arch: str) -> str:
    if not (arch.startswith("sm_") and arch[3:].rstrip("a").isdigit()):
        raise ModuleError(f"not a CUDA architecture: {arch!r} (expected e.g. sm_80, sm_90)")
    return arch


def cache_key(arch: str, version: str | None = None) -> str:
    h = hashlib.sha256()
    for name, text in sorted(sources().items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    h.update(" ".join(OPTIONS).encode() + b"\0" + (version or nvrtc_version()).encode())
    return f"{_check_arch(arch)}-{h.hexdigest()[:32]}"


@dataclass(frozen=True)
class Compiled:
    cubin: bytes
    path: Path
    cached: bool  # read from the cache, not compiled now


def compile_cubin(arch: str, cache: Path | None = None) -> Compiled:
    """The kernels' cubin for `arch` (sm_80, sm_90, …): from the cache, else compiled with
    NVRTC (no GPU needed) and cached."""
    directory = cache or cache_dir()
    path = directory / f"{cache_key(arch)}.cubin"
    try:
        data = path.read_bytes()
        if data[:4] == b"\x7fELF":
            return Compiled(data, path, True)
    except OSError:
        pass
    program_cls, options_cls = _cuda_core()
    _, include = _source_dirs()
    opts = options_cls(arch=arch, std="c++17", fma=False, include_path=[str(include)])
    try:
        program = program_cls(sources()[KERNEL_FILE], "c++", options=opts)
        cubin = bytes(program.compile("cubin").code)
    except Exception as e:  # NVRTC's compile log, or a missing libnvrtc
        raise ModuleError(f"NVRTC could not compile {KERNEL_FILE} for {arch}: {str(e).strip()[:4000]}") from None
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".cubin-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Compiled(cubin, path, False)
