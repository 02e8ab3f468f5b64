"""`heatc build heatmap.yaml -o build/` (or a `.heat` rule file, or a folder of them):
everything an inference engine loads, in one directory, written atomically and
byte-identical on rebuild.

build/<name> is a symbolic link to build/.<name>.<digest>, a directory named after the hash
of its contents. A build writes a fresh directory, then swaps the link in one rename, so a
killed build leaves the previous build/<name> exactly as it was. Builds into one target take
turns (a lock file, build/.<name>.lock), so concurrent builds never delete each other's
output: the last to finish is the one build/<name> points to. A killed build's staging
directory is removed by the next build.

The build is a list of named stages, `STAGES` (read, lower, compile, expects, tokens, pack,
codegen, artifacts, install; heatc.stages runs them, times each and names the stage an
error comes from).

Public surface: `build(path, out_root, tokenizer, name, expects, dump_after, dump_to) -> BuildResult`,
`STAGES`, `compile_heatmap(path)
-> (Program, Lowered, Heatmap)`, `compile_folder(path)`, `is_build(path)`, `rule_tiers(program,
tiers) -> (bytes, tiers)` (each rule's table bytes and tier, as a build plans them), `HCT_MAGIC`, `HCT_VERSION` (rules.hct's layout is the ABI's:
heatc_runtime.abi.HCT_HEADER).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from heatc import ir
from heatc.errors import Diagnostic, HeatError
from heatc.heatmap.artifacts import ARTIFACTS, is_build  # noqa: F401  (is_build: re-exported)
from heatc.heatmap.format import NAME, Heatmap, Tokenizer, load_heatmap
from heatc.heatmap.lower import Lowered, lower
from heatc.heatmap.tokenizers import TokenTable, table_bytes, token_table
from heatc.lang import ast
from heatc.lang.compiler import compile_tree
from heatc.lang.parse import parse, parse_file, read_source
from heatc.lang.unparse import format_file
from heatc.semantics import reference
from heatc.stages import Run, Stage, check_dump_after, run_stages
from heatc.version import __version__
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime.backends.hct import HCT_MAGIC, HCT_VERSION  # noqa: F401  (re-exported: the format is the runtime's)
from heatc_runtime.backends.manifest import manifest_digest


@dataclass
class BuildResult:
    directory: Path  # build/<name> (the link)
    target: Path  # the content-addressed directory it points to
    manifest: dict
    program: ir.Program
    unchanged: bool  # the previous build had exactly these contents
    run: Run | None = None  # the stages as they ran: their values and wall times


def compile_heatmap(path: str | Path) -> tuple[ir.Program, Lowered, Heatmap]:
    hm = load_heatmap(path)
    lowered = lower(hm)
    program = compile_tree(lowered.tree, read_source(path, "the heatmap"))
    return program, lowered, hm


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tier_plan(program: ir.Program, packed_rules: list[int], tiers: dict[str, int]) -> list[str]:
    """Rules in heat order fill the L2-persisting window first, then fixed device memory;
    the rest stays in host memory (docs/heatmap.md, "Tiers")."""
    l2, device = tiers.get("l2_bytes", 0), tiers.get("device_bytes", 0)
    out, used = [], 0
    for size in packed_rules:
        used += size
        out.append("l2" if used <= l2 else "device" if used <= l2 + device else "host")
    return out


def rule_tiers(program: ir.Program, tiers: dict[str, int]) -> tuple[list[int], list[str]]:
    """Each rule's packed table bytes and tier ("l2", "device", "host"), in program order, as
    `build` plans them for a heatmap's `tiers`."""
    packed = pack(program)
    sizes = _rule_sizes(packed.offsets, packed.blob, len(program.rules))
    return sizes, _tier_plan(program, sizes, tiers)


def _rule_sizes(blob_offsets: dict[str, int], blob: bytes, n_rules: int) -> list[int]:
    if not n_rules:
        return []
    starts = list(struct.unpack_from(f"<{n_rules}I", blob, blob_offsets["rule_off"]))
    ends = [*starts[1:], blob_offsets["rules"] + _rules_section_size(blob_offsets)]
    return [e - s for s, e in zip(starts, ends, strict=True)]


def _rules_section_size(offsets: dict[str, int]) -> int:
    later = sorted(o for o in offsets.values() if o > offsets["rules"])
    return later[0] - offsets["rules"]


def _relative(path: Path, base: Path) -> str:
    try:
        return os.path.relpath(path, base)
    except ValueError:
        return str(path)


