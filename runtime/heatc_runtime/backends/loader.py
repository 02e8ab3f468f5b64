"""Load a compiled heatc module: `load(path)`, `from_bytes(manifest, wasm)` → `Checker`.

A module is refused at load — with the reason — when its manifest is missing or
malformed, a file is not a plain file of the size its manifest records (a link, a device,
a FIFO, a name outside the directory), a file's sha256 does not match, its ABI version is
not one this runtime speaks, or wasmtime cannot compile it. Nothing is read before its
type and size are checked. `backend="native"` runs the build's rules.hct on the native
core instead of module.wasm on wasmtime (heatc_runtime.backends.native), with the same Checker API
and results.

(`heatc_runtime.backends.manifest.read_artifact` reads one file of a build the same way: what the CLI
and the CUDA ops read a build with.)

Public surface: `load(path, limits, backend)`, `from_bytes(manifest, code, limits, where, backend)`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..abi import check_abi
from ..errors import ModuleError, ModuleTrap
from .checker import Checker
from .limits import Limits
from .manifest import check_manifest, read_artifact, read_manifest, read_sized
from .tables import check_token_table, read_token_table

BACKENDS = ("wasm", "native")


def load(path: str | Path, limits: Limits | None = None, backend: str = "wasm") -> Checker:
    """Load a module or build directory (manifest.json, module.wasm, and for a build
    tokens.bin and the other artifacts), verifying every file's sha256 first. A build's token
    table is checked here and set (`Checker.set_token_table`) when the first batch is made.

    Parameters
    ----------
    path : str or Path
        A build directory, or a module's manifest.json.
    limits : Limits, optional
        Each call's budget and the memory cap; default `Limits()`.
    backend : str
        "wasm" (wasmtime), or "native": the build's rules.hct on the native core.

    Returns
    -------
    Checker
        The loaded module (a `NativeChecker` on the native backend).

    Raises
    ------
    ModuleError
        A file is missing, corrupt (its sha256), of another ABI, or not a heatc module; the
        backend is unknown or, for "native", not built.
    """
    _check_backend(backend)
    path = Path(path)
    if path.is_dir():
        path = path.resolve()  # a build's link, followed once: every file comes from one build
    manifest, directory = read_manifest(path)
    wasm_name = manifest["wasm"].get("file", "module.wasm")
    artifacts = manifest.get("build", {}).get("artifacts", {})
    files = {name: read_artifact(directory, name, manifest) for name in artifacts}
    if backend == "wasm":
        code_name, what = wasm_name, "the module"
        code_size = manifest["wasm"].get("size")
    else:
        code_name, what = "rules.hct", "the rule tables"
        if code_name not in artifacts:
            raise ModuleError(
                f"{directory / code_name}: no rules.hct (the native backend runs a build directory: heatc build)"
            )
        code_size = artifacts[code_name].get("size")
    code = files.get(code_name)
    if code is None:
        code = read_sized(directory / code_name, code_size, what)
    checker = from_bytes(manifest, code, limits, where=str(directory / code_name), backend=backend)
    if "tokens.bin" in files:
        tokens = files["tokens.bin"]
        try:
            check_token_table(tokens)
        except ValueError as e:
            checker.close()
            raise ModuleError(f"{directory / 'tokens.bin'}: {e}") from None
        # (checked now, put in the module's memory when a batch first needs it: a scan never does)
        checker._tokens_pending = lambda: read_token_table(tokens)
    return checker


def from_bytes(
    manifest: dict, wasm: bytes, limits: Limits | None = None, where: str = "module", backend: str = "wasm"
) -> Checker:
    """A Checker from a manifest and module bytes already in memory, verified like `load`.

    Parameters
    ----------
    manifest : dict
        The module's manifest.
    wasm : bytes
        module.wasm's bytes, or with `backend="native"` rules.hct's.
    limits : Limits, optional
        Each call's budget and the memory cap; default `Limits()`.
    where : str
        What to call the module in errors.
    backend : str
        "wasm" or "native".

    Returns
    -------
    Checker
        The loaded module.

    Raises
    ------
    ModuleError
        The manifest is malformed, the bytes do not match its sha256, the ABI differs, or
        the module does not load.
    """
    _check_backend(backend)
    check_manifest(manifest, where)
    abi = manifest["abi"]
    check_abi(where, abi["major"], abi["minor"])
    if backend == "native":
        return _native_checker(manifest, wasm, limits or Limits(), where)
    digest = hashlib.sha256(wasm).hexdigest()
    if digest != manifest["wasm"]["sha256"]:
        raise ModuleError(
            f"{where}: checksum mismatch (sha256 {digest[:16]}…, manifest says "
            f"{manifest['wasm']['sha256'][:16]}…): the module is corrupt or was changed after the build"
        )
    try:
        return Checker(manifest, wasm, limits or Limits(), where=where)
    except ModuleTrap as e:  # (its buffers do not fit its memory limit, or its start traps)
        raise ModuleError(f"{where}: {e}") from None


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ModuleError(f"unknown backend {backend!r} (available: {', '.join(BACKENDS)})")


def _native_checker(manifest: dict, data: bytes, limits: Limits, where: str) -> Checker:
    from .hct import read_hct
    from .native import NativeChecker

    expected = manifest.get("build", {}).get("artifacts", {}).get("rules.hct", {}).get("sha256")
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise ModuleError(f"{where}: checksum mismatch: the tables are corrupt or were changed after the build")
    hct = read_hct(data, where)
    if hct.abi != (manifest["abi"]["major"], manifest["abi"]["minor"]):
        raise ModuleError(
            f"{where}: the tables say ABI {hct.abi[0]}.{hct.abi[1]} but the manifest says {manifest['abi']}"
        )
    return NativeChecker(manifest, hct, limits, where)
