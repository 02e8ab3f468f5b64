"""The CUDA driver calls of the CUDA backend, through cuda-python's `cuda.bindings` (and
`cuda.core` for the device and its context): the kernels' module loaded on a device,
launches on a caller's stream (optionally with an L2 access policy window as a launch
attribute), pinned mapped host memory, pointer and device attributes, the persisting-L2
limit.

A launch packs its arguments into memory made once per kernel and calls cuLaunchKernel (or
cuLaunchKernelEx with the window): no allocation, no synchronisation and no configuration
call, so launches can be captured in a CUDA graph.

Public surface: `CudaError`, `check(result, what)`, `device_attrs(index)`, `Kernels`,
`kernels_for(index)`, `HostBuffer`, `memory_type(ptr)`, `set_persisting_l2(bytes)`,
`persisting_l2_limit()`, `reset_persisting_l2()`.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

from ..errors import ModuleError
from .compile import KERNELS, compile_cubin
from .layout import BLOCK


class CudaError(ModuleError):
    """A CUDA driver call failed (the message names the call and the driver's error)."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # (cuda-python before cuda-bindings 12.6)
        except ImportError as e:
            raise ModuleError(
                f"the CUDA backend needs cuda-python's cuda.bindings ({e}): pip install 'heatc[cuda]'"
            ) from None
    return driver


def check(result, what: str):
    """The values of a cuda.bindings call after its error code; CudaError if it failed."""
    drv = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        _, text = drv.cuGetErrorString(err)
        raise CudaError(f"{what} failed: {getattr(err, 'name', err)} ({text.decode() if text else '?'})")
    return values[0] if len(values) == 1 else tuple(values)


def _set_current(index: int) -> None:
    # The primary context torch uses too (cuda.core's Device retains and makes it current).
    try:
        from cuda.core import Device
    except ImportError:
        from cuda.core.experimental import Device
    Device(index).set_current()


@dataclass(frozen=True)
class DeviceAttrs:
    index: int
    name: str
    arch: str  # sm_XY
    l2_bytes: int
    persisting_max: int  # persistingL2CacheMaxSize (0: no persisting L2 here)
    window_max: int  # accessPolicyMaxWindowSize
    unified_addressing: bool
    can_map_host: bool


def device_attrs(index: int) -> DeviceAttrs:
    drv = _driver()
    _set_current(index)
    dev = check(drv.cuDeviceGet(index), "cuDeviceGet")
    a = drv.CUdevice_attribute

    def attr(name: str) -> int:
        return int(check(drv.cuDeviceGetAttribute(getattr(a, name), dev), f"cuDeviceGetAttribute({name})"))

    major = attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
    minor = attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
    name = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    return DeviceAttrs(
        index, bytes(name).split(b"\0")[0].decode(errors="replace"), f"sm_{major}{minor}",
        attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"), attr("CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE"),
        attr("CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE"), bool(attr("CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING")),
        bool(attr("CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY")),
    )  # fmt: skip


#: Each kernel's parameters after its by-value structs, as ctypes (heatc_step.cu's order).
_U64, _U32 = ctypes.c_uint64, ctypes.c_uint32
SIGNATURES = {
    # Program, Tokens, states, ids, lengths, n, t_max, out, ev_keep, snap_keep, lanes, tails
    "heatc_step": (2, (_U64, _U64, _U64, _U32, _U32, _U64, _U32, _U32, _U32, _U64)),
    # Program, states, text, text_len, offsets, n, out, ev_keep, snap_keep, mode, lanes
    "heatc_text": (1, (_U64, _U64, _U64, _U64, _U32, _U64, _U32, _U32, _U32, _U32)),
    # Program, Tokens, states, tails, cand, n, k, scratch, mask, look, lanes
    "heatc_guard": (2, (_U64, _U64, _U64, _U32, _U32, _U64, _U64, _U32, _U32)),
}
assert set(SIGNATURES) == set(KERNELS)


class _Launch:
    """One kernel's argument memory, made once and refilled per launch."""

    def __init__(self, function, n_structs: int, scalars: tuple):
        self.function = function
        self.structs = [ctypes.create_string_buffer(512) for _ in range(n_structs)]
        self.scalars = [t() for t in scalars]
        slots = [*self.structs, *self.scalars]
        self.pointers = (ctypes.c_void_p * len(slots))(*(ctypes.addressof(s) for s in slots))
        self.address = ctypes.addressof(self.pointers)


class Kernels:
    """The kernels' module loaded on one device (compiled, or read from the cubin cache)."""

    def __init__(self, index: int):
        drv = _driver()
        self.attrs = device_attrs(index)
        self.compiled = compile_cubin(self.attrs.arch)
        self.module = check(drv.cuModuleLoadData(self.compiled.cubin), "cuModuleLoadData")
        self._lock = threading.Lock()
        self._launch = {}
        for name, (n_structs, scalars) in SIGNATURES.items():
            function = check(drv.cuModuleGetFunction(self.module, name.encode()), f"cuModuleGetFunction({name})")
            self._launch[name] = _Launch(function, n_structs, scalars)
        self._config = None
        self._resident: dict[str, int] = {}

    def resident_warps(self, name: str) -> int:
        """How many warps of kernel `name` the whole device holds at once (its occupancy at
        BLOCK threads a block, times the SMs)."""
        if name not in self._resident:
            drv = _driver()
            blocks = check(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(self._launch[name].function, BLOCK, 0),
                           "cuOccupancyMaxActiveBlocksPerMultiprocessor")  # fmt: skip
            dev = check(drv.cuDeviceGet(self.attrs.index), "cuDeviceGet")
            sms = check(drv.cuDeviceGetAttribute(drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
                        "cuDeviceGetAttribute(SMs)")  # fmt: skip
            self._resident[name] = max(1, int(blocks) * (BLOCK // 32) * int(sms))
        return self._resident[name]

    def default_lanes(self, name: str, n: int) -> int:
        """Lanes per sequence for `n` sequences: a warp each while the batch fits in one wave
        of resident warps, fewer as it grows (docs/cuda.md, "Thread or warp per sequence")."""
        lanes, resident = 32, self.resident_warps(name)
        while lanes > 1 and n * lanes > 32 * resident:
            lanes //= 2
        return lanes

    def launch(self, name: str, threads: int, stream: int, structs: tuple[bytes, ...], scalars: tuple[int, ...],
               window: tuple[int, int, float] | None = None) -> None:  # fmt: skip
        """Launch `name` over `threads` threads on the stream with handle `stream`; with
        `window` (base, bytes, hit ratio) under that L2 access policy window."""
        if threads <= 0:
            return
        drv = _driver()
        grid = -(-threads // BLOCK)
        with self._lock:  # (the argument memory is shared; the driver copies it at launch)
            k = self._launch[name]
            for buf, data in zip(k.structs, structs, strict=True):
                ctypes.memmove(buf, data, len(data))
            for slot, value in zip(k.scalars, scalars, strict=True):
                slot.value = value
            if window is None:
                check(drv.cuLaunchKernel(k.function, grid, 1, 1, BLOCK, 1, 1, 0, drv.CUstream(stream), k.address, 0),
                      f"cuLaunchKernel({name})")  # fmt: skip
                return
            config = self._window_config(*window)
            config.gridDimX, config.blockDimX = grid, BLOCK
            config.hStream = drv.CUstream(stream)
            check(drv.cuLaunchKernelEx(config, k.function, k.address, 0), f"cuLaunchKernelEx({name})")

    def _window_config(self, base: int, num_bytes: int, hit_ratio: float):
        drv = _driver()
        key = (base, num_bytes, hit_ratio)
        if self._config is None or self._config[0] != key:
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW
            w = attr.value.accessPolicyWindow
            w.base_ptr = base
            w.num_bytes = num_bytes
            w.hitRatio = hit_ratio
            w.hitProp = drv.CUaccessProperty.CU_ACCESS_PROPERTY_PERSISTING
            w.missProp = drv.CUaccessProperty.CU_ACCESS_PROPERTY_STREAMING
            config = drv.CUlaunchConfig()
            config.gridDimY = config.gridDimZ = config.blockDimY = config.blockDimZ = 1
            config.sharedMemBytes = 0
            config.attrs = [attr]
            config.numAttrs = 1
            self._config = (key, config)
        return self._config[1]


_KERNELS: dict[int, Kernels] = {}
_KERNELS_LOCK = threading.Lock()


def kernels_for(index: int) -> Kernels:
    """The kernels loaded on device `index` (compiled or read from the cache on first use)."""
    with _KERNELS_LOCK:
        if index not in _KERNELS:
            _KERNELS[index] = Kernels(index)
        return _KERNELS[index]


class HostBuffer:
    """Pinned host memory mapped into the device's address space (cuMemHostAlloc with
    DEVICEMAP | PORTABLE; not managed memory). `device_ptr` is where kernels read it."""

    def __init__(self, data: bytes):
        if not data:
            raise ValueError("a host buffer needs at least one byte")
        drv = _driver()
        self.size = len(data)
        flags = drv.CU_MEMHOSTALLOC_DEVICEMAP | drv.CU_MEMHOSTALLOC_PORTABLE
        self.ptr = int(check(drv.cuMemHostAlloc(self.size, flags), "cuMemHostAlloc"))
        ctypes.memmove(self.ptr, data, len(data))
        self.device_ptr = int(check(drv.cuMemHostGetDevicePointer(self.ptr, 0), "cuMemHostGetDevicePointer"))

    def array(self):
        return (ctypes.c_uint8 * self.size).from_address(self.ptr)

    def free(self) -> None:
        if self.ptr:
            check(_driver().cuMemFreeHost(self.ptr), "cuMemFreeHost")
            self.ptr = 0


def memory_type(ptr: int) -> tuple[str, bool]:
    """(where the memory at `ptr` is: 'device', 'host', …; whether it is managed memory)."""
    drv = _driver()
    p = drv.CUpointer_attribute
    kind = check(drv.cuPointerGetAttribute(p.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr), "cuPointerGetAttribute")
    managed = check(drv.cuPointerGetAttribute(p.CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr), "cuPointerGetAttribute")
    name = getattr(drv.CUmemorytype(int(kind)), "name", str(kind))
    return name.removeprefix("CU_MEMORYTYPE_").lower(), bool(managed)


def persisting_l2_limit() -> int:
    drv = _driver()
    return int(check(drv.cuCtxGetLimit(drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE), "cuCtxGetLimit"))


def set_persisting_l2(size: int) -> int:
    """Set the device's persisting-L2 set-aside (cudaLimitPersistingL2CacheSize); returns
    what the driver granted."""
    drv = _driver()
    check(drv.cuCtxSetLimit(drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, size), "cuCtxSetLimit(persisting L2)")
    return persisting_l2_limit()


def reset_persisting_l2() -> None:
    """Turn every persisting L2 line back to normal (cudaCtxResetPersistingL2Cache)."""
    check(_driver().cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")