@dataclass
class _Input:
    """What a build compiles, read from a heatmap, a rule file or a folder of rule files: its
    rules as a syntax tree (a heatmap's cells lowered) and what the build records of them."""

    tree: ast.RuleFile
    text: str  # the source the diagnostics quote (the heatmap, the rule file, a folder's first file)
    name: str
    tokenizer: Tokenizer
    targets: list[str]
    tiers: dict[str, int]
    source_cell: dict[str, str]  # rule name -> the heatmap cell it came from, or "rules" / "rules:FILE"
    inputs: list[tuple[str, Path]]  # (role, path) of every file the build read
    base: Path  # paths in the artifacts are relative to this


@dataclass
class _Read:
    """A build's input as read: a heatmap, or parsed rule files (one, or a folder's)."""

    path: Path
    heatmap: Heatmap | None = None
    files: list[Path] | None = None
    trees: list[ast.RuleFile] | None = None
    text: str = ""


MAX_NAME = 100  # a build's name is a file name: build/<name>, build/.<name>.<digest>


def _read(path: Path) -> _Read:
    if path.is_dir():
        files = sorted(p for p in path.glob("*.heat") if p.is_file())
        if not files:
            raise HeatError(
                Diagnostic(str(path), 0, 0, "no rule files (*.heat) in this folder, and not a build directory")
            )
        return _Read(path, files=files, trees=[parse_file(f) for f in files])
    if path.suffix in (".yaml", ".yml"):
        return _Read(path, heatmap=load_heatmap(path))
    text = read_source(path, "the rule file")
    return _Read(path, files=[path], trees=[parse(text, str(path))], text=text)


def _lower(read: _Read) -> _Input:
    path = read.path
    if read.heatmap is not None:
        hm = read.heatmap
        lowered = lower(hm)
        inputs = [("heatmap", path), *[("rules", p) for p in hm.rule_files]]
        return _Input(lowered.tree, read_source(path, "the heatmap"), hm.name, hm.tokenizer, hm.targets, hm.tiers,
                      dict(lowered.source_cell), inputs, path.parent)  # fmt: skip
    assert read.files is not None and read.trees is not None
    if path.is_dir():
        decls = tuple(d for t in read.trees for d in t.decls)
        header = ast.RulesetDecl(ast.Name(_safe_name(path.resolve().name)))
        tree = ast.RuleFile(header, decls, str(read.files[0]))
        text = read_source(read.files[0])
        cells = {r.text: f"rules:{f.name}" for f, t in zip(read.files, read.trees, strict=True) for r in _rules(t)}
        base = path
    else:
        tree, text, base = read.trees[0], read.text, path.parent
        cells = {r.text: "rules" for r in _rules(tree)}
    # (a rule file names no tokenizer, targets or tiers: a heatmap's defaults; one token per
    # byte unless --tokenizer names one)
    plain = Heatmap(path, "", "", {}, {}, [])
    return _Input(tree, text, "", Tokenizer("bytes"), plain.targets, plain.tiers, cells,
                  [("rules", f) for f in read.files], base)  # fmt: skip


def _compile(source: _Input, name: str | None) -> ir.Program:
    """The rules checked and compiled to the IR; `name` (--name) renames the rule set and the build."""
    program = compile_tree(source.tree, source.text)
    source.name = source.name or program.name
    if name is None:
        return program
    if not NAME.match(name) or len(name) > MAX_NAME:
        raise HeatError(Diagnostic("--name", 0, 0, f"{name[:MAX_NAME]!r} is not a build name: letters, digits and "
                                   f"_, not starting with a digit, at most {MAX_NAME} characters"))  # fmt: skip
    source.name = name
    return replace(program, name=name)


def compile_folder(path: Path) -> tuple[ir.Program, dict[str, str], list[Path]]:
    """A folder of rule files as one rule set: every `*.heat` in it, in file-name order,
    named after the folder (each file's own `ruleset` line names that file, not the whole).
    Returns the program, each rule's file ("rules:NAME.heat") and the files."""
    source = _lower(_read(path))
    return compile_tree(source.tree, source.text), source.source_cell, [p for _, p in source.inputs]


def _rules(tree: ast.RuleFile) -> list[ast.Name]:
    return [d.name for d in tree.decls if isinstance(d, ast.RuleDecl)]


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text).lstrip("0123456789") or "rules"


# --- the stages -------------------------------------------------------------------------------


def _plan(program: ir.Program, source: _Input) -> dict:
    packed = pack(program)
    sizes = _rule_sizes(packed.offsets, packed.blob, len(program.rules))
    return {"packed": packed, "sizes": sizes, "tiers": _tier_plan(program, sizes, source.tiers)}


