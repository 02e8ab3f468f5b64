"""Observe-only rules in the decode loop, with no model: a rule set observe-only (`heatc tune`,
`observe` in the rule language) reports its rejections, but stop mode does not end a sequence
on them and guard does not mask a candidate for them — on the host driver (WASM and native),
through the transformers adapter's processor and stopping criteria (a small byte-level
tokenizer, no model), and on the device driver through the torch ops' CPU kernels; the acting
rule beside it still stops and masks. Each test runs the same rules with the rule acting too,
where it must stop and mask: the difference is the `observe` attribute alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from heatc.lang.compiler import compile_source
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime import Verdict, from_bytes
from heatc_runtime.engines.core import Driver
from heatc_runtime.engines.options import RowOptions
from heatc_runtime.engines.tokens import TokenTable

RULES = """ruleset observing
class glucose keyword = "glucose"
class heart_rate keyword = "heart rate"
class sentence_end punct = "."
triggers {
  at sentence_end
  barrier sentence_end
}
rule glucose_value heat 0.9 {
  match glucose ..3 v:number
  require v in [10, 2000]
}
rule heart_rate_value heat 0.8 OBSERVE {
  match heart_rate ..3 v:number
  require v in [20, 300]
}
rule glucose_typical heat 0.3 observe {
  match glucose ..3 v:number
  require v in [60, 400]
}
"""
# id 0 ends a sequence
VOCAB = [b"", b" glucose", b" ", b"5", b"0", b"00", b"000", b".", b" heart rate", b"9", b" and"]
ID = {t: i for i, t in enumerate(VOCAB)}
TABLE = TokenTable("test", VOCAB, "test", "")
EOS = 0
# 900 is out of heart_rate_value's range (observe-only, or acting in the control); then 5000
# is out of glucose_value's, which always acts
HEART = (b" heart rate", b" ", b"9", b"00", b".", b" and")
GLUCOSE = (b" glucose", b" ", b"5", b"000", b".", b" and")
HOST_BACKENDS = ("wasm", pytest.param("native", marks=pytest.mark.needs("native")))


def _build(observe: bool):
    program = compile_source(RULES.replace("OBSERVE", "observe" if observe else ""), "observing.heat")
    assert [r.observe for r in program.rules if r.name == "heart_rate_value"] == [observe]
    module = compile_wasm(program)
    return module, hct_bytes(program, pack(program), (0, 0))


BUILDS = {observe: _build(observe) for observe in (True, False)}


def _checker(backend: str, observe: bool):
    module, hct = BUILDS[observe]
    if backend == "native":
        return from_bytes(module.manifest, hct, backend="native")
    return from_bytes(module.manifest, module.wasm)


def _heart_events(report) -> list[tuple]:
    return [(e.name, e.verdict, dict(e.captures)) for e in report.events if e.name == "heart_rate_value"]


@pytest.mark.parametrize("observe", [True, False], ids=["observe-only", "acting"])
@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_stop_mode_does_not_stop_for_an_observe_only_rule(backend, observe):
    """Stop mode ends a sequence at the first snapshot with a rejection a policy acts on: the
    observe-only rule's 900 goes on to the glucose sentence, whose 5000 stops it; acting,
    the 900 stops it. The report lists the observe-only rule's rejection either way."""
    d = Driver(_checker(backend, observe), TABLE, 1)
    d.start(0, RowOptions("stop"))
    stops = []
    for step, piece in enumerate(HEART + GLUCOSE):
        if d.feed(np.array([0]), np.array([ID[piece]])):
            stops.append(step)
            break
    first = len(HEART) - 1 if not observe else len(HEART + GLUCOSE) - 1
    assert stops == [first]
    report = d.end(0)
    assert report.stopped_at == first
    assert _heart_events(report) == [("heart_rate_value", Verdict.REJECTED, {"v": 900.0})]
    assert report.verdicts["heart_rate_value"] is Verdict.REJECTED
    assert report.verdicts["glucose_value"] is (Verdict.REJECTED if observe else Verdict.CONFIRMED)


