"""Load a compiled heatc module: `load(path)`, `from_bytes(manifest, wasm)` → `Checker`.

A module is refused at load — with the reason — when its manifest is missing or
malformed, a file's sha256 does not match, its ABI version is not one this runtime
speaks, or wasmtime cannot compile it. `backend="native"` runs the build's rules.hct on
the native core instead of module.wasm on wasmtime (heatc_runtime.native), with the same
Checker API and results.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .abi import check_abi
from .checker import Checker
from .errors import ModuleError
from .limits import Limits
from .tables import read_token_table

BACKENDS = ("wasm", "native")


def read_manifest(path: Path) -> tuple[dict, Path]:
    manifest_path = path / "manifest.json" if path.is_dir() else path
    if not manifest_path.exists():
        raise ModuleError(f"{path}: no manifest.json (is this a heatc build directory?)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModuleError(f"{manifest_path}: the manifest is not valid JSON: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "heatc-module":
        raise ModuleError(f"{manifest_path}: not a heatc module manifest")
    for key in ("abi", "wasm", "layout", "rules", "classes", "channels", "anchor_groups"):
        if key not in manifest:
            raise ModuleError(f"{manifest_path}: the manifest has no {key!r}")
    return manifest, manifest_path.parent


def load(path: str | Path, limits: Limits | None = None, backend: str = "wasm") -> Checker:
    """Load a module or build directory (manifest.json, module.wasm, and for a build
    tokens.bin and the other artifacts), verifying every file's sha256 first. With
    `backend="native"` the build's rules.hct runs on the native core."""
    _check_backend(backend)
    path = Path(path)
    manifest, directory = read_manifest(path)
    wasm_path = directory / str(manifest["wasm"].get("file", "module.wasm"))
    artifacts = manifest.get("build", {}).get("artifacts", {})
    for name, info in artifacts.items():
        file = directory / name
        try:
            data = file.read_bytes()
        except OSError as e:
            raise ModuleError(f"{file}: cannot read a build artifact: {e.strerror}") from None
        if hashlib.sha256(data).hexdigest() != info.get("sha256"):
            raise ModuleError(f"{file}: checksum mismatch: the build is corrupt or was changed after it was made")
    code_path = wasm_path if backend == "wasm" else directory / "rules.hct"
    if backend == "native" and not code_path.exists():
        raise ModuleError(f"{code_path}: no rules.hct (the native backend runs a build directory: heatc build)")
    try:
        code = code_path.read_bytes()
    except OSError as e:
        raise ModuleError(f"{code_path}: cannot read the module: {e.strerror}") from None
    checker = from_bytes(manifest, code, limits, where=str(code_path), backend=backend)
    if "tokens.bin" in artifacts:
        try:
            checker.set_token_table(read_token_table((directory / "tokens.bin").read_bytes()))
        except ValueError as e:
            raise ModuleError(f"{directory / 'tokens.bin'}: {e}") from None
    return checker


def from_bytes(
    manifest: dict, wasm: bytes, limits: Limits | None = None, where: str = "module", backend: str = "wasm"
) -> Checker:
    """A Checker from a manifest and module bytes already in memory, verified like `load`:
    module.wasm's bytes, or with `backend="native"` rules.hct's."""
    _check_backend(backend)
    abi = manifest["abi"]
    check_abi(where, int(abi.get("major", -1)), int(abi.get("minor", -1)))
    if backend == "native":
        return _native_checker(manifest, wasm, limits or Limits(), where)
    digest = hashlib.sha256(wasm).hexdigest()
    if digest != manifest["wasm"]["sha256"]:
        raise ModuleError(
            f"{where}: checksum mismatch (sha256 {digest[:16]}…, manifest says "
            f"{str(manifest['wasm']['sha256'])[:16]}…): the module is corrupt or was changed after the build"
        )
    return Checker(manifest, wasm, limits or Limits())


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
