"""`heatc tune`: re-plan a deployed heatmap from its audit reports, reviewers' labels and
metrics (docs/tune.md). One module a step: `inputs` (reports, labels), `scrape` (Prometheus
text), `traffic` (what was seen), `rules` (false alarms → rules), `tiers` (hot rules → tiers),
`policy` (the confidence policy's cut-offs), `report` (OUT.report.md), `run` (the whole of it).

Public surface: `TuneConfig`, `TuneResult`, `tune`.
"""

from heatc.tune.run import TuneConfig, TuneResult, tune

__all__ = ["TuneConfig", "TuneResult", "tune"]