@pytest.mark.parametrize("observe", [True, False], ids=["observe-only", "acting"])
@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_guard_does_not_mask_for_an_observe_only_rule(backend, observe):
    """Guard judges "heart rate 9" + "00" (900): allowed when the rule is observe-only,
    masked when it acts; "glucose 5" + "000" (5000) is masked either way, and the intervention
    names the acting rule alone. The reports list the observe-only rejections let through."""
    d = Driver(_checker(backend, observe), TABLE, 2)
    for row in (0, 1):
        d.start(row, RowOptions("guard", policy="steer"))
    for heart, glucose in zip(HEART[:3], GLUCOSE[:3], strict=True):
        d.feed(np.array([0, 1]), np.array([ID[heart], ID[glucose]]))
    cands = np.array([[ID[b"00"], ID[b"0"], ID[b"."]], [ID[b"000"], ID[b"00"], ID[b"."]]])
    step = d.guard(np.array([0, 1]), cands, np.ones_like(cands, bool))
    # (the text ended after "9." or "5." reads 9 or 5: below 20, below 10)
    assert step.ok.tolist() == [[observe, True, observe], [False, True, False]]
    took = [cands[0, 0] if observe else cands[0, 1], cands[1, 1]]
    d.feed(np.array([0, 1]), np.array(took))
    d.feed(np.array([0, 1]), np.array([ID[b"."], ID[b"."]]))
    heart, glucose = d.end(0), d.end(1)
    assert heart.text == (" heart rate 900." if observe else " heart rate 90.")
    assert heart.interventions == [] if observe else heart.interventions[0].action == "steered"
    assert _heart_events(heart) == [("heart_rate_value", Verdict.REJECTED if observe else Verdict.CONFIRMED,
                                     {"v": 900.0 if observe else 90.0})]  # fmt: skip
    # 5000 fails both glucose rules: the refusal names the one guard acts on; 500 fails only
    # the observe-only one, which is reported and let through
    [iv] = glucose.interventions
    assert glucose.text == " glucose 500." and [r.text for r in iv.refused] == ["000", "."]
    assert [[(e.name, dict(e.captures)) for e in r.rejects] for r in iv.refused] == [
        [("glucose_value", {"v": 5000.0})],
        [("glucose_value", {"v": 5.0})],
    ]
    assert [(e.name, e.verdict) for e in glucose.events] == [
        ("glucose_value", Verdict.CONFIRMED),
        ("glucose_typical", Verdict.REJECTED),
    ]


def _tokenizer_json(path) -> str:
    """A byte-level BPE tokenizer.json with VOCAB as its tokens (id 0 a special end token): what
    table_for_tokenizer reads, without running a tokenizer."""
    from heatc_runtime.engines.tokens import _BYTE_DECODER

    encode = {b: c for c, b in _BYTE_DECODER.items()}
    vocab = {"".join(encode[b] for b in t): i for i, t in enumerate(VOCAB) if t}
    spec = {
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
        "added_tokens": [{"id": EOS, "content": "<|end|>", "special": True}],
        "pre_tokenizer": {"type": "ByteLevel"},
        "decoder": {"type": "ByteLevel"},
    }
    path.write_text(json.dumps(spec), encoding="utf-8")
    return str(path)


def _transformers_steps(checks, pieces, prefer=()):
    """Run the adapter's processor and stopping criteria as transformers' greedy loop does,
    the scores made up: each step's piece scores 5, `prefer[i]` (when given) 6 — returns the
    tokens written and each step's stop flag."""
    import torch

    input_ids = torch.tensor([[ID[b" "]]])  # the prompt (not read: see_prompt is off)
    written, stops = [], []
    for i, piece in enumerate(pieces):
        scores = torch.zeros(1, len(VOCAB))
        scores[0, ID[piece]] = 5.0
        if i < len(prefer) and prefer[i] is not None:
            scores[0, ID[prefer[i]]] = 6.0
        out = checks.processor(input_ids, scores)
        token = int(out[0].argmax())
        written.append(VOCAB[token])
        input_ids = torch.cat([input_ids, torch.tensor([[token]])], dim=1)
        stops.append(bool(checks.criteria(input_ids, out)[0]))
        if stops[-1]:
            break
    return written, stops, checks.reports(input_ids)[0]


