"""A module's manifest.json: read it without trusting it, and check the shape of every
field the runtime reads (docs/abi.md, "Manifest") before anything uses one — a field of the
wrong type is refused with its name, never an AttributeError or KeyError later.

`read_artifact(build, name)` reads one file of a build as `heatc_runtime.load` reads every
one: the manifest checked first, then the file's type, size and sha256 against it (what the
CLI and the CUDA ops read a build with; nothing here needs wasmtime).

Public surface: `read_manifest(path)`, `read_artifact(path, name, manifest)`, `read_sized(path, size, what)`,
`check_manifest(manifest, where)`, `check_layout(consts, manifest, where)`, `manifest_digest(manifest)`,
`MAX_MANIFEST_BYTES`, `MAX_ARTIFACT_BYTES`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..abi import CONTROL_FIELDS, SNAPSHOT
from ..errors import ModuleError
from .files import UnreadableFile, WrongSize, plain_name, read_file

MAX_MANIFEST_BYTES = 256 << 20  # a manifest of 100,000 rules is about 60 MB
MAX_ARTIFACT_BYTES = 1 << 30  # the largest file of a build this runtime reads
_HEX = frozenset("0123456789abcdef")


def read_manifest(path: Path) -> tuple[dict, Path]:
    """(manifest, its directory) of a build or module directory, or of a manifest file."""
    is_dir = path.is_dir()
    manifest_path = path / "manifest.json" if is_dir else path
    if not manifest_path.exists() and not manifest_path.is_symlink():
        raise ModuleError(f"{path}: no manifest.json (is this a heatc build directory?)")
    try:
        # inside a directory, a build's files are plain files: a link there is refused
        data = read_file(manifest_path, MAX_MANIFEST_BYTES, follow_links=not is_dir)
    except UnreadableFile as e:
        raise ModuleError(f"{manifest_path}: cannot read the manifest: {e}") from None
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModuleError(f"{manifest_path}: the manifest is not valid JSON: {e}") from None
    except RecursionError:
        raise ModuleError(f"{manifest_path}: the manifest is not a heatc manifest (nested too deeply)") from None
    check_manifest(manifest, str(manifest_path))
    return manifest, manifest_path.parent


def read_artifact(path: str | Path, name: str, manifest: dict | None = None) -> bytes:
    """The bytes of the artifact `name` (program.json, rules.hct, …) of a build directory,
    read as `load` reads it: the manifest checked first, then the file's type, size and
    sha256 against it. With `manifest` (read_manifest's, of the directory `path`) it is not
    read again. Raises ModuleError with the reason."""
    directory = Path(path)
    if manifest is None:
        if directory.is_dir():
            directory = directory.resolve()  # (a build's link, followed once, as load follows it)
        manifest, directory = read_manifest(directory)
    info = manifest.get("build", {}).get("artifacts", {}).get(name)
    if info is None:
        raise ModuleError(f"{directory / name}: its manifest lists no {name} (is this a heatc build directory?)")
    return _verified(directory, name, info)


def _verified(directory: Path, name: str, info: dict) -> bytes:
    data = read_sized(directory / name, info.get("size"), "the build artifact")
    if hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise ModuleError(
            f"{directory / name}: checksum mismatch: the build is corrupt or was changed after it was made"
        )
    return data


def read_sized(path: Path, size: int | None, what: str) -> bytes:
    """A file of a module or build directory, `what` it is: a plain file (no link), of the
    size its manifest records when it records one, at most MAX_ARTIFACT_BYTES."""
    try:
        return read_file(path, MAX_ARTIFACT_BYTES, size=size, follow_links=False)
    except WrongSize as e:
        raise ModuleError(f"{path}: {e}: the build is corrupt or was changed after it was made") from None
    except UnreadableFile as e:
        raise ModuleError(f"{path}: cannot read {what}: {e}") from None


def manifest_digest(manifest: dict) -> str:
    """The sha256 of a manifest's canonical JSON without its `manifest_sha256` field: a build
    records it, so that a manifest changed after the build (a rule renamed, a bit flipped
    that still reads as JSON) is refused like any other changed file."""
    rest = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    canonical = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def check_manifest(manifest: object, where: str) -> None:
    """Refuse a manifest whose fields the runtime reads are missing or of the wrong type, or
    whose recorded digest does not match."""
    if not isinstance(manifest, dict) or manifest.get("format") != "heatc-module":
        raise ModuleError(f"{where}: not a heatc module manifest")
    if "manifest_sha256" in manifest and manifest_digest(manifest) != manifest["manifest_sha256"]:
        raise ModuleError(f"{where}: checksum mismatch: the manifest was changed after the build")
    for key in ("abi", "wasm", "layout", "rules", "classes", "channels", "anchor_groups"):
        if key not in manifest:
            raise ModuleError(f"{where}: the manifest has no {key!r}")
    m = _Fields(where)
    m.object(manifest["abi"], "abi", {"major": int, "minor": int})
    wasm = m.object(manifest["wasm"], "wasm", {"sha256": str}, {"file": str, "size": int})
    m.digest(wasm["sha256"], "wasm.sha256")
    if "file" in wasm and not plain_name(wasm["file"]):
        m.fail("wasm.file", "a file name in the module's directory", wasm["file"])
    layout = manifest["layout"]
    m.object(layout, "layout", {"state_size": int, "event_size": int, "snapshot_size": int, "flags_offset": int})
    for i, rule in enumerate(m.array(manifest["rules"], "rules")):
        m.object(rule, f"rules[{i}]", {"name": str, "captures": list, "requirements": list})
        for j, cap in enumerate(rule["captures"]):
            m.object(cap, f"rules[{i}].captures[{j}]", {"name": str, "kind": str})
            if cap["kind"] not in ("number", "class"):
                m.fail(f"rules[{i}].captures[{j}].kind", '"number" or "class"', cap["kind"])
        for j, text in enumerate(rule["requirements"]):
            m.type(text, str, f"rules[{i}].requirements[{j}]")
        for j, use in enumerate(m.array(rule.get("consistency", []), f"rules[{i}].consistency")):
            where_use = f"rules[{i}].consistency[{j}]"
            m.type(use, dict, where_use)
            if "key" in use:
                m.object(use, where_use, {"capture": str, "key": str, "per": list})
                for k, pair in enumerate(use["per"]):
                    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                        m.fail(f"{where_use}.per[{k}]", "a [class, channel] pair of names", pair)
            else:
                m.object(use, where_use, {"capture": str, "channel": str})
    for key in ("classes", "anchor_groups"):
        for i, name in enumerate(m.array(manifest[key], key)):
            m.type(name, str, f"{key}[{i}]")
    for i, channel in enumerate(m.array(manifest["channels"], "channels")):
        m.object(channel, f"channels[{i}]", {"name": str, "kind": str}, {"band": bool})
    if "build" in manifest:
        build = m.object(manifest["build"], "build", {}, {"artifacts": dict})
        for name, info in build.get("artifacts", {}).items():
            if not plain_name(name):
                m.fail("build.artifacts", "file names in the build directory", name)
            m.object(info, f"build.artifacts[{name!r}]", {"sha256": str}, {"size": int})
            m.digest(info["sha256"], f"build.artifacts[{name!r}].sha256")


def check_layout(consts: dict[str, int], manifest: dict, where: str) -> None:
    """Refuse a module whose exported layout cannot be what it says (a record too small for
    its fields, the control block outside memory): untrusted modules are read with these."""
    layout = manifest["layout"]
    odd = [k for k, v in consts.items() if type(v) is not int]
    if odd:
        raise ModuleError(f"{where}: not a heatc module: its {', '.join(odd)} are not 32-bit integers")
    for key in ("state_size", "event_size", "snapshot_size"):
        if consts[key] != layout[key]:
            raise ModuleError(f"{where}: the module's {key} is {consts[key]}, its manifest says {layout[key]}")
    if consts["n_rules"] != len(manifest["rules"]):
        raise ModuleError(f"{where}: the module and its manifest disagree on the number of rules")
    problems = []
    if not 8 <= consts["state_size"] <= 1 << 28:
        problems.append(f"state_size {consts['state_size']}")
    if not (0 <= layout["flags_offset"] <= consts["state_size"] - 4):
        problems.append(f"flags_offset {layout['flags_offset']} outside the state record")
    event_size = consts["event_size"]
    if event_size < 64 or event_size % 8 or event_size > 64 + 8 * 4096:
        problems.append(f"event_size {event_size} (64 bytes and 8 per capture)")
    elif max((len(r["captures"]) for r in manifest["rules"]), default=0) > (event_size - 64) // 8:
        problems.append(f"event_size {event_size}: no room for the captures of every rule")
    if not SNAPSHOT.size + consts["n_rules"] <= consts["snapshot_size"] <= SNAPSHOT.size + consts["n_rules"] + 4096:
        problems.append(f"snapshot_size {consts['snapshot_size']} for {consts['n_rules']} rules")
    if not 0 <= consts["control"] <= consts["heap_base"] - 4 * len(CONTROL_FIELDS):
        problems.append(f"control block at {consts['control']} with the heap at {consts['heap_base']}")
    if not 1 <= consts["lexeme_events"] <= 1 << 16:
        problems.append(f"lexeme_events {consts['lexeme_events']}")
    if problems:
        raise ModuleError(f"{where}: not a heatc module: its layout is impossible ({'; '.join(problems)})")


class _Fields:
    """Type checks that name the field: `rules[3].captures: expected a list, got 5`."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, field: str, expected: str, got: object) -> None:
        shown = repr(got)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ModuleError(f"{self.where}: manifest field {field}: expected {expected}, got {shown}")

    def type(self, value: object, kind: type, field: str) -> None:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok or (kind is int and not 0 <= value < 1 << 53):
            names = {int: "a whole number", str: "a string", list: "a list", dict: "an object"}
            self.fail(field, names.get(kind, kind.__name__), value)

    def object(self, value: object, field: str, required: dict[str, type], optional: dict | None = None) -> dict:
        self.type(value, dict, field)
        assert isinstance(value, dict)
        for key, kind in required.items():
            if key not in value:
                self.fail(f"{field}.{key}", "a value", "nothing")
            self.type(value[key], kind, f"{field}.{key}")
        for key, kind in (optional or {}).items():
            if key in value:
                self.type(value[key], kind, f"{field}.{key}")
        return value

    def array(self, value: object, field: str) -> list:
        self.type(value, list, field)
        assert isinstance(value, list)
        return value

    def digest(self, value: str, field: str) -> None:
        if len(value) != 64 or not _HEX.issuperset(value):
            self.fail(field, "a sha256 in hex", value)
