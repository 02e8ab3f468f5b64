"""What checking inside the decode loop costs: `python bench/engines.py [--quick] [--json F]`.

One run on this machine, SmolLM2-135M-Instruct (the default model of `heatc generate`),
the medical rules, greedy decoding with EOS ignored so that every row runs every step:

- for transformers and for vLLM (the CPU build, in-process), at batch 1 and 16, observe and
  guard (k = 8): heatc's time per decoding step — everything its processor does, timed
  inside the engine's loop — as a share of the engine's own step (the rest of the step);
- xgrammar, the peer a user would otherwise add to the loop: for an equivalent regex over the
  same vocabulary (bench/run.py, `xgrammar_regex`), per step and batch, `accept_token` and
  `fill_next_token_bitmask` for every row and `apply_token_bitmask_inplace` on the scores,
  replaying the tokens the model wrote.

Targets: observe ≤ 1 % of the model step, guard ≤ 5 %, both below xgrammar's per-step cost
at every batch size. Prints which are met.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import REPO, machine, xgrammar_regex

PROMPT = "Write a discharge summary with the patient's glucose, heart rate, temperature and blood pressure."
BATCHES = (1, 16)
MODES = ("observe", "guard")


class Timed:
    """Wraps callables and adds up the seconds spent in them."""

    def __init__(self):
        self.seconds = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t

        return timed


def _timed(base: type, inner, timer: Timed):
    """`inner` (heatc's processor or criteria) as a `base` instance whose calls are timed."""
    return type(f"Timed{base.__name__}", (base,), {"__call__": lambda self, *a, **k: timer.wrap(inner)(*a, **k)})()


def bench_transformers(module: Path, steps: int) -> tuple[list[dict], dict]:
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

    from heatc_runtime import load
    from heatc_runtime.engines.models import load_transformers
    from heatc_runtime.engines.transformers import Checks

    torch.set_num_threads(1)
    model, tokenizer = load_transformers()
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=False
    )
    rows, tokens = [], {}
    for batch in BATCHES:
        inputs = tokenizer([chat] * batch, return_tensors="pt", padding=True)
        for mode in MODES:
            checks = Checks(load(module), tokenizer, mode=mode, k=8, tokens="model")
            timer = Timed()
            timed = {
                "logits_processor": LogitsProcessorList([_timed(LogitsProcessor, checks.processor, timer)]),
                "stopping_criteria": StoppingCriteriaList([_timed(StoppingCriteria, checks.criteria, timer)]),
            }
            t = time.perf_counter()
            with torch.no_grad():
                out = model.generate(
                    **inputs, max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                    pad_token_id=tokenizer.pad_token_id, **timed,
                )  # fmt: skip
            wall = time.perf_counter() - t
            checks.reports(out)
            rows.append(_row("transformers", batch, mode, wall, timer.seconds, steps))
            tokens[batch] = out[:, inputs["input_ids"].shape[1] :].tolist()
    return rows, {"tokenizer": tokenizer, "tokens": tokens}


def bench_vllm(module: Path, steps: int) -> list[dict]:
    for key, value in {
        "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }.items():  # fmt: skip
        os.environ.setdefault(key, value)
    from vllm import LLM, SamplingParams

    from heatc_runtime.engines import vllm as adapter
    from heatc_runtime.engines.models import default_model_dir

    llm = LLM(str(default_model_dir()), dtype="bfloat16", logits_processors=[adapter.HeatcLogitsProcessor],
              max_num_seqs=max(BATCHES), max_model_len=1024, enforce_eager=True, seed=0)  # fmt: skip
    processor = next(p for p in adapter._INSTANCES if not p._idle)
    timer = Timed()
    processor.update_state = timer.wrap(processor.update_state)
    processor.apply = timer.wrap(processor.apply)
    chat = llm.get_tokenizer().apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=False
    )
    llm.generate([chat], SamplingParams(max_tokens=2), use_tqdm=False)  # warm up
    rows = []
    for batch in BATCHES:
        for mode in MODES:
            params = SamplingParams(max_tokens=steps, temperature=0.0, ignore_eos=True,
                                    extra_args={"heatc_module": str(module), "heatc_mode": mode, "heatc_k": 8,
                                                "heatc_tokens": "model"})  # fmt: skip
            timer.seconds = 0.0
            t = time.perf_counter()
            llm.generate([chat] * batch, params, use_tqdm=False)
            wall = time.perf_counter() - t
            rows.append(_row("vllm", batch, mode, wall, timer.seconds, steps))
    return rows


