"""Checked rules → IR rules and channels: the last step of compiling a rule file.

Public surface: `emit_rules(rules, classes, anchors, error, code_kinds)`, `DEFAULT_HEAT`,
`DEFAULT_FREQ`.
"""

from __future__ import annotations

from collections.abc import Callable

from heatc import ir
from heatc.lang import ast
from heatc.lang.unparse import format_requirement

DEFAULT_HEAT = 0.5
DEFAULT_FREQ = 1.0
# a magnitude band's two channel slots per key, named for a reader of the state; what marks
# them as a band for the conflicts layer is the statement's factor (`ir.Program.band_slots`)
BAND_SIDES = (" (smallest)", " (largest)")


def emit_rules(
    rules, classes, anchors: dict, error: Callable[[ast.Pos, str], None], code_kinds: list[int]
) -> tuple[list[ir.Rule], list[ir.Channel]]:
    """The checked rules as IR rules in heat order (heat × freq, then source order), and
    the channels their consistency and lock statements use. `rules` are the compiler's
    (declaration, source order, [(element, accepted codes)], captures by name) tuples;
    `classes` its classes (`.name`), `anchors` its anchor declarations by name, `code_kinds`
    the kind of each lexeme code (`ir.KIND_*`): a gap never skips a lexeme of a kind that
    the element before it or after it accepts."""
    channels: list[ir.Channel] = []
    lock_slots: dict[str, int] = {}
    anchor_ids = {name: i for i, name in enumerate(anchors)}
    lowered: list[ir.Rule] = []
    for d, order, elements, captures in rules:
        cap_index = {name: i for i, name in enumerate(captures)}
        heat = d.heat.value if d.heat is not None else DEFAULT_HEAT
        freq = d.freq.value if d.freq is not None else DEFAULT_FREQ
        gate = -1
        requirements: list[ir.Requirement] = []
        uses: list[ir.ChannelUse] = []
        for s in d.stmts:
            if isinstance(s, ast.WhenStmt):
                gate = anchor_ids[s.anchor.text]
            elif isinstance(s, ast.RequireCmp):
                requirements.append(
                    ir.Requirement(
                        s.op, _operand(s.left, cap_index), _operand(s.right, cap_index), text=format_requirement(s)
                    )
                )
            elif isinstance(s, ast.RequireIn):
                requirements.append(
                    ir.Requirement(
                        "in",
                        _operand(s.operand, cap_index),
                        ir.Operand(),
                        s.low.const,
                        s.high.const,
                        s.low_closed,
                        s.high_closed,
                        text=format_requirement(s),
                    )
                )
            elif isinstance(s, ast.ConsistentStmt):
                cap = captures[s.capture.text]
                factor = int(s.within.factor.value) if s.within is not None else 0
                within = f" within factor {factor}" if factor else ""
                # a band keeps two slots per key: the smallest values, then the largest
                sides = BAND_SIDES if factor else ("",)
                base = len(channels)
                if s.key is None:
                    for side in sides:
                        channels.append(ir.Channel(f"{d.name.text}.{cap.name}{side}", cap.kind))
                    uses.append(
                        ir.ChannelUse(base, cap_index[cap.name], text=f"consistent {cap.name}{within}", factor=factor)
                    )
                else:
                    key = captures[s.key.text]
                    for side in sides:
                        for c in key.key_classes:
                            channels.append(ir.Channel(f"{d.name.text}.{cap.name}[{classes[c].name}]{side}", cap.kind))
                    uses.append(
                        ir.ChannelUse(
                            base, cap_index[cap.name], cap_index[key.name], list(key.key_classes),
                            text=f"consistent {cap.name}{within} per {key.name}", factor=factor,
                        )
                    )  # fmt: skip
            elif isinstance(s, ast.LockStmt):
                cap = captures[s.capture.text]
                if s.channel.text not in lock_slots:
                    lock_slots[s.channel.text] = len(channels)
                    channels.append(ir.Channel(s.channel.text, cap.kind))
                slot = lock_slots[s.channel.text]
                if channels[slot].kind != cap.kind:
                    error(
                        s.capture.pos,
                        f'channel "{s.channel.text}" holds {channels[slot].kind} values elsewhere, '
                        f'but "{cap.name}" is a {cap.kind} capture',
                    )
                uses.append(ir.ChannelUse(slot, cap_index[cap.name], text=f"lock {s.channel.text} = {cap.name}"))
        ir_elements = []
        before = 0  # the kinds the previous element accepts
        for e, accepts, *unit in _with_years(elements, code_kinds):
            gap = _gap(e)
            capture = cap_index[e.capture.text] if e.capture is not None and e.capture.text in cap_index else -1
            places = cap_index.get(ast.places_capture_name(e.capture.text), -1) if e.capture is not None else -1
            kinds = 0
            for code in accepts:
                kinds |= code_kinds[code]
            blocks = 0 if e.across or not gap else before | kinds
            element = ir.Element(gap, sorted(set(accepts)), capture, blocks, places)
            if unit and unit[0][0] is not None and unit[0][0] in cap_index:
                # a quantity's unit: it converts the capture of the number before it
                target, conversions = unit[0]
                element.convert = cap_index[target]
                element.units = [[c.pre, c.mul, c.div] for c in (conversions[code] for code in element.accepts)]
            ir_elements.append(element)
            before = kinds
        lowered.append(
            ir.Rule(
                name=d.name.text,
                description=d.description.text if d.description is not None else "",
                heat=heat,
                freq=freq,
                source_order=order,
                gate=gate,
                elements=ir_elements,
                captures=[ir.Capture(c.name, c.kind, c.dimension) for c in captures.values()],
                requirements=requirements,
                channels=uses,
                observe=d.observe,
            )
        )
    lowered.sort(key=lambda r: (-(r.heat * r.freq), r.source_order))
    return lowered, channels


def _gap(e: ast.Element) -> int:
    """An element's gap: the lexemes allowed before it (none written: 0, adjacent)."""
    return int(e.gap.value) if e.gap is not None else 0


def _with_years(elements: list[tuple], code_kinds: list[int]) -> list[tuple]:
    """The (element, accepts) pairs of a pattern, where a `number` with a unit right after
    it or right before it (no gap) also accepts a date: the lexer reads a year written alone
    as a date ("in 2003"), but beside a unit four such digits are a quantity ("glucose 2001
    mg/dL", "$2000"), docs/semantics.md §3."""

    def unit(accepts: list[int]) -> bool:
        return bool(accepts) and all(code_kinds[c] == ir.KIND_UNIT for c in accepts)

    out = []
    for i, (e, accepts, *rest) in enumerate(elements):
        if ir.LEX_NUMBER in accepts and ir.LEX_DATE not in accepts:
            after = i + 1 < len(elements) and not _gap(elements[i + 1][0]) and unit(elements[i + 1][1])
            before = i > 0 and not _gap(e) and unit(elements[i - 1][1])
            if after or before:
                accepts = [*accepts, ir.LEX_DATE]
        out.append((e, accepts, *rest))
    return out


def _operand(o: ast.Operand, cap_index: dict[str, int]) -> ir.Operand:
    if isinstance(o, ast.CaptureRead):
        return ir.Operand(capture=cap_index[o.text])
    return ir.Operand(const=o.const)
