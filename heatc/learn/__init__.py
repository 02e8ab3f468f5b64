"""Learning SDS heatmaps from a frozen teacher model (`heatc learn`, `heatc finetune`).

Stages, one module each: `corpus` (read and split text), `teacher` (the frozen model),
`labels` (per-token sensitivity and pair coupling by perturbing input embeddings),
`lexemes` (teacher tokens ↔ heatc lexemes, categories), `aggregate` (couplings → heatmap
cells), `student` (the small detector, ONNX export), `pipeline` (the command).
Needs the `learn` extra (torch, transformers via the embedded MiniLM).
"""
