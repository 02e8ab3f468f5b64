"""Checks inside an inference engine's decode loop: token tables for a model's tokenizer,
the engine-independent per-step driver, and the adapters.

- `heatc_runtime.engines.transformers`: `Checks` (a LogitsProcessor and a StoppingCriteria
  for `model.generate`);
- `heatc_runtime.engines.vllm`: `HeatcLogitsProcessor` (vLLM V1, chosen per request);
- `heatc_runtime.engines.core`: modes, guard, reports — what both share (guard's policies and
  draft positions in `engines.interventions`; the vLLM request's options, modules and reports
  in `engines.requests`);
- `heatc_runtime.engines.tokens`: token tables; `heatc_runtime.engines.models`: the default model.

torch, transformers and vLLM are imported only by the adapter that needs them
(`pip install 'heatc[engines]'`).

Public surface: the submodules above.
"""