def _row(engine: str, batch: int, mode: str, wall: float, heatc: float, steps: int) -> dict:
    heatc_ms = heatc / steps * 1e3
    model_ms = (wall - heatc) / steps * 1e3  # the engine's own step: everything but heatc
    return {"engine": engine, "batch": batch, "mode": mode, "model_ms": model_ms, "heatc_ms": heatc_ms,
            "share": heatc_ms / model_ms}  # fmt: skip


def bench_xgrammar(program, tokenizer, tokens: dict[int, list[list[int]]]) -> dict[int, float]:
    """ms per step of xgrammar at each batch size, replaying the tokens the model wrote."""
    import torch
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer)
    compiled = xgr.GrammarCompiler(info).compile_regex(xgrammar_regex(program))
    out = {}
    for batch, rows in tokens.items():
        matchers = [xgr.GrammarMatcher(compiled) for _ in rows]
        bitmask = xgr.allocate_token_bitmask(len(rows), info.vocab_size)
        logits = torch.zeros(len(rows), info.vocab_size)
        steps = min(len(r) for r in rows)
        times = []
        for step in range(steps):
            t = time.perf_counter()
            for i, m in enumerate(matchers):
                m.fill_next_token_bitmask(bitmask, i)
            xgr.apply_token_bitmask_inplace(logits, bitmask)
            for i, m in enumerate(matchers):
                if not m.accept_token(rows[i][step]):
                    raise RuntimeError(f"xgrammar refused token {rows[i][step]}: the regex should accept any text")
            times.append(time.perf_counter() - t)
        out[batch] = statistics.median(times) * 1e3
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer decoding steps")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    parser.add_argument("--engines", default="transformers,vllm", help="which engines (comma-separated)")
    args = parser.parse_args()
    import tempfile

    from heatc.lang.compiler import compile_file
    from heatc.wasm import compile_wasm, write_module

    steps = 16 if args.quick else 48
    program = compile_file(REPO / "examples" / "medical.heat")
    print("heatc in the decode loop —", machine())
    print(f"SmolLM2-135M-Instruct, medical rules, greedy, {steps} steps per run, EOS ignored")
    with tempfile.TemporaryDirectory() as tmp:
        module = Path(tmp) / "medical"
        write_module(compile_wasm(program), module)
        rows: list[dict] = []
        engines = args.engines.split(",")
        xg: dict[int, float] = {}
        if "transformers" in engines:
            t_rows, replay = bench_transformers(module, steps)
            rows += t_rows
            xg = bench_xgrammar(program, replay["tokenizer"], replay["tokens"])
        if "vllm" in engines:
            rows += bench_vllm(module, steps)
    print("\n  engine       | batch | mode    | model step ms | heatc ms/step | heatc share | xgrammar ms/step")
    for r in rows:
        x = xg.get(r["batch"])
        print(f"  {r['engine']:12} | {r['batch']:5} | {r['mode']:7} | {r['model_ms']:13.1f} | {r['heatc_ms']:13.3f} | "
              f"{r['share']:10.2%} | {'—' if x is None else f'{x:.3f}'}")  # fmt: skip
    print("\ntargets: observe <= 1% of the model step, guard <= 5%, heatc below xgrammar per step at every batch")
    for r in rows:
        limit = 0.01 if r["mode"] == "observe" else 0.05
        x = xg.get(r["batch"])
        vs = "" if x is None else f"; vs xgrammar {x:.3f} ms -> {'met' if r['heatc_ms'] < x else 'NOT met'}"
        print(f"  {r['engine']} batch {r['batch']} {r['mode']}: {r['share']:.2%} of the step -> "
              f"{'met' if r['share'] <= limit else 'NOT met'}{vs}")  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps({"machine": machine(), "steps": steps, "rows": rows, "xgrammar_ms": xg}, indent=1)
        )


if __name__ == "__main__":
    main()
