"""The CUDA backend: the core as a batch kernel (NVRTC), torch ops, L2 tiers (docs/cuda.md)."""
