"""Load a compiled heatc module: `load(path)`, `from_bytes(manifest, wasm)` → `Checker`.

A module is refused at load — with the reason — when its manifest is missing or
malformed, a file's sha256 does not match, its ABI version is not one this runtime
speaks, or wasmtime cannot compile it.
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


def load(path: str | Path, limits: Limits | None = None) -> Checker:
    """Load a module or build directory (manifest.json, module.wasm, and for a build
    tokens.bin and the other artifacts), verifying every file's sha256 first."""
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
    try:
        wasm = wasm_path.read_bytes()
    except OSError as e:
        raise ModuleError(f"{wasm_path}: cannot read the module: {e.strerror}") from None
    checker = from_bytes(manifest, wasm, limits, where=str(wasm_path))
    if "tokens.bin" in artifacts:
        try:
            checker.set_token_table(read_token_table((directory / "tokens.bin").read_bytes()))
        except ValueError as e:
            raise ModuleError(f"{directory / 'tokens.bin'}: {e}") from None
    return checker


def from_bytes(manifest: dict, wasm: bytes, limits: Limits | None = None, where: str = "module") -> Checker:
    """A Checker from a manifest and module bytes already in memory, verified like `load`."""
    abi = manifest["abi"]
    check_abi(where, int(abi.get("major", -1)), int(abi.get("minor", -1)))
    digest = hashlib.sha256(wasm).hexdigest()
    if digest != manifest["wasm"]["sha256"]:
        raise ModuleError(
            f"{where}: checksum mismatch (sha256 {digest[:16]}…, manifest says "
            f"{str(manifest['wasm']['sha256'])[:16]}…): the module is corrupt or was changed after the build"
        )
    return Checker(manifest, wasm, limits or Limits())
