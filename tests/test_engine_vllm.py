"""heatc inside vLLM (V1, the CPU build, the engine in-process), with a real model
(SmolLM2-135M-Instruct): requests that choose their module and mode in extra_args and finish
at different steps (so rows move in vLLM's persistent batch) — observe reports what scan()
reports, stop ends at the first rejected snapshot, guard turns rejected outputs into
accepted ones — and bad requests that fail alone while the engine keeps serving.

vLLM runs in a process of its own (tests/engine_vllm_worker.py); the checks here read what
it wrote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import REPO

from heatc.heatmap.build import build
from heatc.lang.compiler import compile_file, compile_source
from heatc.wasm import compile_wasm, write_module
from heatc_runtime import Verdict, load

pytestmark = pytest.mark.needs("vllm", "model")

VITALS = """
ruleset vitals "A heart rate a ward would act on: at most 150"
class heart_rate keyword = "heart rate", "pulse"
rule heart_rate_cap "Heart rate at most 150" {
  match heart_rate ..3 v:number
  require v <= 150
}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict, Path]:
    from heatc_runtime.engines.models import default_model_dir

    root = tmp_path_factory.mktemp("vllm")
    write_module(compile_wasm(compile_file(REPO / "examples" / "medical.heat")), root / "medical")
    write_module(compile_wasm(compile_source(VITALS, "vitals.heat")), root / "vitals")
    minilm = build(REPO / "heatmaps" / "medical.yaml", root / "builds").directory  # its table: MiniLM's
    default_model_dir()  # (converted here, if it must be, so that a failure says so here)
    out = root / "result.json"
    worker = Path(__file__).with_name("engine_vllm_worker.py")
    r = subprocess.run([sys.executable, str(worker), str(out), str(root), str(minilm)], capture_output=True,
                       text=True, timeout=1800)  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(out.read_text(encoding="utf-8")), root


def _scan(root: Path, module: str, text: str):
    report = load(root / module).scan(text)
    return report, [e.to_json(text.encode()) for e in report.events], {k: v.name for k, v in report.verdicts.items()}


def test_observe_reports_what_scan_reports(run):
    result, root = run
    requests = result["requests"]
    for key in ("obs0", "obs1", "obs2", "obs3", "sample0", "sample1", "sample2", "sample3"):
        req = requests[key]
        rep = req["report"]
        _, events, verdicts = _scan(root, req["module"], req["text"])
        assert rep["stream"].encode("latin-1") == req["text"].encode()
        assert rep["token_ids"] == req["token_ids"]
        assert (rep["events"], rep["rules"]) == (events, verdicts), key
    assert [requests[k]["report"]["verdict"] for k in ("obs0", "obs1", "obs2", "obs3")] == [
        "REJECTED", "REJECTED", "CONFIRMED", "REJECTED",
    ]  # fmt: skip
    # the requests finished at different steps (EOS, and the length limits 12 and 24)
    assert len({len(requests[k]["token_ids"]) for k in ("obs0", "obs1", "obs2", "obs3")}) >= 3


def _first_rejected_snapshot(tokens: list[int], module: Path) -> int | None:
    from heatc_runtime.engines.models import default_model_dir
    from heatc_runtime.engines.tokens import table_for_tokenizer

    checker = load(module)
    checker.set_token_table(table_for_tokenizer(default_model_dir()).tokens)
    batch = checker.batch(1)
    for i, token in enumerate(tokens):
        if any(s.verdict is Verdict.REJECTED for s in batch.feed_ids(np.array([token], np.uint32)).get(0, [])):
            return i
    return None


def test_stop_ends_at_the_first_rejected_snapshot(run):
    result, root = run
    requests = result["requests"]
    for obs, stop in (("obs0", "stop0"), ("obs3", "stop3")):
        base, got = requests[obs], requests[stop]
        at = _first_rejected_snapshot(base["token_ids"], root / "medical")
        if at is None:
            assert got["token_ids"] == base["token_ids"] and got["report"]["stopped_at"] is None
        else:  # the same tokens up to that one, then the EOS that ended the request
            assert got["report"]["stopped_at"] == at
            assert got["token_ids"] == [*base["token_ids"][: at + 1], result["eos"]]
    assert requests["stop0"]["report"]["stopped_at"] is not None


def test_guard_turns_rejected_outputs_into_accepted_ones(run):
    result, root = run
    requests = result["requests"]
    for obs, guard in (("obs0", "guard0"), ("obs1", "guard1")):
        base, got = requests[obs], requests[guard]
        assert got["report"]["exhausted_at"] is None
        assert _scan(root, got["module"], got["text"])[0].verdict is not Verdict.REJECTED
        change = got["report"]["first_change"]
        assert change is not None
        assert got["token_ids"][:change] == base["token_ids"][:change]
        assert got["token_ids"][change] != base["token_ids"][change]


def test_bad_requests_fail_alone(run):
    result = run[0]
    messages = [
        "no such module",
        "heatc_mode 'guardd' is not a mode",
        "heatc_k must be a whole number from 1 to 64",
        "unknown option 'heatc_modee'",
        "built for another tokenizer",
        "heatc_policy 'invent' is not a policy",
    ]
    for refused, message in zip(result["refused"], messages, strict=True):
        assert refused is not None and message in refused, (refused, message)
    assert len(result["good"]) == 2 and all(g["token_ids"] and g["report"]["token_ids"] for g in result["good"])
    # the module built for MiniLM runs with the model's table (the default), on the native backend
    minilm = result["minilm"]
    assert minilm["report"]["stream"].encode("latin-1") == minilm["text"].encode()
    assert minilm["report"]["backend"] == "native"


