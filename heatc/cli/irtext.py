"""A readable listing of a Program (`heatc ir FILE`)."""

from __future__ import annotations

from heatc import ir, units


def describe(p: ir.Program) -> str:
    layout = ir.state_layout(p)
    lx = p.lexer
    lines = [
        f"program {p.name}" + (f" — {p.title}" if p.title else ""),
        f"  ir version {p.ir_version}, compiled from {p.source}",
        f"  lexer: {lx.n_states} states x {lx.n_classes} byte classes, max lexeme {lx.max_lexeme} bytes, "
        f"chinese numbers {'on' if p.chinese_numbers else 'off'}",
        f"  state: {layout.size} bytes per sequence",
        f"  triggers: window {p.window or 'off'}; "
        f"{sum(1 for f in p.code_flags if f & ir.FLAG_TRIGGER)} trigger literals, "
        f"{sum(1 for f in p.code_flags if f & ir.FLAG_BARRIER)} barrier literals",
        "  policy: " + (f"pass {p.policy[0]:g}, confirm {p.policy[1]:g}" if p.policy else "the runtime's default"),
        "",
        "classes:",
    ]
    for i, c in enumerate(p.classes):
        lits = ", ".join(p.code_name(ir.LEX_LITERAL0 + x) for x in c.literals)
        lines.append(f"  [{i}] {c.name} ({c.kind}{', exact' if c.exact else ''}): {lits}")
    if p.anchor_groups:
        lines += [
            "",
            f"anchors: {len([k for k in p.anchors.keys if k])} terms, table of {p.anchors.size}, "
            f"runs up to {p.anchors.max_lexemes} lexemes",
        ]
        for g in p.anchor_groups:
            lines.append(f"  {g.name} (domain {g.domain!r}): {g.n_terms} terms")
    if p.channels:
        lines += ["", "channels:"]
        lines += [f"  [{i}] {c.name} ({c.kind})" for i, c in enumerate(p.channels)]
    lines += ["", "rules (heat x freq order):"]
    for i, r in enumerate(p.rules):
        lines.append(
            f"  [{i}] {r.name}  heat {r.heat:g} freq {r.freq:g}"
            + ("  observe-only" if r.observe else "")
            + (f"  — {r.description}" if r.description else "")
        )
        if r.gate >= 0:
            lines.append(f"      when {p.anchor_groups[r.gate].name}")
        for j, e in enumerate(r.elements):
            acc = " | ".join(_accepts(p, e.accepts))
            cap = f" -> {r.captures[e.capture].name}" if e.capture >= 0 else ""
            cap += f", {r.captures[e.places].name}" if e.places >= 0 else ""
            gap = f"..{e.gap} " if e.gap else ""
            if e.convert >= 0:  # a quantity's unit: many spellings, one line
                c = r.captures[e.convert]
                acc = f"{len(e.accepts)} units of {c.dimension}"
                cap += f" converts {c.name} to {units.base_unit(c.dimension).shown}"
            lines.append(f"      e{j}: {gap}({acc}){cap}")
        for q in r.requirements:
            lines.append(f"      require {q.text}")
        for u in r.channels:
            lines.append(f"      {u.text}  [channel {u.channel}]")
    return "\n".join(lines) + "\n"


def _accepts(p: ir.Program, codes: list[int]) -> list[str]:
    # Name whole classes where an element accepts all of a class's literals.
    codes_left = set(codes)
    names = []
    for c in p.classes:
        lits = {ir.LEX_LITERAL0 + x for x in c.literals}
        if lits and lits <= codes_left:
            names.append(c.name)
            codes_left -= lits
    names += [p.code_name(x) for x in sorted(codes_left)]
    return names
