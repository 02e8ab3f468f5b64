"""The vLLM processor following a persistent batch, driven by hand (no model, no engine):
requests added, moved, swapped and replaced without being reported removed, live output
lists, forced EOS for stop and for a request refused inside the engine, reports by key."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from support import REPO
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

from heatc.lang.compiler import compile_file
from heatc.wasm import compile_wasm, write_module
from heatc_runtime import Verdict, load
from heatc_runtime.engines import requests
from heatc_runtime.engines import vllm as adapter
from heatc_runtime.engines.tokens import TokenTable

pytestmark = pytest.mark.needs("vllm")

EOS = 0
VOCAB = [b"", b"Glucose", b" ", b"5", b"0", b"000", b".", b" mg/dL", b" heart rate", b"8", b" and"]
TABLE = TokenTable("test", VOCAB, "test", "")
ID = {t: i for i, t in enumerate(VOCAB)}


@pytest.fixture(scope="module")
def medical_build(tmp_path_factory) -> Path:
    from heatc.heatmap.build import build

    return build(REPO / "examples" / "medical.heat", tmp_path_factory.mktemp("build")).directory


@pytest.fixture(params=["wasm", "native", "cuda"])
def processor(request, tmp_path, monkeypatch, medical_build):
    """The processor, its requests checked on one backend: WASM (a module directory), native
    or the torch ops (`cuda`: their CPU kernels here) on a build of the same rules."""
    if request.param == "wasm":
        write_module(compile_wasm(compile_file(REPO / "examples" / "medical.heat")), tmp_path / "medical")
    monkeypatch.setattr(adapter.HeatcLogitsProcessor, "_model_table", lambda self: TABLE)
    config = SimpleNamespace(
        model_config=SimpleNamespace(get_vocab_size=lambda: len(VOCAB)),
        scheduler_config=SimpleNamespace(max_num_seqs=4),
    )
    proc = adapter.HeatcLogitsProcessor(config, torch.device("cpu"), False)
    proc.module = str(tmp_path / "medical") if request.param == "wasm" else str(medical_build)
    proc.backend = request.param
    return proc


def params(proc, mode: str, key: str, **extra) -> SamplingParams:
    args = {"heatc_module": proc.module, "heatc_mode": mode, "heatc_id": key, "heatc_backend": proc.backend, **extra}
    p = SamplingParams(max_tokens=32, extra_args=args)
    p._all_stop_token_ids = {EOS}  # (what vLLM sets from the tokenizer)
    return p


def step(proc, outputs: dict[int, list[int]], tokens: dict[int, bytes], update=None) -> torch.Tensor:
    """One engine step: the tokens sampled last step appear in the live lists, then
    update_state and apply."""
    for index, piece in tokens.items():
        outputs[index].append(ID[piece])
    proc.update_state(update)
    return proc.apply(torch.zeros(4, len(VOCAB)))


def text(pieces: list[bytes]) -> bytes:
    return b"".join(pieces)


def test_rows_that_move_and_are_replaced_keep_their_own_streams(processor):
    a, b, c = [], [], []
    added = [(0, params(processor, "observe", "a"), [5, 6], a), (1, params(processor, "observe", "b"), None, b)]
    step(processor, {}, {}, BatchUpdate(2, [], added, []))
    pieces_a = [b"Glucose", b" ", b"5", b"000", b" mg/dL", b"."]
    pieces_b = [b" heart rate", b" ", b"8", b"0"]
    for i in range(4):
        step(processor, {0: a, 1: b}, {0: pieces_a[i], 1: pieces_b[i]})
    step(processor, {0: a, 1: b}, {0: pieces_a[4], 1: b"."})
    # a is done; vLLM condenses the batch: b moves to index 0 with no removal reported, which
    # replaces a (its report is complete then); later c is added at index 1
    step(processor, {}, {}, BatchUpdate(1, [], [], [(1, 0, MoveDirectionality.UNIDIRECTIONAL)]))
    step(processor, {0: b}, {0: b" and"}, BatchUpdate(2, [], [(1, params(processor, "observe", "c"), None, c)], []))
    step(processor, {0: b, 1: c}, {0: b" heart rate", 1: b"Glucose"})
    step(processor, {0: b, 1: c}, {0: b" ", 1: b" "})
    got_a, got_b, got_c = (adapter.take_report(k) for k in "abc")
    checker = load(processor.module)
    assert got_a.stream == text(pieces_a[:5])
    assert (got_a.events, got_a.verdicts) == (
        checker.scan(got_a.stream).events,
        dict(checker.scan(got_a.stream).verdicts),
    )
    assert got_b.stream == b" heart rate 80. and heart rate " and got_b.verdict is Verdict.CONFIRMED
    assert got_c.stream == b"Glucose "
    assert adapter.take_report("a") is None  # a report is taken once


def test_a_swap_and_a_removal(processor):
    a, b = [], []
    added = [(0, params(processor, "observe", "sa"), None, a), (1, params(processor, "observe", "sb"), None, b)]
    step(processor, {}, {}, BatchUpdate(2, [], added, []))
    step(processor, {0: a, 1: b}, {0: b"Glucose", 1: b" heart rate"})
    step(processor, {}, {}, BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)]))
    step(processor, {1: a, 0: b}, {1: b" ", 0: b" "})
    step(processor, {1: a, 0: b}, {1: b"5", 0: b"8"}, None)
    step(processor, {}, {}, BatchUpdate(1, [1], [], []))
    assert adapter.take_report("sa").stream == b"Glucose 5"  # ended at its removal
    assert adapter.take_report("sb").stream == b" heart rate 8"  # still in the batch: ended here


def test_stop_forces_eos_at_the_next_step(processor):
    out = []
    step(processor, {}, {}, BatchUpdate(1, [], [(0, params(processor, "stop", "stop"), None, out)], []))
    pieces = [b"Glucose", b" ", b"5", b"000", b" mg/dL", b".", b" and"]
    for piece in pieces:
        logits = step(processor, {0: out}, {0: piece})
    # " and" ended the "." lexeme: the first rejected snapshot; the next token must be EOS
    assert logits[0].argmax().item() == EOS and torch.isinf(logits[0, 1:]).all()
    report = adapter.take_report("stop")
    assert report.stopped_at == len(pieces) - 1


def test_guard_masks_in_place_and_leaves_other_rows_alone(processor):
    g, o = [], []
    added = [
        (0, params(processor, "guard", "g", heatc_k=len(VOCAB), heatc_policy="steer"), None, g),
        (1, params(processor, "observe", "o"), None, o),
    ]
    step(processor, {}, {}, BatchUpdate(2, [], added, []))
    for piece in (b"Glucose", b" ", b"5"):
        logits = step(processor, {0: g, 1: o}, {0: piece, 1: piece})
    masked = [VOCAB[i] for i in range(len(VOCAB)) if torch.isinf(logits[0, i])]
    assert masked == [b"000", b" mg/dL"]  # 5000; 5 mg/dL
    assert not torch.isinf(logits[1]).any()


def test_a_request_refused_inside_the_engine_ends_at_once(processor, tmp_path):
    """validate_params ran in another process (or the module changed since): the engine ends
    the request at its first step and its report says why; the others go on."""
    out, other = [], []
    p = params(processor, "guard", "refused")
    p.extra_args["heatc_module"] = str(tmp_path / "gone")  # (not validated here)
    added = [(0, p, None, out), (1, params(processor, "observe", "fine"), None, other)]
    logits = step(processor, {}, {}, BatchUpdate(2, [], added, []))
    assert logits[0].argmax().item() == EOS and torch.isinf(logits[0, 1:]).all()
    assert not torch.isinf(logits[1]).any()
    assert "no such module" in adapter.take_report("refused").error
    step(processor, {1: other}, {1: b"Glucose"})
    assert adapter.take_report("fine").stream == b"Glucose"


def test_request_options_are_checked():
    with pytest.raises(ValueError, match="heatc_mode given without heatc_module"):
        adapter.request_options({"heatc_mode": "guard"})
    with pytest.raises(ValueError, match="heatc_prompt must be 0 or 1"):
        adapter.request_options({"heatc_module": "x", "heatc_prompt": "yes"})
    assert adapter.request_options({"other": 1}) is None
    opts = adapter.request_options({"heatc_module": "x", "heatc_k": 4.0, "heatc_prompt": "true", "heatc_id": 7})
    assert (opts.row.k, opts.row.see_prompt, opts.key, opts.row.policy) == (4, True, "7", "withhold")
    with pytest.raises(ValueError, match="heatc_policy 'invent' is not a policy"):
        adapter.request_options({"heatc_module": "x", "heatc_policy": "invent"})
    with pytest.raises(ValueError, match="the marker must be 1 to 64 characters of text with no digits"):
        adapter.request_options({"heatc_module": "x", "heatc_marker": "[1]"})
    with pytest.raises(ValueError, match="heatc_backend 'gpu' is not a backend"):
        adapter.request_options({"heatc_module": "x", "heatc_backend": "gpu"})


def test_a_server_offers_only_the_modules_its_operator_names(tmp_path, monkeypatch):
    """With HEATC_MODULES set (a server), a request names a module; a path is refused whatever
    it points at. In-process (no HEATC_MODULES, no OpenAI server) a build directory may be named."""
    write_module(compile_wasm(compile_file(REPO / "examples" / "medical.heat")), tmp_path / "medical")
    assert adapter.request_options({"heatc_module": str(tmp_path / "medical")}).module == str(tmp_path / "medical")
    monkeypatch.setenv("HEATC_MODULES", f"medical={tmp_path / 'medical'}")
    assert adapter.request_options({"heatc_module": "medical"}).module == str((tmp_path / "medical").resolve())
    for name in (str(tmp_path / "medical"), "/etc", "vitals"):
        with pytest.raises(ValueError, match=r"is not a module this server offers \(HEATC_MODULES: medical\)"):
            adapter.request_options({"heatc_module": name})


def test_loaded_modules_are_bounded(tmp_path, monkeypatch):
    """At most HEATC_MODULE_CACHE modules stay loaded; the least recently used goes first."""
    monkeypatch.setenv("HEATC_MODULE_CACHE", "2")
    monkeypatch.setattr(requests, "_MODULES", requests.OrderedDict())
    module = compile_wasm(compile_file(REPO / "examples" / "medical.heat"))
    for name in "abc":
        write_module(module, tmp_path / name)
        requests.load_module(adapter.request_options({"heatc_module": str(tmp_path / name), "heatc_backend": "wasm"}))
    assert [Path(k[0]).name for k in requests._MODULES] == ["b", "c"]
