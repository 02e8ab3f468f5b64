"""Load a compiled heatc module: `load(path)`, `from_bytes(manifest, wasm)` → `Checker`.

A module is refused at load — with the reason — when its manifest is missing or
malformed, a file is not a plain file of the size its manifest records (a link, a device,
a FIFO, a name outside the directory), a file's sha256 does not match, its ABI version is
not one this runtime speaks, or wasmtime cannot compile it. Nothing is read before its
type and size are checked.

Public surface: `load(path, limits)`, `from_bytes(manifest, wasm, limits, where)`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .abi import check_abi
from .checker import Checker
from .errors import ModuleError
from .files import UnreadableFile, WrongSize, read_file
from .limits import Limits
from .manifest import check_manifest, read_manifest
from .tables import read_token_table

MAX_ARTIFACT_BYTES = 1 << 30  # the largest file of a build this runtime reads


def load(path: str | Path, limits: Limits | None = None) -> Checker:
    """Load a module or build directory (manifest.json, module.wasm, and for a build
    tokens.bin and the other artifacts), verifying every file's sha256 first."""
    path = Path(path)
    if path.is_dir():
        path = path.resolve()  # a build's link, followed once: every file comes from one build
    manifest, directory = read_manifest(path)
    wasm_name = manifest["wasm"].get("file", "module.wasm")
    artifacts = manifest.get("build", {}).get("artifacts", {})
    files: dict[str, bytes] = {}
    for name, info in artifacts.items():
        files[name] = _read(directory / name, info.get("size"), "the build artifact")
        if hashlib.sha256(files[name]).hexdigest() != info["sha256"]:
            raise ModuleError(
                f"{directory / name}: checksum mismatch: the build is corrupt or was changed after it was made"
            )
    wasm = files.get(wasm_name)
    if wasm is None:
        wasm = _read(directory / wasm_name, manifest["wasm"].get("size"), "the module")
    checker = from_bytes(manifest, wasm, limits, where=str(directory / wasm_name))
    if "tokens.bin" in files:
        try:
            checker.set_token_table(read_token_table(files["tokens.bin"]))
        except ValueError as e:
            checker.close()
            raise ModuleError(f"{directory / 'tokens.bin'}: {e}") from None
    return checker


def _read(path: Path, size: int | None, what: str) -> bytes:
    try:
        return read_file(path, MAX_ARTIFACT_BYTES, size=size, follow_links=False)
    except WrongSize as e:
        raise ModuleError(f"{path}: {e}: the build is corrupt or was changed after it was made") from None
    except UnreadableFile as e:
        raise ModuleError(f"{path}: cannot read {what}: {e}") from None


def from_bytes(manifest: dict, wasm: bytes, limits: Limits | None = None, where: str = "module") -> Checker:
    """A Checker from a manifest and module bytes already in memory, verified like `load`."""
    check_manifest(manifest, where)
    abi = manifest["abi"]
    check_abi(where, abi["major"], abi["minor"])
    digest = hashlib.sha256(wasm).hexdigest()
    if digest != manifest["wasm"]["sha256"]:
        raise ModuleError(
            f"{where}: checksum mismatch (sha256 {digest[:16]}…, manifest says "
            f"{manifest['wasm']['sha256'][:16]}…): the module is corrupt or was changed after the build"
        )
    return Checker(manifest, wasm, limits or Limits())
