"""`heatc show heatmap.yaml -o heatmap.png`: a picture of a heatmap a person reads at a
glance — categories on both axes, each cell's score as colour, hot cells (at or above the
sensitivity threshold) outlined and annotated, the threshold marked on the colour bar.

Public surface: `render(heatmap, path, top)`, `FORMATS`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from heatc.heatmap.format import Heatmap

FORMATS = ("png", "svg", "pdf")


def render(hm: Heatmap, out: Path, top: int = 40) -> Path:
    """Draw the `top` rows and columns with the highest scores (a learned heatmap has hundreds
    of keywords; the title says how many are left out)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    def column(c) -> str:
        return f"{c.pair[1]} + {c.unit}" if c.unit else c.pair[1] or "(alone)"

    best: dict[str, float] = {}
    for c in hm.cells:
        best[c.pair[0]] = max(best.get(c.pair[0], 0.0), c.score)
    rows = sorted(sorted(best, key=lambda r: (-best[r], r))[:top])
    best_col: dict[str, float] = {}
    for c in hm.cells:
        if c.pair[0] in rows:
            best_col[column(c)] = max(best_col.get(column(c), 0.0), c.score)
    cols = sorted(sorted(best_col, key=lambda x: (-best_col[x], x))[:top], key=lambda x: (x.split(" + ")[0], x))
    shown = [c for c in hm.cells if c.pair[0] in rows and column(c) in cols]
    grid = np.full((len(rows), len(cols)), np.nan)
    for c in shown:
        i, j = rows.index(c.pair[0]), cols.index(column(c))
        grid[i, j] = c.score if np.isnan(grid[i, j]) else max(grid[i, j], c.score)
    # Outlines say which cells become rules; where every cell does (a learned heatmap's
    # threshold is 0: the learner has already chosen its cells), they would say nothing.
    outline = any(c.score < hm.sensitivity for c in hm.cells)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(cols) + 3), max(4, 0.45 * len(rows) + 2)), dpi=110)
    cmap = plt.get_cmap("inferno").with_extremes(bad="#eeeeee")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=35, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("second category (+ the unit after the value)")
    ax.set_ylabel("first category")
    for i in range(len(rows)):
        for j in range(len(cols)):
            if np.isnan(grid[i, j]):
                continue
            ax.text(
                j,
                i,
                f"{grid[i, j]:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color="black" if grid[i, j] > 0.6 else "white",
            )
            if outline and grid[i, j] >= hm.sensitivity:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#00c0ff", linewidth=2))
    bar = fig.colorbar(im, ax=ax, label="SDS score", fraction=0.03, pad=0.01)
    bar.ax.axhline(hm.sensitivity, color="#00c0ff", linewidth=2)
    bar.ax.set_yticks(sorted({0.0, 0.25, 0.5, 1.0, hm.sensitivity}))
    bar.ax.set_yticklabels([f"threshold {t:g}" if t == hm.sensitivity else f"{t:g}" for t in bar.ax.get_yticks()])
    n_hot = sum(1 for c in hm.cells if c.score >= hm.sensitivity)
    if outline:
        title = f"{hm.name}: {len(hm.cells)} cells, {n_hot} at or above the threshold (outlined) become rules"
    else:
        title = (
            f"{hm.name}: {len(hm.cells)} cells, each at or above the threshold ({hm.sensitivity:g}): all become rules"
        )
    if len(shown) < len(hm.cells):
        title += f"\nshowing {len(shown)} cells: the {len(rows)} rows and {len(cols)} columns with the highest scores"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # written beside the target and renamed over it: a failed or killed write leaves no
    # half picture; "tight" crops the figure's empty margins
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format=out.suffix.lstrip(".").lower() or "png", bbox_inches="tight")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return out
