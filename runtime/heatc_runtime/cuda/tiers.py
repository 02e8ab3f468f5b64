"""The tier split of rules.hct's tables (docs/cuda.md, "Tiers"), as plain bytes.

The build's tier plan orders rule records by heat × frequency and ends the L2 tier and the
device tier at record boundaries (heatc.heatmap.build, `_tier_plan`; the offsets are in
rules.hct's header). At load the blob is cut into three pieces:

- tier 0 (L2-persisting window, in device memory): everything before the rules section,
  the L2 tier's rule records, then the sections after the rules section (rule offsets,
  powers of ten, anchors, …) moved up to follow them — so that one window covers every table
  a step reads but the colder rule records. Their offsets in the parameters move with them.
- tier 1 (ordinary device memory): the device tier's rule records.
- tier 2 (pinned, mapped host memory): the rest of the rule records.

A rule record at blob offset `off` is read at `base[k] + off` (heatc_core.h, `rule_rec`), so
no record offset changes. Tier 0 holds no record of the other tiers: a kernel that read one
from the wrong tier would read other tables, and the differential tests would fail.

A rules.hct with no tier plan (tier ends before the rules section: `heatc.wasm.hct` with (0, 0))
keeps every rule in tier 0.

Public surface: `TierSplit`, `split_tiers(hct)`, `TierReport`, `plan_report(hct)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backends.hct import PARAMS, TABLES, Hct
from ..errors import ModuleError

_ALIGN = 16  # sections are 16-byte aligned (heatc.wasm.pack); pieces keep that alignment


@dataclass(frozen=True)
class TierSplit:
    params: list[int]  # rules.hct's parameters with tier 0's section offsets
    pieces: tuple[bytes, bytes, bytes]  # tier 0, 1, 2
    starts: tuple[int, int, int]  # the blob offset each piece's first byte stands for (tier 0: 0)
    ends: tuple[int, int]  # blob offsets where the device and the host tiers begin
    rules: tuple[int, int]  # the rules section, [start, end) in the blob
    counts: tuple[int, int, int]  # rules in each tier
    hot_bytes: int  # tier 0's bytes that the window covers (all of it)

    def program_ints(self) -> list[int]:
        """The `program` argument of the torch ops: parameters, piece starts, tier ends."""
        return [*self.params, *self.starts, *self.ends]


def _rules_end(hct: Hct) -> tuple[int, int]:
    start = hct.sections["rules"]
    later = [o for name, o in hct.sections.items() if o > start and name != "rules"]
    return start, min(later, default=len(hct.blob))


def split_tiers(hct: Hct, where: str = "rules.hct") -> TierSplit:
    """Cut the blob into its three tiers (see the module docstring). Refuses a plan whose
    tier ends are not rule record boundaries inside the rules section."""
    blob = hct.blob
    r0, r1 = _rules_end(hct)
    l2_end, device_end = hct.tier_ends
    if l2_end < r0 and device_end < r0:  # no tier plan: every rule is hot
        l2_end = device_end = r1
    offs = [int.from_bytes(blob[hct.param("t_rule_off") + 4 * i :][:4], "little") for i in range(hct.n_rules)]
    bounds = {*offs, r1}
    if not (r0 <= l2_end <= device_end <= r1) or l2_end not in bounds or device_end not in bounds:
        raise ModuleError(
            f"{where}: the tier plan ({l2_end}, {device_end}) does not end on rule records of the rules section "
            f"[{r0}, {r1})"
        )
    if any(not r0 <= o < r1 for o in offs):
        raise ModuleError(f"{where}: a rule record lies outside the rules section")
    hot_top = -(-l2_end // _ALIGN) * _ALIGN
    shift = r1 - hot_top  # the tail sections move down by this much (a multiple of 16)
    tier0 = blob[:l2_end] + bytes(hot_top - l2_end) + blob[r1:]
    params = list(hct.params)
    for name in TABLES:
        i = PARAMS.index(f"t_{name}")
        if params[i] >= r1:
            params[i] -= shift
    a1, a2 = l2_end // _ALIGN * _ALIGN, device_end // _ALIGN * _ALIGN
    tier1, tier2 = blob[a1:device_end], blob[a2:r1]
    counts = (
        sum(o < l2_end for o in offs),
        sum(l2_end <= o < device_end for o in offs),
        sum(o >= device_end for o in offs),
    )
    return TierSplit(params, (tier0, tier1, tier2), (0, a1, a2), (l2_end, device_end), (r0, r1), counts, len(tier0))


@dataclass
class TierReport:
    """The tier plan and, on a GPU, what was applied (`notes`: why anything was not)."""

    rules: tuple[int, int, int]  # rules in tier 0 (L2), 1 (device), 2 (host)
    bytes: tuple[int, int, int]  # bytes of each piece
    placed: tuple[str, str, str] = ("cpu", "cpu", "cpu")  # the memory each piece is in, as the driver reports it
    window: tuple[int, float] | None = None  # (bytes, hit ratio) of the L2 window, when applied
    set_aside: int = 0  # the persisting-L2 set-aside granted
    device: str = "cpu"
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        names = ("L2 window", "device", "host (mapped)")
        out = ["  planned:" if self.device == "plan" else f"  placed on {self.device}:"]
        for i in range(3):
            out.append(
                f"    {names[i]:14} {self.rules[i]:>6} rules  {self.bytes[i]:>12,} bytes  in {self.placed[i]} memory"
            )
        if self.window:
            out.append(f"    L2 window: {self.window[0]:,} bytes, hitRatio {self.window[1]:.3f}, "
                       f"persisting set-aside {self.set_aside:,} bytes")  # fmt: skip
        out += [f"    note: {n}" for n in self.notes]
        return out


def plan_report(hct: Hct, where: str = "rules.hct") -> TierReport:
    """The tier plan of a rules.hct as the loader would place it (no device needed)."""
    split = split_tiers(hct, where)
    rep = TierReport(split.counts, tuple(len(p) for p in split.pieces), ("(planned)",) * 3, device="plan")
    rep.notes.append(f"an L2 window would cover tier 0's {split.hot_bytes:,} bytes (all tables but the colder rules)")
    return rep
