"""Builds of rule files and heatmaps, on disk by content hash.

A build on disk (`cached_build`) is keyed by the compiler's own files and the input's
bytes, so `heatc scan rules.heat` compiles once and then starts as fast as a build
directory; the runtime verifies every artifact's checksum when it loads one.

Public surface: `cached_build(path)`, `cache_root()`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

MAX_BUILDS = 32  # cached builds kept; the least recently used beyond this go
_code_digest: str | None = None


def _compiler_digest() -> str:
    """The compiler's own files and the ABI: a build made by other code is never reused, even
    when the version number has not changed (a checkout between releases)."""
    global _code_digest
    if _code_digest is None:
        from heatc.version import __version__
        from heatc_runtime import abi

        h = hashlib.sha256(__version__.encode())
        root = Path(__file__).parent.parent  # (all of heatc)
        for p in sorted(root.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
        h.update(Path(abi.__file__).read_bytes())
        _code_digest = h.hexdigest()
    return _code_digest


def _content_key(path: Path) -> str:
    """What a build of `path` depends on that is known without compiling: the compiler and
    the file's bytes (a folder: each rule file's name and bytes). Files a heatmap merges in
    (`rules:`) are checked against the build's manifest when it is reused."""
    h = hashlib.sha256(_compiler_digest().encode())
    files = sorted(p for p in path.glob("*.heat") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        data = f.read_bytes()
        h.update(f"{f.name}\0{len(data)}\0".encode() + data)
    return h.hexdigest()[:32]


def cache_root() -> Path:
    """$HEATC_CACHE/builds (else $XDG_CACHE_HOME/heatc/builds, else ~/.cache/heatc/builds)."""
    from heatc_runtime.engines.tokens import cache_dir

    return cache_dir() / "builds"


def cached_build(path: str | Path) -> Path:
    """The build directory of a rule file, a folder of rule files or a heatmap, compiled the
    first time and reused while its contents are the same (`heatc scan RULES` runs the
    compiled module rather than the reference interpreter). The token table is one token per
    byte: scanning text needs no tokenizer. Raises HeatError for input errors and OSError
    when the cache cannot be written."""
    path = Path(path)
    entry = cache_root() / _content_key(path)
    found = _reusable(entry, path)
    if found is not None:
        return found
    # (the compiler is imported only to build: its imports were most of a cached scan's start-up)
    from heatc.heatmap.build import build
    from heatc.heatmap.tokenizers import TokenTable

    table = TokenTable("bytes", [bytes([b]) for b in range(256)], "bytes", "")
    result = build(path, entry, table, expects=False)
    _forget_old(entry.parent)
    return result.directory


def _reusable(entry: Path, path: Path) -> Path | None:
    if not entry.is_dir():
        return None
    links = [p for p in entry.iterdir() if p.is_symlink() and not p.name.startswith(".")]
    if len(links) != 1:
        return None
    try:
        manifest = json.loads((links[0] / "manifest.json").read_text(encoding="utf-8"))
        base = path if path.is_dir() else path.parent
        for i in manifest["build"]["inputs"]:
            if hashlib.sha256((base / i["path"]).read_bytes()).hexdigest() != i["sha256"]:
                return None  # a merged rule file changed: build again
        os.utime(entry)  # (recently used)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # (damaged: built again; the runtime checks every artifact when it loads)
    return links[0]


def _forget_old(root: Path) -> None:
    try:
        entries = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in entries[MAX_BUILDS:]:
        shutil.rmtree(old, ignore_errors=True)
