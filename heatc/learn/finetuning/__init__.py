"""`heatc finetune`: a learned heatmap adapted to a domain's documents (`finetune`), its
cells merged with the domain's (`merge`).
"""
