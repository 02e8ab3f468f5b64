"""Heatmaps and builds: the heatmap file (`format`), lowering its hot cells to rules
(`lower`), tokenizer token tables (`tokenizers`), `heatc build` (`build`), `heatc show` (`show`).
"""