def _expects(program: ir.Program, expects: bool) -> dict:
    if expects:
        _check_expects(program)
    return {}


def _artifacts(path, source, program, table, packed, sizes, tiers, module) -> dict:
    rules_at = packed.offsets["rules"] if program.rules else 0
    l2_end = rules_at + sum(s for s, t in zip(sizes, tiers, strict=True) if t == "l2")
    device_end = l2_end + sum(s for s, t in zip(sizes, tiers, strict=True) if t == "device")
    # Paths in the artifacts are relative to the heatmap (the rule file, the folder), so a
    # build does not depend on where the checkout lives.
    base = source.base
    portable = ir.to_plain(program)
    portable["source"] = _relative(Path(program.source), base)
    for x in portable["expects"]:
        x["path"] = _relative(Path(x["path"]), base) if x["path"] else portable["source"]
    artifacts = {
        "module.wasm": module.wasm,
        "tokens.bin": table_bytes(table),
        "rules.hct": hct_bytes(program, packed, (l2_end, device_end)),
        "program.json": (json.dumps(portable, ensure_ascii=False, separators=(",", ":")) + "\n").encode(),
    }
    inputs = [{"role": role, "path": _relative(p, base), "sha256": _sha(p.read_bytes())} for role, p in source.inputs]
    if table.source_sha256:
        inputs.append({"role": "tokenizer", "path": Path(table.source).name, "sha256": table.source_sha256})
    manifest = dict(module.manifest)
    manifest["build"] = {
        "heatc_version": __version__,
        "heatmap": source.name,
        "targets": source.targets,
        "inputs": inputs,
        "artifacts": {name: {"sha256": _sha(data), "size": len(data)} for name, data in artifacts.items()},
        "tokenizer": {"kind": table.kind, "tokens": len(table.tokens)},
        "tiers": {
            **source.tiers,
            "counts": {t: tiers.count(t) for t in ("l2", "device", "host")},
        },
        "rules": [
            {
                "id": i,
                "name": r.name,
                "source": source.source_cell.get(r.name, "rules"),
                "heat": r.heat,
                "freq": r.freq,
                "tier": tiers[i],
                "bytes": sizes[i],
            }
            for i, r in enumerate(program.rules)
        ],
    }
    manifest["manifest_sha256"] = manifest_digest(manifest)  # (so a changed manifest is refused too)
    artifacts["manifest.json"] = (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    return {"artifacts": artifacts, "manifest": manifest}


def _json(value) -> str:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


#: `heatc build`, stage by stage: what each reads and writes (docs/heatmap.md, "Build stages").
STAGES = (
    Stage("read", "read the heatmap, the rule file or the folder's rule files", ("path",), ("read",),
          lambda path: {"read": _read(path)}),
    Stage("lower", "lower the heatmap's cells to rules (rule files: as written)", ("read",), ("source",),
          lambda read: {"source": _lower(read)}, lambda out: (".heat", format_file(out["source"].tree))),
    Stage("compile", "check the rules and compile them to the IR", ("source", "name"), ("program",),
          lambda source, name: {"program": _compile(source, name)},
          lambda out: (".ir.json", ir.to_json(out["program"], indent=1) + "\n")),
    Stage("expects", "run every `expect` example on the reference interpreter", ("program", "expects"), (),
          _expects),
    Stage("tokens", "make the token table", ("path", "source", "tokenizer"), ("table",),
          lambda path, source, tokenizer: {"table": tokenizer or token_table(source.tokenizer, str(path))},
          lambda out: (".tokens.bin", table_bytes(out["table"]))),
    Stage("pack", "pack the rule tables and plan their tiers", ("program", "source"), ("packed", "sizes", "tiers"),
          _plan, lambda out: (".tables.bin", out["packed"].blob)),
    Stage("codegen", "render the kernel and assemble the WASM module", ("program", "packed"), ("module",),
          lambda program, packed: {"module": compile_wasm(program, packed)}, lambda out: (".wat", out["module"].wat)),
    Stage("artifacts", "the artifacts and the manifest (sha256 of each)",
          ("path", "source", "program", "table", "packed", "sizes", "tiers", "module"), ("artifacts", "manifest"),
          _artifacts, lambda out: (".manifest.json", _json(out["manifest"]))),
    Stage("install", "write OUT/<name> atomically", ("out_root", "source", "artifacts", "manifest", "program"),
          ("result",), lambda out_root, source, artifacts, manifest, program:
          {"result": _install(Path(out_root), source.name, artifacts, manifest, program)}),
)  # fmt: skip


def build(
    path: str | Path,
    out_root: str | Path = "build",
    tokenizer: TokenTable | None = None,
    name: str | None = None,
    expects: bool = True,
    dump_after: str | None = None,
    dump_to: Path | None = None,
) -> BuildResult:
    """Build a heatmap (.yaml), a rule file (.heat) or a folder of rule files into
    `out_root/<name>`. `tokenizer`: the token table to write (default: the heatmap's
    `tokenizer:`; for rule files, one token per byte); `name`: the build's name (default:
    the heatmap's `name:`, the rule set's, or the folder's); `expects=False` builds even where
    an `expect` example fails (what `heatc scan` compiles for itself); `dump_after`: a stage
    (`STAGES`) whose output is written to `dump_to` + the stage's suffix. The result's
    `timings` are each stage's wall time."""
    check_dump_after(STAGES, dump_after)
    values = {"path": Path(path), "out_root": out_root, "tokenizer": tokenizer, "name": name, "expects": expects}
    run = run_stages(STAGES, values, dump_after, dump_to)
    result = run.values["result"]
    result.run = run
    return result


def _check_expects(program: ir.Program) -> None:
    from heatc.verify.expect import check_expects

    failures = check_expects(program, lambda p, d: reference.scan(p, d)[:2])
    if failures:
        raise HeatError(
            [
                Diagnostic(f.expect.path or program.source, f.expect.line, 1, f"expect {f.expect.outcome}: {f.message}")
                for f in failures
            ]
        )


def _install(
    out_root: Path, name: str, artifacts: dict[str, bytes], manifest: dict, program: ir.Program
) -> BuildResult:
    try:
        out_root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next(p for p in (out_root, *out_root.parents) if p.exists() and not p.is_dir())
        raise HeatError(Diagnostic(str(blocking), 0, 0, "is a file, not a directory; build into a directory")) from None
    except OSError as e:
        raise HeatError(Diagnostic(str(out_root), 0, 0, f"cannot create the output directory: {e.strerror}")) from None
    digest = _sha(b"".join(hashlib.sha256(artifacts[k]).digest() for k in sorted(artifacts)))[:16]
    target = out_root / f".{name}.{digest}"
    link = out_root / name
    with _build_lock(out_root, name):
        # Builds of one target take turns from here: what a killed build left (a staging
        # directory, a half-made link) belongs to no live build and goes.
        for stale in [*out_root.glob(f".{name}.tmp-*"), *out_root.glob(f".{name}.link-*")]:
            _remove(stale)
        if link.exists() and not link.is_symlink():
            raise HeatError(
                Diagnostic(str(link), 0, 0, "exists and is not a heatc build link; move it away and build again")
            )
        unchanged = link.is_symlink() and os.readlink(link) == target.name and target.is_dir()
        if not target.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=out_root))
            try:
                for filename, data in artifacts.items():
                    with open(staging / filename, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                os.rename(staging, target)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        swap = out_root / f".{name}.link-{os.getpid()}"
        os.symlink(target.name, swap)
        os.replace(swap, link)  # the atomic step
        _sync_dir(out_root)
        for old in out_root.glob(f".{name}.*"):
            if old != target and old.is_dir() and not old.is_symlink():
                _discard(old, name)
    return BuildResult(link, target, manifest, program, unchanged)


def _discard(build_dir: Path, name: str) -> None:
    """Remove a finished build that no link names. It is renamed to a staging name first, in
    one step, and deleted there: deleting in place, a build killed half way left a target
    without some of its files under its own name, and a later build of the same heatmap
    (same digest, same name) took that directory as already built and linked to it. A killed
    build now leaves a staging directory, which the next build removes."""
    trash = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=build_dir.parent))
    try:
        os.rename(build_dir, trash / "gone")
    except OSError:
        shutil.rmtree(trash, ignore_errors=True)
        return
    shutil.rmtree(trash, ignore_errors=True)


LOCK_TIMEOUT_S = 600.0  # a build holding the lock longer than this is stuck, not slow


@contextlib.contextmanager
def _build_lock(out_root: Path, name: str):
    """`.NAME.lock` in the output directory, held (flock) while a build installs: two builds
    into one target never interleave their swaps and clean-ups. A killed build's lock goes
    with its process."""
    path = out_root / f".{name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise HeatError(
                        Diagnostic(str(path), 0, 0, f"another build into this target has held its lock for "
                                   f"{LOCK_TIMEOUT_S:g} s; is it stuck?")
                    ) from None  # fmt: skip
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _sync_dir(path: Path) -> None:
    """Make a rename in `path` durable (the new link survives a power cut)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
