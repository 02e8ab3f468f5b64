"""The CUDA backend (docs/cuda.md): the C++ core as batch kernels compiled by NVRTC, the torch
ops heatc::step / text / guard (CPU kernel: the native core), and the tier placement of
rules.hct's tables (L2 window, device memory, pinned mapped host memory).

Modules: `layout` (the ops' records), `tiers` (the tier split), `compile` (NVRTC, cubin
cache), `driver` (cuda.bindings calls), `ops` (the torch ops; needs torch), `program`
(`load(build, device)` → `OpProgram`, `OpBatch`; needs torch).

Public surface: the modules above.
"""
