"""rules.hct, the tables a native or CUDA core steps (format: docs/heatmap.md, "rules.hct"):
a header, a section table, the program's parameters, then the packed tables — the same blob
as the WASM module's data segment.

The parameters are what a core needs besides the tables: the state record's field offsets,
record sizes and the program's constants. `PARAMS` is their order in the C core's
`heatc_program.p` array (the generated cuda_bridge/include/heatc_native_abi.h numbers them
`HEATC_P_<NAME>`); `read_hct` returns them in that order.

Public surface: `check_against_manifest(hct, manifest, where)`, `HCT_MAGIC`, `HCT_VERSION`, `HEAD`, `SECTION`, `PARAM`, `VALUES`, `TABLES`,
`OPTIONAL_TABLES`, `PARAMS`, `Hct`, `read_hct(data, where)`.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from .abi import (
    HCT_HEADER,
    HCT_MAGIC,
    HCT_OPTIONAL_TABLES,
    HCT_PARAM,
    HCT_PARAMS,
    HCT_SECTION,
    HCT_TABLES,
    HCT_VALUES,
    HCT_VERSION,
    check_abi,
)
from .errors import ModuleError

# the format is the ABI's (heatc_runtime.abi, "rules.hct"): these names are its own
HEAD, SECTION, PARAM = HCT_HEADER.struct, HCT_SECTION.struct, HCT_PARAM.struct
VALUES, TABLES, OPTIONAL_TABLES, PARAMS = HCT_VALUES, HCT_TABLES, HCT_OPTIONAL_TABLES, HCT_PARAMS


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
        sections = {}
        for _ in range(n_sections):
            name, offset = SECTION.unpack_from(data, at)
            sections[name.rstrip(b"\0").decode("ascii")] = offset
            at += SECTION.size
        (n_values,) = struct.unpack_from("<I", data, at)
        at += 4
        values = {}
        for _ in range(n_values):
            name, value = PARAM.unpack_from(data, at)
            values[name.rstrip(b"\0").decode("ascii")] = value
            at += PARAM.size
    except (struct.error, UnicodeDecodeError):
        raise ModuleError(f"{where}: the header is truncated or corrupt") from None
    blob = data[at:]
    if len(blob) != blob_size:
        raise ModuleError(f"{where}: the tables are {len(blob)} bytes, the header says {blob_size}")
    if hashlib.sha256(blob).digest() != digest:
        raise ModuleError(f"{where}: checksum mismatch: the tables are corrupt or were changed after the build")
    params = []
    for name in PARAMS:
        if name.startswith("t_"):
            value = sections.get(name[2:][:16], 0 if name[2:] in OPTIONAL_TABLES else None)
            what = "section"
        else:
            value = values.get(name)
            what = "parameter"
        if value is None:
            raise ModuleError(f"{where}: no {what} {name.removeprefix('t_')!r}")
        params.append(value)
    hct = Hct((major, minor), n_rules, state_size, (l2_end, device_end), blob, sections, params)
    if hct.param("state_size") != state_size or hct.param("n_rules") != n_rules:
        raise ModuleError(f"{where}: the header and the parameters disagree on the state size or rule count")
    return hct


def check_against_manifest(hct: Hct, manifest: dict, where: str = "rules.hct") -> None:
    """Refuse tables whose record sizes or rule count are not the manifest's (both come from
    one build; a mismatch means files of two builds were put together)."""
    layout = manifest["layout"]
    for key in ("state_size", "event_size", "snapshot_size"):
        if hct.param(key) != layout[key]:
            raise ModuleError(f"{where}: the tables' {key} is {hct.param(key)}, the manifest says {layout[key]}")
    if hct.n_rules != len(manifest["rules"]):
        raise ModuleError(f"{where}: the tables and the manifest disagree on the number of rules")
