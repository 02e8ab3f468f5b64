"""What a build directory holds, known without the compiler: `heatc scan BUILD` asks
whether a path is a build before anything else, and the compiler's imports (lark, the
code generators) were most of its start-up.

Public surface: `ARTIFACTS`, `is_build(path)`.
"""

from __future__ import annotations

from pathlib import Path

ARTIFACTS = ("module.wasm", "tokens.bin", "rules.hct", "program.json")  # beside manifest.json


def is_build(path: Path) -> bool:
    """A build directory (what `heatc build` writes, damaged or not), not a folder of rule
    files: one holding any file a build writes."""
    return path.is_dir() and any((path / name).exists() for name in (*ARTIFACTS, "manifest.json"))
