"""`OUT.report.md`: what `heatc tune` changed and why, rule by rule, for the person who
reviews the tuned heatmap before it is built and deployed.

Public surface: `render_report(config, result, heatmap, module_sha256)`.
"""

from __future__ import annotations

from heatc import __version__
from heatc.heatmap.format import Heatmap
from heatc.tune.tiers import COVERAGE

SHOWN = 40  # rows of a long list


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _rate(x: float) -> str:
    return f"{x:.4f}"


def _cell(hm: Heatmap, index: int | None) -> str:
    if index is None:
        return "(rule file)"
    c = hm.cells[index]
    return " … ".join(p for p in c.pair if p) + (f" {c.unit}" if c.unit else "")


def render_report(config, result, hm: Heatmap, module_sha: str) -> str:
    r = result
    t = r.traffic
    budget = config.alarm_budget
    rejections = sum(len(js) for where in t.rejections.values() for js in where.values())
    lines = [
        f"# {config.heatmap} → {config.output}: tuned by heatc tune",
        "",
        f"heatc {__version__}. Tuning is deterministic: the same inputs give the same files. Summary: {r.summary}.",
        "",
        "## What it was tuned from",
        "",
        f"- module `{hm.name}`, sha256 `{module_sha}` "
        + (f"(the build {config.build})" if config.build else "(of the heatmap's build)")
        + ": every report names it",
        f"- {len(t.reports):,} audit reports, {t.checked:,} checked (a rule read a value there), "
        f"{sum(t.events.values()):,} match events, {rejections:,} rejections",
        "",
        "| reports file | sha256 | lines | reports | skipped |",
        "|---|---|---|---|---|",
        *[f"| {f.path} | `{f.sha256[:16]}…` | {f.lines:,} | {f.reports:,} | {len(f.skipped)} |" for f in r.files],
        "",
    ]
    if r.labels is not None:
        counts = {k: sum(1 for v in t.labels.values() if v == k) for k in ("error", "false_alarm")}
        lines += [
            f"- labels {r.labels.path} (sha256 `{r.labels.sha256[:16]}…`): {r.labels.lines:,} lines, "
            f"{r.labels.used:,} used ({counts['error']:,} events labelled error, {counts['false_alarm']:,} false alarm), "
            f"{len(r.labels.skipped)} skipped (listed below)",
        ]
    else:
        lines.append("- no labels: no rule is changed; rules that reject often are listed as suspects")
    if r.scrape is not None:
        lines.append(
            f"- metrics {r.scrape.source} (sha256 `{r.scrape.sha256[:16]}…`): {r.scrape.reports:,} responses checked"
            + (f"; {r.scrape.other:,} counts under rule `_other` not used" if r.scrape.other else "")
        )
    lines += [
        f"- alarm budget: {budget:g} false alarms per checked response that the rule changes and the policy may leave",
        "",
    ]

    lines += ["## Rules", ""]
    changed = [d for d in r.decisions if d.action != "keep"]
    if r.alarms is not None:
        (fa0, c0), (fa1, c1) = r.alarms.start, r.alarms.end
        lines += [
            f"The labelled traffic at today's cut-offs: {_rate(fa0)} → {_rate(fa1)} false alarms per checked response, "
            f"{c0:.1f} → {c1:.1f} errors caught, over the {len(r.alarms.p):,} responses whose errors the labels tell "
            f"(budget {budget:g}). Narrowings that keep every labelled error of their rule out are made wherever they "
            "remove labelled false alarms; changes that cost errors only while the budget is not met, the cheapest "
            "(fewest errors lost per false alarm removed) first.",
            "",
        ]
    if r.labels is None:
        lines.append("Without labels nothing is changed.")
    elif not changed:
        lines.append(f"No reviewed rule is changed ({len(r.decisions)} reviewed).")
    else:
        lines += [
            "False alarms are per checked response, before → after (for the policy: an observe-only or dropped rule "
            "raises none); errors are the labelled errors among the rule's rejections, kept → acted on after.",
            "",
            "| rule | cell | decision | false alarms | errors | why |",
            "|---|---|---|---|---|---|",
        ]
        for d in sorted(changed, key=lambda d: (-d.false_alarms, d.rule)):
            lines.append(
                f"| `{d.rule}` | {_cell(hm, d.cell)} | **{d.action}** | {_rate(d.false_alarms)} → {_rate(d.after)} | "
                f"{d.errors} → {d.kept} | {d.why} |"
            )
        kept = [d for d in r.decisions if d.action == "keep"]
        if kept:
            lines += ["", f"Reviewed, unchanged: {_rules(len(kept))}, with their false alarms per checked response"
                      + (" (" + ", ".join(f"`{d.rule}` {_rate(d.false_alarms)}" for d in kept[:SHOWN]) + ")")]  # fmt: skip
    lines.append("")
    if r.suspects:
        lines += [
            "### Suspects (nothing changed)",
            "",
            "Rules whose rejections nobody reviewed, rejecting in more than the budget's share of the checked "
            "responses: label their rejections to tune them.",
            "",
            "| rule | cell | rejects in | rejections | values rejected most (count) | held-out false alarms when learned |",
            "|---|---|---|---|---|---|",
        ]
        for d in r.suspects[:SHOWN]:
            learned = hm.cells[d.cell].false_alarms if d.cell is not None else None
            values = ", ".join(f"{v:g} ({n})" for v, n in d.values) or "—"
            lines.append(
                f"| `{d.rule}` | {_cell(hm, d.cell)} | {_pct(d.false_alarms)} | {d.rejections:,} | {values} | "
                f"{'—' if learned is None else f'{learned:g}'} |"
            )
        if len(r.suspects) > SHOWN:
            lines.append(f"\n… and {len(r.suspects) - SHOWN} more")
        lines.append("")

    tp = r.tiers
    lines += [
        "## Tiers",
        "",
        f"Counted: {tp.source}. Each cell's `freq` is now its rule's observed rate (a rule never seen: one low "
        "enough to follow every rule seen, so the unseen keep their order by heat); rules are ordered by heat × freq "
        f"and the L2 tier ends after the last of the rules that produced {_pct(COVERAGE)} of the observed events. "
        "Rules of hand-written rule files keep the freq their source gives.",
        "",
        f"- {_rules(len(tp.hot))} produced {_pct(COVERAGE)} of the {tp.total:,} observed events",
        f"- L2 tier: {_rules(len(tp.l2_rules))}, {tp.l2_bytes:,} bytes, covering {_pct(tp.coverage)} of the events "
        f"(was {_rules(len(tp.base_l2))} covering {_pct(tp.base_coverage)}); device tier {tp.device_bytes:,} bytes",
    ]
    if not tp.fits:
        lines.append(
            f"- **the size does not allow it**: the hot rules end {tp.needed:,} bytes in, past the L2 limit of "
            f"{tp.l2_max:,} bytes (`--l2-max`)"
        )
    for title, names in (("entered the L2 tier", tp.entered), ("left the L2 tier", tp.left)):
        if names:
            shown = ", ".join(f"`{n}` ({tp.counts[n]:,})" for n in names[:SHOWN])
            lines.append(f"- {title} ({len(names)}): {shown}" + (" …" if len(names) > SHOWN else ""))
    lines += ["", "`heatc build` the tuned heatmap, then `heatc inspect --tiers build/NAME` shows the plan.", ""]

    lines += ["## Policy", ""]
    p = r.policy
    if p is None:
        lines.append("Without labels the confidence policy's cut-offs are not changed.")
    else:
        lines += [
            f"Over {p.known:,} responses whose errors the labels tell ({p.unknown:,} left out: a rejection of a rule "
            f"nobody reviewed), holding {p.errors:.1f} errors:",
            "",
            "| | pass | confirm | false alarms per checked response | errors caught |",
            "|---|---|---|---|---|",
            f"| today (today's rules) | {p.today.pass_at:g} | {p.today.confirm_at:g} | "
            f"{_rate(p.today_point.false_alarms)} | {p.today_point.caught:.1f} |",
        ]
        if p.pass_point is not None:
            lines.append(
                f"| chosen (tuned rules) | {p.chosen.pass_at:g} | {p.chosen.confirm_at:g} | "
                f"{_rate(p.pass_point.false_alarms)} | {p.pass_point.caught:.1f} |"
            )
        if p.confirm_point is not None:
            lines.append(
                f"| escalated at the chosen confirm | | {p.chosen.confirm_at:g} | "
                f"{_rate(p.confirm_point.false_alarms)} | {p.confirm_point.caught:.1f} |"
            )
        lines += ["", *[f"- {why}" for why in p.why]]
        if r.picture is not None:
            lines += ["", f"![the Pareto front]({r.picture.name})", ""]
        lines += [
            "The front (tuned rules): "
            + ", ".join(f"{q.cut:g}: {_rate(q.false_alarms)}, {q.caught:.1f}" for q in p.front[:SHOWN]),
            "",
        ]

    skipped = [s for f in r.files for s in f.skipped] + (r.labels.skipped if r.labels else [])
    if skipped or r.dropped_expects:
        lines += ["## Skipped", ""]
        lines += [f"- {s.where}: {s.why}" for s in skipped[: 5 * SHOWN]]
        if len(skipped) > 5 * SHOWN:
            lines.append(f"- … and {len(skipped) - 5 * SHOWN} more")
        lines += [f"- expect {text!r} left out: {why}" for text, why in r.dropped_expects]
        lines.append("")
    lines += [
        "## Next",
        "",
        "```sh",
        f"heatc diff {config.heatmap} {config.output}",
        f"heatc build {config.output} && heatc inspect --tiers build/{hm.name}",
        "```",
        "",
    ]
    return "\n".join(lines)


def _rules(n: int) -> str:
    return f"{n} rule{'s' * (n != 1)}"
