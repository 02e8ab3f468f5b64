"""Runs vLLM for tests/test_engine_vllm.py in a process of its own, and writes what happened
to a JSON file: `python engine_vllm_worker.py OUT.json MODULES_DIR MINILM_BUILD`.

An engine in the test process would stay there: vLLM sets torch to one thread for the whole
process and keeps its worker threads, which slowed the tests that ran after it threefold. The
engine still runs in-process relative to its `LLM` (VLLM_ENABLE_V1_MULTIPROCESSING=0), which
is what lets `take_report` read the processor's reports.
"""

from __future__ import annotations

import json
import os
import sys
import threading

for _key, _value in {
    "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}.items():  # fmt: skip
    os.environ.setdefault(_key, _value)

from vllm import LLM, SamplingParams  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402

from heatc_runtime.engines import vllm as adapter  # noqa: E402
from heatc_runtime.engines.models import default_model_dir  # noqa: E402

PROMPTS = [
    "Copy this text: The glucose was 5000 mg/dL. The patient is stable.",
    "Write one sentence: the heart rate was 400 bpm.",
    "What is a normal fasting blood glucose in mg/dL?",
    "Repeat exactly: Blood glucose 5000 mg/dL. Temperature 37 C. Pulse 80.",
]


def dump(report) -> dict | None:
    if report is None:
        return None
    return {**report.to_json(), "token_ids": report.tokens, "stream": report.stream.decode("latin-1"),
            "raw": (report.raw or b"").decode("latin-1")}  # fmt: skip


def main(out: str, modules: str, minilm: str) -> None:
    llm = LLM(str(default_model_dir()), dtype="bfloat16", logits_processors=[adapter.HeatcLogitsProcessor],
              max_num_seqs=12, max_model_len=1024, enforce_eager=True, seed=0)  # fmt: skip
    tokenizer = llm.get_tokenizer()

    def chat(prompt: str) -> str:
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                             tokenize=False)  # fmt: skip

    def params(module: str, mode: str, key: str, max_tokens: int, seed: int | None = None, **extra) -> SamplingParams:
        args = {"heatc_module": f"{modules}/{module}", "heatc_mode": mode, "heatc_id": key, **extra}
        if mode == "guard" and not extra:
            args["heatc_policy"] = "steer"  # (the first plan's guard requests are about steering)
        return SamplingParams(max_tokens=max_tokens, temperature=0.0 if seed is None else 1.0, seed=seed,
                              extra_args=args)  # fmt: skip

    result: dict = {"eos": tokenizer.eos_token_id}
    # One generate call, twelve requests that finish at different steps: greedy observe on every
    # prompt (the second with the other module, the third cut at 12 tokens), stop and guard on
    # the rejected ones, observe with seeded sampling on every prompt (cut at 16 tokens).
    plan = [
        (0, "medical", "observe", "obs0", 24, None), (1, "vitals", "observe", "obs1", 24, None),
        (2, "medical", "observe", "obs2", 12, None), (3, "medical", "observe", "obs3", 24, None),
        (0, "medical", "stop", "stop0", 24, None), (3, "medical", "stop", "stop3", 24, None),
        (0, "medical", "guard", "guard0", 24, None), (1, "vitals", "guard", "guard1", 24, None),
        *[(i, "medical", "observe", f"sample{i}", 16, i) for i in range(4)],
    ]  # fmt: skip
    # Metrics on a registry of their own, scraped from another thread while generate runs.
    from prometheus_client import CollectorRegistry, generate_latest

    from heatc_runtime.metrics import Metrics

    registry = CollectorRegistry()
    adapter.use_metrics(Metrics(registry, sample_every=8))
    during: list[str] = []
    generating = threading.Event()

    def scrape() -> None:
        while not generating.wait(0.02):
            during.append(generate_latest(registry).decode())

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        outputs = llm.generate([chat(PROMPTS[p]) for p, *_ in plan],
                               [params(m, mode, key, n, seed) for _, m, mode, key, n, seed in plan], use_tqdm=False)  # fmt: skip
    finally:
        generating.set()
        scraper.join()
    result["requests"] = {
        key: {"module": m, "text": o.outputs[0].text, "token_ids": list(o.outputs[0].token_ids),
              "report": dump(adapter.take_report(key))}
        for (_, m, _, key, _, _), o in zip(plan, outputs, strict=True)
    }  # fmt: skip
    result["metrics"] = {"during": during, "after": generate_latest(registry).decode()}  # every report taken
    adapter.use_metrics(None)

    # Bad requests among good ones: each refused alone, the good ones complete.
    llm.enqueue([chat(PROMPTS[0]), chat(PROMPTS[1])], [params("medical", "observe", f"good{i}", 4) for i in range(2)],
                use_tqdm=False)  # fmt: skip
    bad = [
        {"heatc_module": f"{modules}/nowhere"},
        {"heatc_module": f"{modules}/medical", "heatc_mode": "guardd"},
        {"heatc_module": f"{modules}/medical", "heatc_k": 0},
        {"heatc_module": f"{modules}/medical", "heatc_modee": "guard"},
        {"heatc_module": minilm, "heatc_tokens": "check"},
        {"heatc_module": f"{modules}/medical", "heatc_policy": "invent"},
    ]
    refused = []
    for extra in bad:
        try:
            llm.enqueue([chat(PROMPTS[2])], SamplingParams(max_tokens=4, extra_args=extra), use_tqdm=False)
            refused.append(None)
        except VLLMValidationError as e:
            refused.append(str(e))
    result["refused"] = refused
    done = llm.wait_for_completion(use_tqdm=False)
    result["good"] = [{"token_ids": list(o.outputs[0].token_ids), "report": dump(adapter.take_report(f"good{i}"))}
                      for i, o in enumerate(done)]  # fmt: skip
    # The module built for MiniLM runs with the model's table (the default), on the native backend.
    extra = {"heatc_module": minilm, "heatc_id": "minilm"}
    [minilm_out] = llm.generate([chat(PROMPTS[0])], SamplingParams(max_tokens=4, extra_args=extra), use_tqdm=False)
    result["minilm"] = {"text": minilm_out.outputs[0].text, "report": dump(adapter.take_report("minilm"))}

    # Prompts that dictate impossible values, unguarded and under guard's default policy (withhold).
    with open(os.path.join(os.path.dirname(__file__), "engine_prompts.json"), encoding="utf-8") as f:
        impossible = json.load(f)["prompts"]
    reqs = [(f"{mode}{i}", mode, p) for mode in ("observe", "guard") for i, p in enumerate(impossible)]
    outs = llm.generate([chat(p) for _, _, p in reqs],
                        [params("medical", mode, key, 24, heatc_policy="withhold") if mode == "guard"
                         else params("medical", mode, key, 24) for key, mode, _ in reqs], use_tqdm=False)  # fmt: skip
    result["impossible"] = {key: {"token_ids": list(o.outputs[0].token_ids), "text": o.outputs[0].text,
                                  "report": dump(adapter.take_report(key))}
                            for (key, _, _), o in zip(reqs, outs, strict=True)}  # fmt: skip

    # Registered by class (above) and by the entry point: one instance works, the other idles.
    from importlib.metadata import entry_points

    from vllm.v1.sample.logits_processor import _load_custom_logitsprocs

    config = llm.llm_engine.vllm_config
    result["registration"] = {
        "entry_points": [e.value for e in entry_points(group="vllm.logits_processors") if e.name == "heatc"],
        "by_name": adapter.HeatcLogitsProcessor
        in _load_custom_logitsprocs(["heatc_runtime.engines.vllm:HeatcLogitsProcessor"]),
        "instances": len([p for p in adapter._INSTANCES if p._config is config]),
        "working": len([p for p in adapter._INSTANCES if p._config is config and not p._idle]),
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f)
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
