"""The native backend's C++ core (cuda_bridge/), built as heatc_runtime._native at install
time. Everything else about the package is in pyproject.toml.

The extension is optional: without a C++ compiler (or Python's headers) the install still
succeeds, and `heatc_runtime.load(..., backend="native")` says how to get it.
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# Float64 values must come out bit for bit as the specification computes them: no fused
# multiply-add (-ffp-contract=off) and no fast-math; the core uses no exceptions or RTTI.
UNIX_FLAGS = ["-std=c++17", "-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-exceptions", "-fno-rtti"]


class BuildExt(build_ext):
    def build_extensions(self):
        for ext in self.extensions:
            ext.extra_compile_args = ["/O2", "/fp:strict"] if self.compiler.compiler_type == "msvc" else UNIX_FLAGS
        super().build_extensions()


class BuildPy(build_py):
    """Ship the CUDA kernels' sources with heatc_runtime (NVRTC compiles them at run time;
    heatc_runtime.cuda.compile reads a checkout's cuda_bridge/ first, this copy otherwise)."""

    def run(self):
        super().run()
        for part, pattern in (("include", "*.h"), ("kernels", "*.cu")):
            target = Path(self.build_lib) / "heatc_runtime" / "cuda" / "src" / part
            target.mkdir(parents=True, exist_ok=True)
            for f in Path("cuda_bridge", part).glob(pattern):
                shutil.copy2(f, target / f.name)


setup(
    ext_modules=[
        Extension(
            "heatc_runtime._native",
            sources=["cuda_bridge/src/heatc_native.cpp"],
            include_dirs=["cuda_bridge/include"],
            depends=[
                "cuda_bridge/include/heatc_core.h",
                "cuda_bridge/include/heatc_kernels.h",
                "cuda_bridge/include/heatc_abi.h",
                "cuda_bridge/src/heatc_skipper.h",
                "cuda_bridge/src/heatc_skipper_isa.h",
                "cuda_bridge/src/heatc_topk.h",
                "cuda_bridge/src/heatc_audit_json.h",
            ],
            language="c++",
            optional=True,
        )
    ],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
