"""heatc under vLLM's model runner V2, driven by hand (the runner needs Triton, which vLLM's CPU
build lacks): the one processor class that both runners load, requests by slot, the prompt's
last token not fed, a slot reused, guard and stop, speculative decoding refused with a report —
on wasm, native and the torch ops' CPU kernels."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support import REPO
from vllm import SamplingParams

from heatc_runtime import load
from heatc_runtime.engines import vllm as adapter
from heatc_runtime.engines.tokens import TokenTable

pytestmark = pytest.mark.needs("vllm")

v2 = pytest.importorskip("vllm.v1.worker.gpu.sample.logits_processor.interface", reason="an older vLLM: no runner V2")

EOS = 0
VOCAB = [b"", b"Glucose", b" ", b"5", b"0", b"000", b".", b" mg/dL", b" heart rate", b"8", b" and", b"Q"]
TABLE = TokenTable("test", VOCAB, "test", "")
ID = {t: i for i, t in enumerate(VOCAB)}
SLOTS = 4


@pytest.fixture(scope="module")
def medical_build(tmp_path_factory) -> Path:
    from heatc.heatmap.build import build

    return build(REPO / "examples" / "medical.heat", tmp_path_factory.mktemp("build")).directory


class Runner:
    """What the V2 runner gives a processor: its request state, and each step's layout."""

    def __init__(self, monkeypatch, speculative: bool = False):
        monkeypatch.setattr(adapter.HeatcLogitsProcessor, "_model_table", lambda self: TABLE)
        self.prompt_len = np.zeros(SLOTS, np.int32)
        self.tokens = torch.zeros((SLOTS, 64), dtype=torch.int64)
        self.req_states = SimpleNamespace(
            device=torch.device("cpu"), max_num_reqs=SLOTS, vocab_size=len(VOCAB),
            prompt_len=SimpleNamespace(np=self.prompt_len), all_token_ids=SimpleNamespace(gpu=self.tokens),
        )  # fmt: skip
        config = SimpleNamespace(model_config=SimpleNamespace(get_vocab_size=lambda: len(VOCAB)),
                                 speculative_config=object() if speculative else None)  # fmt: skip
        self.proc = adapter.HeatcLogitsProcessor(config, self.req_states)
        self.text: dict[int, list[int]] = {}

    def add(self, slot: int, prompt: list[bytes], temperature: float = 0.0, **extra) -> None:
        ids = [ID[p] for p in prompt]
        self.prompt_len[slot] = len(ids)
        self.tokens[slot, : len(ids)] = torch.tensor(ids)
        self.text[slot] = ids
        p = SamplingParams(max_tokens=32, temperature=temperature, extra_args={**extra})
        p._all_stop_token_ids = {EOS}
        assert self.proc.add_request(slot, p) == bool(extra)

    def step(self, slots: list[int], sampled: dict[int, bytes] | None = None) -> torch.Tensor:
        """One step over `slots` (batch order): each fed its last token (the sampled one)."""
        for slot, piece in (sampled or {}).items():
            self.text[slot].append(ID[piece])
        ids = torch.tensor([self.text[s][-1] for s in slots])
        pos = torch.tensor([len(self.text[s]) - 1 for s in slots])
        mapping = torch.tensor(slots)
        ctx = v2.LogitsContext(expanded_idx_mapping=mapping, idx_mapping=mapping, idx_mapping_np=np.array(slots),
                               expanded_local_pos=torch.zeros(len(slots), dtype=torch.int64), input_ids=ids, pos=pos,
                               seq_lens_upper_bound_np=np.zeros(len(slots)))  # fmt: skip
        return self.proc.apply(torch.zeros(len(slots), len(VOCAB)), ctx)


def test_one_class_for_both_runners():
    assert issubclass(adapter.HeatcLogitsProcessor, v2.LogitsProcessor)
    from vllm.v1.sample.logits_processor import LogitsProcessor as RunnerV1Processor

    assert issubclass(adapter.HeatcLogitsProcessor, RunnerV1Processor)


@pytest.mark.parametrize("backend", ["wasm", "native", "cuda"])
def test_requests_by_slot_observe_stop_guard(monkeypatch, medical_build, backend):
    r = Runner(monkeypatch)
    module = str(medical_build)
    r.add(2, [b"Q", b" "], heatc_module=module, heatc_mode="observe", heatc_id="o", heatc_backend=backend)
    r.add(0, [b"Q"], heatc_module=module, heatc_mode="stop", heatc_id="s", heatc_backend=backend)
    r.add(1, [b"Q"])  # (no heatc: not ours)
    r.step([2, 0, 1])  # prefill done: each slot's input is its prompt's last token, not fed
    for piece in (b"Glucose", b" ", b"5", b"000", b" mg/dL", b".", b" and"):
        logits = r.step([2, 0, 1], {2: piece, 0: piece, 1: piece})
    assert logits[1].argmax().item() == EOS and torch.isinf(logits[1, 1:]).all()  # stop: EOS next
    assert not torch.isinf(logits[0]).any() and not torch.isinf(logits[2]).any()
    stopped = adapter.take_report("s")
    assert stopped.stream == b"Glucose 5000 mg/dL. and" and stopped.stopped_at == 6
    observed = adapter.take_report("o")
    assert observed.stream == b"Glucose 5000 mg/dL. and"
    want = load(medical_build).scan(observed.stream)
    assert observed.events == want.events and observed.verdicts == dict(want.verdicts)
    # a slot reused: its previous request is ended then, the new one starts afresh
    r.add(
        2,
        [b"Q"],
        temperature=1.0,
        heatc_module=module,
        heatc_mode="guard",
        heatc_policy="steer",
        heatc_k=len(VOCAB),
        heatc_id="g",
        heatc_backend=backend,
    )  # fmt: skip (sampling: every candidate judged)
    r.step([2])
    for piece in (b"Glucose", b" ", b"5"):
        logits = r.step([2], {2: piece})
    masked = [VOCAB[i] for i in range(len(VOCAB)) if torch.isinf(logits[0, i])]
    assert masked == [b"000", b" mg/dL"]  # 5000; 5 mg/dL
    assert adapter.take_report("g").stream == b"Glucose 5"


def test_speculative_decoding_is_refused_with_a_report(monkeypatch, medical_build):
    r = Runner(monkeypatch, speculative=True)
    r.add(0, [b"Q"], heatc_module=str(medical_build), heatc_mode="guard", heatc_id="spec")
    logits = r.step([0])
    assert logits[0].argmax().item() == EOS and torch.isinf(logits[0, 1:]).all()
    assert "speculative decoding" in adapter.take_report("spec").error
