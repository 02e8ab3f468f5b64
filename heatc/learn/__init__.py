"""Learning SDS heatmaps from a frozen teacher model (`heatc learn`).

Stages: `plan` (read the corpus with `corpus`, learn keywords with `lexemes` and their
shadow phrases with `shadows`, choose the sentences the teacher reads), `labelling` (the `teacher`'s `labels`: per-token sensitivity
and pair coupling by perturbing input embeddings), `aggregate` (couplings and corpus
statistics → heatmap cells, with `evidence`, `ranges`, `budget`, `guards` and `emit`),
`distil` (the `student` detector, ONNX export); `pipeline` runs them (`config`: settings).
Needs the `learn` extra (torch, transformers via the embedded MiniLM).
"""
