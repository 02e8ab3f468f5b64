"""Cells, their ranges and the false-alarm budget: couplings into scores (`couplings`),
ranges fitted beyond the clean tails (`ranges`), magnitude bands (`bands`), precisions
(`precision`), unit guards and keyword families (`guards`, `magnitudes`), dimensions
(`dimensions`), cells that read the same values (`overlaps`), and the budget that chooses
which run with which range (`budget`). Reads `heatc.learn.text` and the settings alone.
"""
