"""Heatmaps and builds: the heatmap file (`format`), lowering its hot cells to rules
(`lower`), tokenizer token tables (`tokenizers`), `heatc build` (`build`), builds of rule
files kept by content for `heatc scan` (`build_cache`), `heatc show` (`show`).
"""