@pytest.mark.needs("torch", "transformers")
@pytest.mark.parametrize("observe", [True, False], ids=["observe-only", "acting"])
def test_the_transformers_adapter_honours_observe_only(tmp_path, monkeypatch, observe):
    """transformers' `Checks` (its LogitsProcessor and StoppingCriteria, no model): in stop mode
    the observe-only rule's 900 does not end the sequence and the glucose 5000 does; in guard
    mode (greedy, steer) the model's preferred "00" after "heart rate 9" is written when the
    rule is observe-only and refused when it acts."""
    from heatc_runtime.engines.transformers import Checks

    monkeypatch.setenv("HEATC_CACHE", str(tmp_path / "cache"))
    tokenizer = _tokenizer_json(tmp_path / "tokenizer.json")
    checks = Checks(_checker("native", observe), tokenizer, mode="stop", eos_token_id=EOS)
    checks.kwargs()  # (attached: the criteria feeds each token, as in model.generate)
    written, stops, report = _transformers_steps(checks, HEART + GLUCOSE)
    first = len(HEART) if not observe else len(HEART + GLUCOSE)
    assert stops == [False] * (first - 1) + [True]
    assert _heart_events(report) == [("heart_rate_value", Verdict.REJECTED, {"v": 900.0})]

    checks = Checks(_checker("native", observe), tokenizer, mode="guard", policy="steer", greedy=True,
                    eos_token_id=EOS)  # fmt: skip
    checks.kwargs()
    # the model prefers "00" after "heart rate 9" (900); its next best is "0" (90)
    pieces = (b" heart rate", b" ", b"9", b"0", b".", b" and")
    written, stops, report = _transformers_steps(checks, pieces, prefer=(None, None, None, b"00"))
    assert written[3] == (b"00" if observe else b"0") and not any(stops)
    assert report.verdicts["heart_rate_value"] is (Verdict.REJECTED if observe else Verdict.CONFIRMED)
    assert [iv.action for iv in report.interventions] == ([] if observe else ["steered"])


@pytest.mark.needs("torch", "native")
@pytest.mark.parametrize("observe", [True, False], ids=["observe-only", "acting"])
def test_the_device_driver_honours_observe_only(observe):
    """The decode loop on the torch ops (here their CPU kernels, the native core's code): the
    stop row goes past the observe-only rule's 900 and stops at the glucose 5000; the guard
    row keeps "00" after "heart rate 9" where the rule is observe-only, and the 900 is in its
    report."""
    import torch

    from heatc_runtime.engines.device import DeviceDriver

    module, hct = BUILDS[observe]
    device = DeviceDriver((module.manifest, hct), TABLE, 2, 0, "cpu")
    device.start(0, RowOptions("stop"))
    device.start(1, RowOptions("guard", policy="steer"))
    eos = torch.tensor([EOS])
    stops, chosen = [], []
    for step, piece in enumerate(HEART + GLUCOSE):
        scores = torch.zeros(2, len(VOCAB))
        scores[:, ID[piece]] = 5.0
        if step == 3:
            scores[1, ID[b"0"]] = 4.0  # the guard row's next best after "00" (900): "0" (90)
        out = device.guard(scores, eos, greedy=True)
        ids = torch.tensor([ID[piece], int(out[1].argmax())])
        chosen.append(VOCAB[int(ids[1])])
        stopped = device.feed(ids)
        stops.append(bool(stopped[0]))
        if stops[-1]:
            break
    first = len(HEART) - 1 if not observe else len(HEART + GLUCOSE) - 1
    assert stops.index(True) == first and len(stops) == first + 1
    assert chosen[3] == (b"00" if observe else b"0")
    stop, guard = device.end(0), device.end(1)
    assert stop.stopped_at == first
    assert _heart_events(stop) == [("heart_rate_value", Verdict.REJECTED, {"v": 900.0})]
    assert _heart_events(guard) == [
        ("heart_rate_value", Verdict.REJECTED if observe else Verdict.CONFIRMED, {"v": 900.0 if observe else 90.0})
    ]
