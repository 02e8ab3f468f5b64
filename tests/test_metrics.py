"""Prometheus metrics (docs/metrics.md): the example's endpoint scraped over HTTP while a
batch checks a known text, every counter equal to what the reports say; multiprocess mode
(a worker process writes, the server reads); bounded labels; an unattached checker untouched."""

import importlib.util
import os
import subprocess
import sys
import textwrap
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from support import REPO

from heatc.lang.compiler import compile_file, compile_source
from heatc.verify.backends import native_checker, wasm_checker
from heatc_runtime.backends.checker import Checker
from heatc_runtime.metrics import METRICS, SAMPLE_EVERY, Metrics, multiprocess_registry
from heatc_runtime.reports.audit import Policy, audit_snapshots

pytestmark = pytest.mark.needs("metrics")

EXAMPLES = REPO / "examples"
LEGAL = compile_file(EXAMPLES / "legal.heat")
TEXT = (
    "Customer shall pay within 30 days. Late invoices: payment is due within 60 days; "
    "this Agreement is governed by the laws of the State of New York. Notice: 10 days."
)


def _example():
    spec = importlib.util.spec_from_file_location("metrics_server", EXAMPLES / "metrics_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def samples(text: str) -> dict:
    """(name, frozenset(labels)) → value of every sample in an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(scraped: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in scraped.items() if n == name and set(labels.items()) <= set(ls))


@pytest.mark.parametrize("every", [SAMPLE_EVERY, 1], ids=["sampled", "every-step"])
@pytest.mark.parametrize("checker_for", [wasm_checker, native_checker], ids=["wasm", "native"])
def test_scraped_counters_equal_the_reports(checker_for, every):
    example = _example()
    registry = CollectorRegistry()
    # nothing flushes on a timer: the scrape must
    metrics = Metrics(registry, flush_interval_s=3600, sample_every=every)
    checker = metrics.attach(checker_for(LEGAL).clone())
    server, port = example.start(registry, 0, "127.0.0.1")
    try:
        checker.set_token_table(sorted(set(example.characters(TEXT))))
        batch = checker.batch(1)
        streamed = example.check_streamed(checker, batch, metrics, TEXT)  # a decode loop, one character a step
        scanned = checker.scan("Glucose 5000 mg/dL; payment within 45 days.").audit()
        conflicts = checker.conflicts(["pay within 30 days.", "Payment is due within 60 days.", "pay 30 days."])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            exposition = response.read().decode()
        scraped = samples(exposition)
    finally:
        server.shutdown()
    steps = len(TEXT)  # characters: one token each
    module = {"module": "legal"}
    assert value(scraped, "heatc_tokens_total", **module) == steps
    # one step in `every` is timed: the 64th, 128th, … (every step with every=1)
    assert value(scraped, "heatc_step_seconds_count", **module) == steps // every >= 2
    assert value(scraped, "heatc_step_token_seconds_count", **module) == steps // every
    assert 0 < value(scraped, "heatc_step_seconds_sum", **module) < 60
    # the snapshots the batch published, less each sequence's final one, as the report was built from
    batch.reset()
    replay = []
    table = {t: i for i, t in enumerate(checker.token_table)}
    for tok in example.characters(TEXT):
        replay += type(batch).feed_ids(batch, [table[tok]]).get(0, [])
    replay += type(batch).finish(batch)[0]
    assert audit_snapshots(checker.module_info, TEXT, replay) == streamed  # (uninstrumented replay)
    assert value(scraped, "heatc_snapshots_total", **module) == sum(not s.final for s in replay) > 0
    for report, source in ((streamed, "stream"), (scanned, "scan")):
        assert value(scraped, "heatc_reports_total", source=source, action=report.action, **module) == 1
        assert value(scraped, "heatc_reports_total", source=source, **module) == 1
        assert value(scraped, "heatc_checked_bytes_total", source=source, **module) == report.text_bytes
    for rule in {r.name for r in streamed.triggered + scanned.triggered}:
        for verdict in ("CONFIRMED", "REJECTED"):
            expected = sum(r.name == rule and r.verdict.name == verdict for r in streamed.triggered + scanned.triggered)
            assert value(scraped, "heatc_verdicts_total", rule=rule, verdict=verdict, **module) == expected
    assert value(scraped, "heatc_verdicts_total", **module) == len(streamed.triggered) + len(scanned.triggered)
    assert value(scraped, "heatc_conflict_checks_total", **module) == 1
    assert value(scraped, "heatc_conflicts_total", rule="term_days_consistent", **module) == len(conflicts) == 1
    families = {f.name for f in text_string_to_metric_families(exposition)}  # (counters without _total)
    assert {name.removesuffix("_total") for name in METRICS} <= families


def test_metrics_from_a_worker_process(tmp_path, monkeypatch):
    """prometheus_client's multiprocess mode, as in a vLLM worker: the worker counts and flushes
    to PROMETHEUS_MULTIPROC_DIR; the serving process reads the same totals."""
    directory = tmp_path / "prom"
    directory.mkdir()
    worker = textwrap.dedent(
        """
        from heatc.verify.backends import wasm_checker
        from heatc.lang.compiler import compile_file
        from heatc_runtime.metrics import Metrics
        checker = wasm_checker(compile_file(sys.argv[1]))
        metrics = Metrics(sample_every=2)
        metrics.attach(checker)
        checker.set_token_table([b"pay ", b"within ", b"30 ", b"days. ", b"60 "])
        batch = checker.batch(3)
        for i in (0, 1, 2, 3, 0, 1, 4, 3):
            batch.feed_ids([i, i, i])
        batch.finish()
        checker.scan("pay within 30 days. pay within 60 days.")
        """
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    r = subprocess.run(
        [sys.executable, "-c", "import sys\n" + worker, str(EXAMPLES / "legal.heat")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    reader = textwrap.dedent(
        """
        from prometheus_client import generate_latest
        from heatc_runtime.metrics import multiprocess_registry
        print(generate_latest(multiprocess_registry()).decode())
        """
    )
    r = subprocess.run([sys.executable, "-c", reader], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    scraped = samples(r.stdout)
    assert value(scraped, "heatc_tokens_total", module="legal") == 8 * 3
    assert value(scraped, "heatc_step_seconds_count", module="legal") == 8 // 2  # one step in two timed
    assert value(scraped, "heatc_snapshots_total", module="legal") == 2 * 3  # "days." twice in each
    assert value(scraped, "heatc_reports_total", module="legal", source="scan", action="escalate") == 1
    assert value(scraped, "heatc_verdicts_total", rule="term_days_consistent", verdict="REJECTED") == 1
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with pytest.raises(ValueError):  # without the directory, the serving side refuses to start
        multiprocess_registry()


def test_an_engine_driver_reports_every_sequence_it_ends():
    """The engine adapters' Driver (no model here): its checker attached, each sequence ended
    adds its audit report, every step of the batch its tokens, guard its masks."""
    import numpy as np

    from heatc_runtime.engines.core import Driver
    from heatc_runtime.engines.options import RowOptions
    from heatc_runtime.engines.tokens import TokenTable

    vocab = [b"", b"Glucose", b" ", b"5", b"0", b"000", b" mg/dL", b".", b" heart rate", b"8"]
    registry = CollectorRegistry()
    metrics = Metrics(registry, flush_interval_s=3600, sample_every=1)
    medical = compile_file(EXAMPLES / "medical.heat")
    driver = Driver(wasm_checker(medical), TokenTable("test", vocab, "test", ""), 3, metrics=metrics)
    rows = {0: [1, 2, 3, 5, 6, 7], 1: [8, 2, 9, 4, 7]}  # glucose 5000 mg/dL; heart rate 80
    driver.start(0, RowOptions("guard", k=4, policy="steer"))
    driver.start(1, "observe")
    reports = []
    for step in range(6):
        if step == 3:  # glucose 5: "000" (5000) and " mg/dL" (5 mg/dL) are masked, "0" and "." pass
            ok = driver.guard(np.array([0]), np.array([[5, 4, 7, 6]]), np.ones((1, 4), bool)).ok
            assert ok.tolist() == [[False, True, True, False]]
        live = [r for r in rows if step < len(rows[r])]
        driver.feed(np.array(live), np.array([rows[r][step] for r in live]))
        reports += [driver.end(r) for r in live if step == len(rows[r]) - 1]
    audits = [r.audit(driver.checker.module_info) for r in reports]
    scraped = samples(_exposition(registry))
    module = {"module": "medical"}
    assert value(scraped, "heatc_tokens_total", **module) == 6 * 3  # six steps of the whole batch
    assert value(scraped, "heatc_step_seconds_count", **module) == 6
    assert value(scraped, "heatc_reports_total", source="stream", **module) == len(audits) == 2
    for a in audits:
        assert value(scraped, "heatc_reports_total", source="stream", action=a.action, **module) >= 1
    assert value(scraped, "heatc_checked_bytes_total", **module) == sum(a.text_bytes for a in audits)
    triggered = [(r.name, r.verdict.name) for a in audits for r in a.triggered]
    assert ("glucose_value", "REJECTED") in triggered
    for rule, verdict in set(triggered):
        want = triggered.count((rule, verdict))
        assert value(scraped, "heatc_verdicts_total", rule=rule, verdict=verdict, **module) == want
    assert value(scraped, "heatc_verdicts_total", **module) == len(triggered)
    assert value(scraped, "heatc_guard_masks_total", **module) == 2 == sum(n for r in reports for _, n, _ in r.masked)
    snapshots = sum(not s.final for r in reports for s in r.prompt_snapshots + r.snapshots)
    assert value(scraped, "heatc_snapshots_total", **module) == snapshots > 0


OWN_POLICY = """ruleset own
policy pass 0.95 confirm 0.1
class glucose keyword = "glucose"
rule glucose_value heat 0.5 {
  match glucose ..3 v:number
  require v in [10, 2000]
}
rule glucose_typical heat 0.9 observe {
  match glucose ..3 v:number
  require v in [60, 400]
}
"""


def test_reports_are_counted_at_the_rule_sets_own_cut_offs():
    """A build with its own policy (`policy pass 0.95 confirm 0.1`, what `heatc tune` writes):
    its scans and streamed sequences are counted by the action their audit reports give —
    "glucose 5000" (confidence 0.5) is `confirm` there, `escalate` at the default cut-offs —
    and an observe-only rule's rejection (500) weighs nothing: `pass`. A policy given to
    Metrics still overrides the build's."""
    import numpy as np

    from heatc_runtime.engines.core import Driver
    from heatc_runtime.engines.options import RowOptions
    from heatc_runtime.engines.tokens import TokenTable

    program = compile_source(OWN_POLICY, "own.heat")
    for override, actions in ((None, {"confirm": 2, "pass": 1}), (Policy(), {"escalate": 2})):
        registry = CollectorRegistry()
        metrics = Metrics(registry, policy=override, flush_interval_s=3600)
        checker = metrics.attach(wasm_checker(program).clone())
        audit = checker.scan("glucose 5000").audit(override)
        assert (audit.confidence, audit.action) == (0.5, "confirm" if override is None else "escalate")
        if override is None:
            assert checker.scan("glucose 500").audit().action == "pass"  # (REJECTED, observe-only)
        vocab = [b"", b"glucose", b" ", b"5", b"000"]
        driver = Driver(checker, TokenTable("test", vocab, "test", ""), 1, metrics=metrics)
        driver.start(0, RowOptions("observe"))
        for token in (1, 2, 3, 4):
            driver.feed(np.array([0]), np.array([token]))
        assert driver.end(0).verdicts["glucose_value"].name == "REJECTED"
        scraped = samples(_exposition(registry))
        counted = {a: value(scraped, "heatc_reports_total", action=a) for a in ("pass", "confirm", "escalate")}
        assert counted == {a: actions.get(a, 0) for a in counted}
        assert value(scraped, "heatc_reports_total", source="stream", module="own") == 1


def test_rule_labels_are_bounded_and_guard_counts():
    registry = CollectorRegistry()
    metrics = Metrics(registry, max_rule_labels=1)
    checker = metrics.attach(wasm_checker(LEGAL).clone())
    checker.scan("pay within 30 days. pay within 60 days. governed by the laws of Delaware.")
    metrics.count_guard_masks(5)
    metrics.count_guard_masks(2, exhausted=True)
    metrics.flush()
    scraped = samples(_exposition(registry))
    rules = {dict(ls)["rule"] for n, ls in scraped if n == "heatc_verdicts_total"}
    assert rules == {"term_days_consistent", "_other"}
    assert value(scraped, "heatc_guard_masks_total") == 7 and value(scraped, "heatc_guard_exhausted_total") == 1
    with pytest.raises(ValueError, match="source must be one of"):
        metrics.count_report(checker.scan("x").audit(), "replay")
    with pytest.raises(TypeError, match="takes a Checker"):
        metrics.attach(object())


def test_an_unattached_checker_runs_its_own_methods():
    """No step method is ever wrapped: a batch counts its steps itself, and only a batch of an
    attached checker times a sample of them."""
    checker = wasm_checker(LEGAL).clone()
    batch = checker.batch(1)
    assert "scan" not in vars(checker) and "feed_ids" not in vars(batch)
    attached = Metrics(CollectorRegistry(), sample_every=4).attach(checker)
    assert attached is checker and vars(checker)["scan"] is not Checker.scan
    watched = checker.batch(1)
    assert "feed_ids" not in vars(watched)
    checker.set_token_table([b"pay ", b"60 "])
    for _ in range(9):
        batch.feed_ids([0])
        watched.feed_ids([1])
    assert batch.counts.steps == watched.counts.steps == 9
    assert batch.counts.step_seconds == []  # a batch made before attach() is not timed
    assert len(watched.counts.step_seconds) == 2  # steps 4 and 8
    with pytest.raises(ValueError, match="power of two"):
        Metrics(CollectorRegistry(), sample_every=48)
    # two Metrics on one registry share its families (a name is registered once per registry)
    registry = CollectorRegistry()
    first, second = Metrics(registry), Metrics(registry)
    first.count_guard_masks(1, module="a")
    second.count_guard_masks(2, module="a")
    assert value(samples(_exposition(registry)), "heatc_guard_masks_total", module="a") == 3


def _exposition(registry) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


def test_dashboard_queries_name_only_real_metrics():
    """examples/grafana_dashboard.json: every series a panel or alert reads is one heatc exports."""
    import json
    import re

    dashboard = json.loads((EXAMPLES / "grafana_dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in dashboard["heatcAlerts"]["groups"] for r in g["rules"]]
    names = {n for e in exprs for n in re.findall(r"\bheatc_[a-z_]+", e)}
    exported = set(METRICS) | {f"{n}_bucket" for n in METRICS if n.endswith("_seconds")}
    assert names and names <= exported, names - exported
    assert {r["alert"] for g in dashboard["heatcAlerts"]["groups"] for r in g["rules"]} >= {"HeatcTriggerRateOutOfBand"}


@pytest.mark.parametrize(
    "call,error,message",
    [
        (lambda m: m.count_snapshots(-1), ValueError, "n must be at least 0, got -1"),
        (lambda m: m.count_guard_masks(-3), ValueError, "n must be at least 0"),
        (lambda m: m.count_guard_masks(2.5), TypeError, "n must be a whole number"),
        (lambda m: m.count_guard_masks(1, exhausted="yes"), TypeError, "exhausted must be a bool"),
        (lambda m: m.observe_step(1, float("nan")), ValueError, "seconds must be a finite duration"),
        (lambda m: m.observe_step(1, float("inf")), ValueError, "seconds must be a finite duration"),
        (lambda m: m.observe_step(1, -1.0), ValueError, "seconds must be a finite duration of 0 or more"),
        (lambda m: m.observe_step(1, "0.1"), TypeError, "seconds must be a number"),
        (lambda m: m.observe_step(0, 0.001), ValueError, "batch_size must be at least 1, got 0"),
        (lambda m: m.observe_step(True, 0.001), TypeError, "batch_size must be a whole number"),
        (lambda m: m.observe_step(1, 0.001, module=5), TypeError, "module must be a module's name"),
        (lambda m: m.count_report("a report"), TypeError, "count_report takes an AuditReport"),
    ],
)
def test_a_bad_report_is_refused_by_the_call_that_makes_it(call, error, message):
    """A negative count raised in the next flush (another caller's) and lost the counts of
    every report before it; observe_step(1, nan) raised IndexError there; inf, -1.0 and a batch
    of 0 were taken."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.count_guard_masks(4, module="a")
    with pytest.raises(error, match=message):
        call(metrics)
    metrics.observe_step(2, 0.001, module="a")
    metrics.flush()
    scraped = samples(_exposition(registry))
    assert value(scraped, "heatc_guard_masks_total", module="a") == 4  # nothing was lost
    assert value(scraped, "heatc_tokens_total", module="a") == 2
    assert value(scraped, "heatc_step_seconds_count", module="a") == 1


def test_module_labels_are_bounded_and_what_closed_checkers_left_is_freed():
    """2,000 modules made 2,000 series per family, and the metrics kept a hook for each."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, max_module_labels=3)
    for k in range(2000):
        metrics.observe_step(1 + k % 4, 1e-5, module=f"m{k}")
        metrics.count_guard_masks(1, module=f"m{k}")
    metrics.flush()
    scraped = samples(_exposition(registry))
    modules = {dict(ls)["module"] for n, ls in scraped if n == "heatc_tokens_total"}
    assert modules == {"m0", "m1", "m2", "_other"}
    assert value(scraped, "heatc_tokens_total") == sum(1 + k % 4 for k in range(2000))  # every step still counted
    assert value(scraped, "heatc_guard_masks_total", module="_other") == 1997
    assert len(metrics._hooks) <= 4 * 4
    metrics.flush()  # (an interval with nothing reported: the idle hooks go)
    assert metrics._hooks == {} and metrics._watched == []
    # batches of checkers that were closed go at the next flush, after their last counts
    checkers = [metrics.attach(wasm_checker(LEGAL).clone()) for _ in range(20)]
    batches = [c.batch(1) for c in checkers]
    for c, b in zip(checkers, batches, strict=True):
        c.set_token_table([b"pay ", b"60 "])
        b.feed_ids([1])
        c.close()
    assert len(metrics._watched) == 20
    metrics.flush()
    assert metrics._watched == []
    assert value(samples(_exposition(registry)), "heatc_tokens_total") == sum(1 + k % 4 for k in range(2000)) + 20
