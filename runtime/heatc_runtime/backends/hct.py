"""rules.hct, the tables a native or CUDA core steps (format: docs/heatmap.md, "rules.hct"):
a header, a section table, the program's parameters, then the packed tables — the same blob
as the WASM module's data segment.

The parameters are what a core needs besides the tables: the state record's field offsets,
record sizes and the program's constants. `PARAMS` is their order in the C core's
`heatc_program.p` array (the generated cuda_bridge/include/heatc_abi.h numbers them
`HEATC_P_<NAME>`); `read_hct` returns them in that order.

Checked here, before a core sees the file (docs/abi.md, "Checked at load"): the header — its
counts bounded, no section or parameter named twice, every section and both tier ends inside
the tables, the header's rule count and state size the parameters'. Everything a core reads
besides — every parameter's range, no two tables and no two parts of the state record
overlapping, what the tables hold — is checked by the core's own `check_tables`
(cuda_bridge/src/heatc_native.cpp), when the native backend or the CUDA ops load the tables.

Public surface: `check_against_manifest(hct, manifest, where)`, `HCT_MAGIC`, `HCT_VERSION`, `HEAD`, `SECTION`, `PARAM`, `VALUES`, `TABLES`,
`OPTIONAL_TABLES`, `OPTIONAL_VALUES`, `PARAMS`, `Hct`, `read_hct(data, where)`.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from ..abi import (
    HCT_HEADER,
    HCT_MAGIC,
    HCT_OPTIONAL_TABLES,
    HCT_OPTIONAL_VALUES,
    HCT_PARAM,
    HCT_PARAMS,
    HCT_SECTION,
    HCT_TABLES,
    HCT_VALUES,
    HCT_VERSION,
    LEX_LITERAL0,
    check_abi,
)
from ..errors import ModuleError

# the format is the ABI's (heatc_runtime.abi, "rules.hct"): these names are its own
HEAD, SECTION, PARAM = HCT_HEADER.struct, HCT_SECTION.struct, HCT_PARAM.struct
VALUES, TABLES, OPTIONAL_TABLES, PARAMS = HCT_VALUES, HCT_TABLES, HCT_OPTIONAL_TABLES, HCT_PARAMS
OPTIONAL_VALUES = HCT_OPTIONAL_VALUES
# (room for sections and parameters a later minor version adds; a count past it is corruption)
MAX_SECTIONS, MAX_VALUES = 4 * len(HCT_TABLES), 4 * len(HCT_VALUES)


@dataclass(frozen=True)
class Hct:
    abi: tuple[int, int]
    n_rules: int
    state_size: int
    tier_ends: tuple[int, int]
    blob: bytes
    sections: dict[str, int]
    params: list[int]  # in PARAMS order

    def param(self, name: str) -> int:
        return self.params[PARAMS.index(name)]


def read_hct(data: bytes, where: str = "rules.hct") -> Hct:
    """Parse and verify rules.hct: magic, version, ABI, the blob's sha256, every section and
    parameter a core needs. Raises ModuleError with the reason."""
    if len(data) < HEAD.size or data[:8] != HCT_MAGIC:
        raise ModuleError(f"{where}: not a heatc rules.hct file (bad magic)")
    _, version, major, minor, n_rules, state_size, blob_size, l2_end, device_end, digest, n_sections = HEAD.unpack_from(
        data
    )
    if version != HCT_VERSION:
        raise ModuleError(
            f"{where}: rules.hct version {version} is not supported (this runtime reads version {HCT_VERSION}); "
            "rebuild it with a matching heatc"
        )
    check_abi(where, major, minor)
    at = HEAD.size
    try:
        if n_sections > MAX_SECTIONS:
            raise ModuleError(f"{where}: the header says {n_sections:,} sections (a heatc build has {len(TABLES)})")
        sections = _records(data, at, n_sections, SECTION, "section", where)
        at += n_sections * SECTION.size
        (n_values,) = struct.unpack_from("<I", data, at)
        if n_values > MAX_VALUES:
            raise ModuleError(f"{where}: the header says {n_values:,} parameters (a heatc build has {len(VALUES)})")
        values = _records(data, at + 4, n_values, PARAM, "parameter", where)
        at += 4 + n_values * PARAM.size
    except (struct.error, UnicodeDecodeError):
        raise ModuleError(f"{where}: the header is truncated or corrupt") from None
    blob = data[at:]
    if len(blob) != blob_size:
        raise ModuleError(f"{where}: the tables are {len(blob)} bytes, the header says {blob_size}")
    if hashlib.sha256(blob).digest() != digest:
        raise ModuleError(f"{where}: checksum mismatch: the tables are corrupt or were changed after the build")
    outside = [f"section {name!r} at {offset:,}" for name, offset in sections.items() if offset > blob_size]
    outside += [
        f"the {tier} tier's end at {end:,}" for tier, end in (("L2", l2_end), ("device", device_end)) if end > blob_size
    ]
    if outside:
        raise ModuleError(f"{where}: {', '.join(outside)} past the end of the {blob_size:,} bytes of tables")
    params = []
    for name in PARAMS:
        if name.startswith("t_"):
            value = sections.get(name[2:][:16], 0 if name[2:] in OPTIONAL_TABLES else None)
            what = "section"
        else:
            value = values.get(name, 0 if name in OPTIONAL_VALUES else None)
            what = "parameter"
        if value is None:
            raise ModuleError(f"{where}: no {what} {name.removeprefix('t_')!r}")
        params.append(value)
    hct = Hct((major, minor), n_rules, state_size, (l2_end, device_end), blob, sections, params)
    if hct.param("state_size") != state_size or hct.param("n_rules") != n_rules:
        raise ModuleError(f"{where}: the header and the parameters disagree on the state size or rule count")
    return hct


def _records(data: bytes, at: int, n: int, record: struct.Struct, what: str, where: str) -> dict[str, int]:
    """name → value of `n` (name, u32) records from `at`; a name given twice is refused (which
    one a core would read is not for the file to leave open)."""
    out: dict[str, int] = {}
    for name, value in record.iter_unpack(data[at : at + n * record.size]):
        key = name.rstrip(b"\0").decode("ascii")
        if key in out:
            raise ModuleError(f"{where}: the header names {what} {key!r} twice")
        out[key] = value
    if len(out) != n:
        raise struct.error("short")
    return out


def check_against_manifest(hct: Hct, manifest: dict, where: str = "rules.hct") -> None:
    """Refuse tables whose record sizes, rule, channel or anchor group counts are not the
    manifest's, or whose literals name classes it has not (both come from one build; a
    mismatch means files of two builds were put together, or a changed file): the records the
    core writes are decoded with the manifest's names."""
    layout = manifest["layout"]
    for key in ("state_size", "event_size", "snapshot_size"):
        if hct.param(key) != layout[key]:
            raise ModuleError(f"{where}: the tables' {key} is {hct.param(key)}, the manifest says {layout[key]}")
    for what, have, names in (
        ("rules", hct.n_rules, manifest["rules"]),
        ("channels", hct.param("n_channels"), manifest["channels"]),
        ("anchor groups", hct.param("n_groups"), manifest["anchor_groups"]),
    ):
        if have != len(names):
            raise ModuleError(f"{where}: the tables have {have} {what}, the manifest {len(names)}")
    at, n = hct.param("t_literal_class"), max(0, hct.param("n_codes") - LEX_LITERAL0)
    if at + 4 * n > len(hct.blob):
        raise ModuleError(f"{where}: the literal classes lie outside the tables")
    classes = struct.unpack_from(f"<{n}I", hct.blob, at)
    if n and max(classes) >= len(manifest["classes"]):
        raise ModuleError(
            f"{where}: a literal's class ({max(classes)}) is not one of the manifest's {len(manifest['classes'])}"
        )