def test_registered_by_class_by_name_and_by_entry_point(run):
    reg = run[0]["registration"]
    assert reg["entry_points"] == ["heatc_runtime.engines.vllm:HeatcLogitsProcessor"] and reg["by_name"]
    # registered twice for the engine (entry point and class): one instance works, the other idles
    assert (reg["instances"], reg["working"]) == (2, 1)


def test_metrics_move_during_generate(run):
    """`use_metrics` in the engine's process: scraped from another thread while `LLM.generate`
    runs, the tokens stepped grow step by step; once the reports are taken, every report
    counter equals what the requests' audit reports say (the scan's, by the property in
    test_audit.py), and guard's masks what guard's reports recorded."""
    from collections import Counter

    from prometheus_client.parser import text_string_to_metric_families

    def samples(text: str) -> dict:
        return {(s.name, frozenset(s.labels.items())): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip

    def value(scraped: dict, name: str, **labels) -> float:
        return sum(v for (n, ls), v in scraped.items() if n == name and set(labels.items()) <= set(ls))

    result, root = run
    metrics = result["metrics"]
    after = samples(metrics["after"])
    tokens = [value(samples(t), "heatc_tokens_total") for t in metrics["during"]]
    final = value(after, "heatc_tokens_total")
    assert tokens == sorted(tokens) and any(0 < t < final for t in tokens), (tokens, final)
    requests = result["requests"]
    # each module's batch (12 rows: max_num_seqs) steps as a whole, as long as its longest request
    assert final % 12 == 0 and final >= 12 * max(len(r["token_ids"]) for r in requests.values())
    assert value(after, "heatc_step_seconds_count") > 0
    audits = {key: (r["module"], load(root / r["module"]).scan(r["report"]["stream"].encode("latin-1")).audit())
              for key, r in requests.items()}  # fmt: skip
    actions = Counter((m, a.action) for m, a in audits.values())
    verdicts = Counter((m, r.name, r.verdict.name) for m, a in audits.values() for r in a.triggered)
    assert value(after, "heatc_reports_total", source="stream") == len(requests) == 12
    for (module, action), n in actions.items():
        assert value(after, "heatc_reports_total", module=module, source="stream", action=action) == n
    for (module, rule, verdict), n in verdicts.items():
        assert value(after, "heatc_verdicts_total", module=module, rule=rule, verdict=verdict) == n
    assert value(after, "heatc_verdicts_total") == sum(verdicts.values()) > 0
    assert value(after, "heatc_checked_bytes_total") == sum(a.text_bytes for _, a in audits.values())
    masks = sum(s["masked"] for r in requests.values() for s in r["report"]["masked_steps"])
    assert value(after, "heatc_guard_masks_total") == masks > 0


def test_guard_withhold_never_writes_a_rejected_value_nor_a_silent_substitute(run):
    """The 21 prompts that dictate impossible values (tests/engine_prompts.json), as in the
    transformers test: what guard delivers holds no value the rules reject; the first place
    its output departs from the unguarded one is an intervention; every withheld value is
    replaced by the marker and says which rule and value the model's choice would have made."""
    result, root = run
    impossible = result["impossible"]
    n = len([k for k in impossible if k.startswith("guard")])
    assert n >= 20
    withheld = 0
    drifted: list[tuple[str, str]] = []
    checker = load(root / "medical")
    for i in range(n):
        plain, got = impossible[f"observe{i}"], impossible[f"guard{i}"]
        rep = got["report"]
        delivered = rep["stream"].encode("latin-1").decode()
        cut = len(got["token_ids"]) == 24
        open_end = cut and re.search(r"[0-9][.,]?\Z", delivered)
        assert checker.scan(delivered).verdict is not Verdict.REJECTED or open_end, rep
        assert rep["verdict"] != "REJECTED" or open_end, rep
        departs = next(
            (j for j, (a, b) in enumerate(zip(plain["token_ids"], got["token_ids"], strict=False)) if a != b), None
        )
        for iv in rep["interventions"]:
            if iv["action"] == "withheld":
                withheld += 1
                assert iv["written"] == "[unverified]" and iv["refused"][0]["rejects"], iv
        if rep["first_change"] == departs:
            continue
        if rep["first_change"] is not None and (departs is None or rep["first_change"] < departs):
            raise AssertionError(("guard changed the text where its output is the unguarded one's",
                                  plain["text"], got["text"], rep["interventions"]))  # fmt: skip
        # The two rows part before guard changed anything: vLLM computed them in batches of other
        # sizes (bfloat16 on a CPU), and a near tie went the other way — the guard row wrote its
        # own top token there (no intervention at or before that step). The transformers test
        # holds this equality exactly; here such rows are counted. How many depends on how the
        # scheduler batched the requests, which the machine's load moves (2 of 21 on a quiet
        # machine, 3 at load 9): at most a quarter, so that the comparison keeps its teeth.
        drifted.append((plain["text"], got["text"]))
    assert len(drifted) <= n // 4, drifted
    assert withheld >= 10
