"""The teacher's evidence: what it reads (`plan`: keywords, candidate cells, sentences),
the frozen model (`teacher`), its per-token sensitivity and pair coupling (`labels`), and
the checkpointed, sharded labelling of the plan's sentences (`labelling`).
"""
