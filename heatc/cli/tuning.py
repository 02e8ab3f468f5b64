"""`heatc tune`: re-plan a deployed heatmap from its audit reports, labels and metrics.

Public surface: the command, registered on `heatc.cli.common.app`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from heatc.cli.common import alarm_budget_option, app, fail
from heatc.errors import HeatError

_Budget = alarm_budget_option(
    "False alarms per checked response the rule changes and the policy may leave (labelled traffic)."
)


@app.command()
def tune(
    heatmap: Annotated[Path, typer.Argument(help="The deployed heatmap (.yaml).")],
    more_reports: Annotated[
        list[Path] | None, typer.Argument(help="More report files (after --reports: --reports logs/*.jsonl).")
    ] = None,
    reports: Annotated[
        list[Path] | None,
        typer.Option("--reports", help="Audit reports (JSON lines: heatc scan --json, the engines); files follow it."),
    ] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="The tuned heatmap to write (.yaml).")] = None,
    labels: Annotated[
        Path | None,
        typer.Option("--labels", help="Reviewers' labels: JSON lines {text_sha256, rule, bytes, label}."),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            "--metrics", help="A Prometheus scrape of heatc_runtime.metrics: a file, or a URL on this machine."
        ),
    ] = None,
    alarm_budget: _Budget = 0.01,
    escalate_share: Annotated[
        float,
        typer.Option("--escalate-share", min=0.0, max=1.0, help="The budget's share that escalations may spend."),
    ] = 0.1,
    build: Annotated[
        Path | None,
        typer.Option(
            "--build", help="The deployed build (build/NAME), when another heatc built it: its module's sha256."
        ),
    ] = None,
    l2_max: Annotated[
        int | None,
        typer.Option("--l2-max", min=0, help="Bytes the L2 tier may take (default: the heatmap's tiers.l2_bytes)."),
    ] = None,
    skip_malformed: Annotated[
        bool,
        typer.Option(
            "--skip-malformed", help="List lines that are not reports or labels as skipped instead of failing."
        ),
    ] = False,
) -> None:
    """Re-plan a deployed heatmap from what its traffic showed: hot rules into the L2 tier, rules that
    raise false alarms narrowed, observe-only or dropped, the policy's cut-offs (docs/tune.md)."""
    from heatc.tune import TuneConfig
    from heatc.tune import tune as run_tune

    if more_reports and not reports:
        raise fail(f"heatc tune: give the audit reports after --reports (got {more_reports[0]} without it)")
    if output is None:
        raise fail("heatc tune: give the tuned heatmap to write: -o OUT.yaml")
    config = TuneConfig(
        heatmap, [*(reports or []), *(more_reports or [])], output, labels, metrics, alarm_budget, escalate_share,
        build, l2_max, skip_malformed,
    )  # fmt: skip
    try:
        result = run_tune(config, log=lambda m: None)
    except HeatError as e:
        raise fail(e.render()) from None
    written = [result.output, result.report, *([result.picture] if result.picture else [])]
    sys.stdout.write(f"{result.summary}\nwrote {', '.join(map(str, written))}\n")
