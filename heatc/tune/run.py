"""`heatc tune`: re-plan a deployed heatmap from what its traffic showed (docs/tune.md).

1. **Identity.** The heatmap is compiled; its module's sha256 (or, with `build`, the deployed
   build's, whose inputs must be this heatmap) is what every report must name (`inputs`).
2. **Traffic.** The reports, the reviewers' labels joined to their events, and optionally a
   metrics scrape (`inputs`, `scrape`, `traffic`). No report, or none holding a match, is an
   error: nothing is written.
3. **Rules** (`rules`): with labels, each reviewed rule over the false-alarm budget is narrowed,
   set observe-only or dropped; rules nobody reviewed are listed as suspects, unchanged.
4. **Tiers** (`tiers`): each cell's `freq` becomes its rule's observed rate, and the L2 tier
   is sized to hold the rules that produced 95 % of the observed events.
5. **Policy** (`policy`): with labels, the confidence policy's cut-offs chosen on the Pareto
   front of false alarms against errors caught (a PNG of it beside the output).
6. **Output.** The tuned heatmap (its expects that no longer hold, or name a dropped rule, left
   out and listed), its provenance (`provenance.tuned`: the inputs' sha256s, counts, budget),
   and `OUT.report.md`, which says what changed and why, rule by rule (`report`). Each file is
   written atomically, the heatmap last; the same inputs give the same bytes.

Public surface: `TuneConfig`, `TuneResult`, `tune(config, log)`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from heatc import __version__
from heatc.errors import Diagnostic, HeatError
from heatc.tune.inputs import FileInfo, Labels, read_labels, read_reports
from heatc.tune.policy import PolicyChoice, choose_policy, draw_front
from heatc.tune.rules import Alarms, Decision, decide, suspects
from heatc.tune.scrape import Scrape, read_scrape
from heatc.tune.tiers import TierPlan, observed_freq, plan_tiers, unseen_freq
from heatc.tune.traffic import Traffic, rule_infos

DEFAULT_BUDGET = 0.01
DEFAULT_ESCALATE_SHARE = 0.1


@dataclass
class TuneConfig:
    heatmap: Path
    reports: list[Path]
    output: Path
    labels: Path | None = None
    metrics: str | None = None  # a scrape file, or a URL on this machine
    alarm_budget: float = DEFAULT_BUDGET  # false alarms per checked response the changes may leave
    escalate_share: float = DEFAULT_ESCALATE_SHARE  # of the budget, that escalations may spend
    build: Path | None = None  # the deployed build, where another heatc built it
    l2_max: int | None = None  # bytes the L2 tier may take (default: the heatmap's tiers.l2_bytes)
    skip_malformed: bool = False  # list lines that are not reports (labels) as skipped, not fail


@dataclass
class TuneResult:
    output: Path
    report: Path
    picture: Path | None
    decisions: list[Decision]
    alarms: Alarms | None  # the labelled traffic's false alarms and errors caught, before and after the rule changes
    suspects: list[Decision]
    tiers: TierPlan
    policy: PolicyChoice | None
    files: list[FileInfo]
    labels: Labels | None
    scrape: Scrape | None
    traffic: Traffic
    dropped_expects: list[tuple[str, str]] = field(default_factory=list)  # (text, why)
    summary: str = ""


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _relative(path: str | Path, directory: Path) -> str:
    try:
        return os.path.relpath(Path(path).resolve(), directory.resolve())
    except ValueError:
        return str(path)


def _check(config: TuneConfig) -> None:
    out = Path(config.output)
    if out.suffix not in (".yaml", ".yml"):
        raise HeatError(Diagnostic(str(out), 0, 0, "the tuned heatmap is a .yaml file"))
    if out.resolve() == Path(config.heatmap).resolve():
        raise HeatError(Diagnostic(str(out), 0, 0, "write the tuned heatmap beside the deployed one (heatc diff "
                                   "compares the two), not over it"))  # fmt: skip
    if not 0.0 <= config.alarm_budget <= 1.0:
        raise HeatError(Diagnostic("--alarm-budget", 0, 0, f"a share between 0 and 1, got {config.alarm_budget:g}"))
    if not 0.0 < config.escalate_share <= 1.0:
        raise HeatError(Diagnostic("--escalate-share", 0, 0, f"a share in (0, 1], got {config.escalate_share:g}"))
    if not config.reports:
        raise HeatError(
            Diagnostic("--reports", 0, 0, "no report file given: tuning reads the deployment's audit reports")
        )
    if not out.parent.is_dir():
        raise HeatError(Diagnostic(str(out), 0, 0, f"no directory {out.parent} to write it in"))


def _module_sha256(config: TuneConfig, program) -> str:
    if config.build is None:
        from heatc.verify.backends import module_info

        return module_info(program).sha256
    from heatc_runtime import ModuleError
    from heatc_runtime.backends.loader import read_manifest

    try:
        manifest, _ = read_manifest(Path(config.build))
    except ModuleError as e:
        raise HeatError(Diagnostic(str(config.build), 0, 0, str(e))) from None
    inputs = manifest.get("build", {}).get("inputs", [])
    made_from = [i.get("sha256") for i in inputs if isinstance(i, dict) and i.get("role") == "heatmap"]
    if made_from != [_sha256(config.heatmap)]:
        raise HeatError(
            Diagnostic(str(config.build), 0, 0, f"this build was not made from {config.heatmap} as it is now "
                       "(its manifest records another heatmap sha256): tune the heatmap the build was made from")
        )  # fmt: skip
    return str(manifest["wasm"]["sha256"])


def _check_rules(reports, program) -> None:
    known = {r.name for r in program.rules}
    for report in reports:
        for e in report.events:
            if e.rule not in known:
                path, line = report.where.rsplit(":", 1)
                raise HeatError(Diagnostic(path, int(line), 1, f"names rule {e.rule!r}, which the build does not "
                                           "have, though it names the build's module: the report was altered"))  # fmt: skip


def tune(config: TuneConfig, log=print) -> TuneResult:
    """Tune; writes the heatmap, its report and (with labels) the picture of the policy's front."""
    import yaml

    from heatc.heatmap.build import compile_heatmap
    from heatc_runtime.reports.audit import Policy

    _check(config)
    heatmap = Path(config.heatmap)
    program, lowered, hm = compile_heatmap(heatmap)
    module_sha = _module_sha256(config, program)
    reports, files = read_reports(list(config.reports), module_sha, hm.name, config.skip_malformed)
    _check_rules(reports, program)
    if not reports:
        skipped = sum(len(f.skipped) for f in files)
        raise HeatError(Diagnostic(str(config.reports[0]), 0, 0, "no reports to tune from" + (
            f" ({skipped} malformed lines skipped)" if skipped else " (the files are empty)")))  # fmt: skip
    labels = read_labels(config.labels, reports, config.skip_malformed) if config.labels else None
    traffic = Traffic(reports, labels.verdicts if labels else {})
    if not traffic.checked:
        raise HeatError(Diagnostic(str(config.reports[0]), 0, 0, f"none of the {len(reports):,} reports holds a "
                                   "match: the rules read no value in this traffic, so there is nothing to tune from"))  # fmt: skip
    scrape = read_scrape(config.metrics, hm.name) if config.metrics else None
    if scrape is not None and not scrape.reports:
        raise HeatError(Diagnostic(config.metrics, 0, 0, f"the scrape counts no response of {hm.name!r} checked"))
    infos = rule_infos(hm, lowered, program)
    today = Policy(*hm.policy) if hm.policy is not None else Policy()
    base_heat = {r.name: 0.0 if r.observe else r.heat for r in program.rules}
    decisions, alarms = [], None
    if traffic.labels:
        decisions, alarms = decide(traffic, infos, config.alarm_budget, hm.margin_factor, base_heat, today.pass_at)
    listed = suspects(traffic, infos, config.alarm_budget)
    changes = {d.rule: d.change for d in decisions if d.change is not None}

    doc = yaml.safe_load(heatmap.read_text(encoding="utf-8-sig"))
    out_dir = Path(config.output).parent
    _rebase(doc, heatmap.parent, out_dir)
    if scrape is not None:
        counts, responses = Counter(scrape.rule_counts), scrape.reports
        source = f"responses in which each rule triggered, of {responses:,} in the metrics scrape"
    else:
        counts, responses = traffic.events, len(reports)
        source = f"match events in the {responses:,} reports"
    unseen = unseen_freq([info.heat for info in infos.values()], responses)
    for rule, info in infos.items():
        change = changes.get(rule)
        if info.cell is None:
            continue
        cell = doc["cells"][info.cell]
        cell["freq"] = observed_freq(counts[rule], responses, unseen)
        if change is not None and change.action == "narrow":
            cell["range"] = list(change.bounds)
        elif change is not None and change.action == "observe":
            cell["observe"] = True
    dropped_cells = sorted((infos[r].cell for r, c in changes.items() if c.action == "drop"), reverse=True)
    for k in dropped_cells:
        del doc["cells"][k]
    dropped_rules = {r for r, c in changes.items() if c.action == "drop"}
    dropped_expects = _without_dropped(doc, dropped_rules)
    if dropped_rules:
        _keep_names(doc, out_dir, infos, dropped_rules)

    tuned, _, _ = _compile(doc, out_dir)
    l2_max = config.l2_max if config.l2_max is not None else hm.tiers.get("l2_bytes", 0)
    tiers = plan_tiers(tuned, program, hm.tiers, counts, source, l2_max)
    doc["tiers"] = {"l2_bytes": tiers.l2_bytes, "device_bytes": tiers.device_bytes}

    choice = None
    if traffic.labels:
        heat = {r.name: 0.0 if r.observe else r.heat for r in tuned.rules}
        choice = choose_policy(traffic, base_heat, heat, changes, today, config.alarm_budget, config.escalate_share)
        if choice.chosen != today:
            doc["policy"] = {"pass": choice.chosen.pass_at, "confirm": choice.chosen.confirm_at}

    from heatc.learn.heatmaps.emit import confirmed_expects

    kept = confirmed_expects(doc, out_dir)
    dropped_expects += [
        (e["text"], "no longer borne out by the tuned rules") for e in doc.get("expects", []) if e not in kept
    ]
    doc["expects"] = kept
    _compile(doc, out_dir)  # (what is written compiles, expects and all)

    result = TuneResult(
        Path(config.output), _beside(config.output, ".report.md"), _beside(config.output, ".policy.png") if choice else None,
        decisions, alarms, listed, tiers, choice, files, labels, scrape, traffic, dropped_expects,
    )  # fmt: skip
    result.summary = _summary(result)
    doc.setdefault("provenance", {})
    history = doc["provenance"].get("tuned")
    doc["provenance"]["tuned"] = [
        *(history if isinstance(history, list) else []),
        _provenance(config, result, module_sha),
    ]

    from heatc.learn.heatmaps.emit import write_heatmap
    from heatc.tune.report import render_report

    if result.picture is not None:
        _atomic(result.picture, lambda tmp: draw_front(choice, tmp))
    text = render_report(config, result, hm, module_sha)
    _atomic(result.report, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    header = (
        f"Tuned by `heatc tune` (heatc {__version__}) from {heatmap.name} on {len(reports):,} audit reports"
        + (f" and {labels.used:,} reviewer labels" if labels else "")
        + f"; what changed and why: {result.report.name}."
    )
    write_heatmap(config.output, doc, header)
    log(result.summary)
    return result


def _beside(output: Path, suffix: str) -> Path:
    output = Path(output)
    return output.with_name(output.name.removesuffix(".yaml").removesuffix(".yml") + suffix)


def _atomic(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _compile(doc: dict, directory: Path):
    from heatc.learn.heatmaps.emit import compile_document

    return compile_document(doc, directory)


def _rebase(doc: dict, source: Path, target: Path) -> None:
    """Relative paths (rule files, a tokenizer file or folder) as seen from the output's folder."""
    if isinstance(doc.get("rules"), list):
        doc["rules"] = [_relative(source / p, target) for p in doc["rules"]]
    tok = doc.get("tokenizer")
    if isinstance(tok, dict):
        for key in ("file", "dir"):
            if isinstance(tok.get(key), str):
                tok[key] = _relative(source / tok[key], target)


def _keep_names(doc: dict, directory: Path, infos: dict, dropped: set[str]) -> None:
    """A rule's name comes from its cell's pair unless the cell names it, with a suffix where
    two would share one: with a cell gone, a later one may take its name. Such cells are
    named as before, so that reports, metrics and labels keep meaning the same rules."""
    gone = sorted(infos[r].cell for r in dropped)
    # each remaining rule's cell, at its place once the dropped cells are gone
    wanted = {
        info.cell - sum(1 for g in gone if g < info.cell): name
        for name, info in infos.items()
        if info.cell is not None and name not in dropped
    }
    for attempt in range(3):
        _, lowered, _ = _compile(doc, directory)
        now = {index: name for name, index in lowered.cell_index.items()}
        moved = [index for index, name in wanted.items() if now.get(index) != name]
        if not moved:
            return
        for index in moved if attempt < 2 else wanted:  # (last: name them all)
            doc["cells"][index]["name"] = wanted[index]


def _without_dropped(doc: dict, dropped: set[str]) -> list[tuple[str, str]]:
    out = []
    kept = []
    for e in doc.get("expects", []) or []:
        named = set(e.get("passes", []) or []) | set(e.get("rejects", []) or [])
        if named & dropped:
            out.append((e["text"], f"names {', '.join(sorted(named & dropped))}, dropped"))
        else:
            kept.append(e)
    if "expects" in doc:
        doc["expects"] = kept
    return out


def _summary(r: TuneResult) -> str:
    by = Counter(d.action for d in r.decisions)
    parts = [
        f"{by['narrow']} narrowed, {by['observe']} observe-only, {by['drop']} dropped"
        if r.labels is not None
        else "no labels: no rule changed",
        f"{len(r.suspects)} suspect{'s' * (len(r.suspects) != 1)} listed",
        f"L2 tier: {len(r.tiers.l2_rules)} rule{'s' * (len(r.tiers.l2_rules) != 1)} ({r.tiers.l2_bytes:,} bytes) cover {100 * r.tiers.coverage:.1f} % "
        f"of the observed events",
    ]
    if r.policy is not None:
        a, b = r.policy.today, r.policy.chosen
        parts.append(
            f"policy pass {a.pass_at:g} → {b.pass_at:g}, confirm {a.confirm_at:g} → {b.confirm_at:g}"
            if a != b
            else "policy unchanged"
        )
    return "; ".join(parts)


def _provenance(config: TuneConfig, r: TuneResult, module_sha: str) -> dict:
    out_dir = Path(config.output).parent
    entry: dict = {
        "by": f"heatc tune {__version__}",
        "base": {"heatmap": _relative(config.heatmap, out_dir), "sha256": _sha256(config.heatmap)},
        "module_sha256": module_sha,
        "reports": {
            "count": len(r.traffic.reports),
            "checked": r.traffic.checked,
            "files": [
                {
                    "file": _relative(f.path, out_dir),
                    "sha256": f.sha256,
                    "lines": f.lines,
                    "reports": f.reports,
                    "skipped": len(f.skipped),
                }
                for f in r.files
            ],
        },
        "alarm_budget": config.alarm_budget,
    }
    if r.labels is not None:
        entry["labels"] = {
            "file": _relative(r.labels.path, out_dir), "sha256": r.labels.sha256, "lines": r.labels.lines,
            "used": r.labels.used, "skipped": len(r.labels.skipped),
        }  # fmt: skip
        entry["escalate_share"] = config.escalate_share
    if r.scrape is not None:
        source = r.scrape.source if "://" in r.scrape.source else _relative(r.scrape.source, out_dir)
        entry["metrics"] = {"source": source, "sha256": r.scrape.sha256, "responses": r.scrape.reports}
    entry["summary"] = r.summary
    entry["report"] = r.report.name
    return entry
