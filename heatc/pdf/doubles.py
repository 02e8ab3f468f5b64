"""Text drawn twice at the same place. Fake-bold headings are printed two or more times with
a fraction of a point's offset; PDFium drops most copies but not all, and what is left reads
"国家金金融" or "Article 1" twice. A copy is dropped only when the text repeats AND the
character boxes coincide: a real "ll" or "人人" repeats at a full advance, a copy within a
fraction of the glyph's height.

Public surface: CharBox, same_place, repeats_in_line, repeated_lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence

CharBox = tuple[float, float, float, float]  # left, bottom, right, top

# Copies of a run of up to 40 characters, optionally separated by whitespace.
_REPEAT = re.compile(r"(\S.{0,39}?)(\s*)\1", re.S)
# Two boxes coincide when every edge is within this share of the taller box's height: the
# height, not the width, since a line's width says nothing about how far its copy may be.
_TOLERANCE = 0.2
_BAND = 8.0  # points; wider than any copy's offset in the PDFs we measured (under 1)
_FEW = 16  # up to this many earlier lines of a text and band are compared one by one, not found in the grid


def same_place(a: CharBox, b: CharBox) -> bool:
    tol = _TOLERANCE * max(a[3] - a[1], b[3] - b[1])
    # (edge by edge, not a generator: a dense page asks this millions of times)
    return abs(a[0] - b[0]) <= tol and abs(a[1] - b[1]) <= tol and abs(a[2] - b[2]) <= tol and abs(a[3] - b[3]) <= tol


def repeats_in_line(text: str, box: Callable[[int], CharBox]) -> list[range]:
    """Index ranges of `text` to drop: the second copy of each repeated run whose character
    boxes (box(i) for an index of `text`) coincide with the first's, and the whitespace
    between the copies."""
    drops: list[range] = []
    pos = 0
    while (m := _REPEAT.search(text, pos)) is not None:
        first, length = m.start(1), len(m.group(1))
        second = m.end(2)
        if all(text[first + j].isspace() or same_place(box(first + j), box(second + j)) for j in range(length)):
            drops.append(range(m.start(2), m.end()))
            pos = m.end()
        else:
            pos = m.start() + 1
    return drops


def repeated_lines(lines: Sequence[tuple[str, CharBox]]) -> set[int]:
    """Indices of lines whose text and box repeat an earlier line's."""
    # Earlier lines by text and by their top edge in bands of _BAND points: a copy lies in
    # its original's band or the next one. Where those are many (a dense page repeats "1" or
    # "the" thousands of times), they are found through a grid of the boxes' height, left and
    # top edges (`_cell`, `_near`): a line is compared with the few near it, not with every one.
    by_band: dict[tuple[str, int], list[CharBox]] = {}
    by_cell: dict[tuple[str, object], list[tuple[int, CharBox]]] = {}
    drop = set()
    for i, (text, box) in enumerate(lines):
        key = text.strip()
        if not key:
            continue
        band = int(box[3] // _BAND)
        cell = _cell(box)
        bands = [boxes for b in (band - 1, band, band + 1) if (boxes := by_band.get((key, b)))]
        if bands:
            near = _near(box, cell) if sum(map(len, bands)) > _FEW else None
            if near is None:
                priors: Iterable[CharBox] = (prior for boxes in bands for prior in boxes)
            else:
                priors = (prior for c in near for b, prior in by_cell.get((key, c), ()) if abs(b - band) <= 1)
            if any(same_place(box, prior) for prior in priors):
                drop.add(i)
                continue
        by_band.setdefault((key, band), []).append(box)
        by_cell.setdefault((key, cell), []).append((band, box))
    return drop


def _cell(box: CharBox) -> object:
    """Where a line is kept: for a box whose height h is in [2^(c-1), 2^c), the cell (c, left //
    2^c, top // 2^c); ("flat", box) for a box of no height; None for a box whose edges are not
    finite or whose height is negative (PDFium gives neither)."""
    height = box[3] - box[1]
    if not all(map(math.isfinite, box)) or height < 0:
        return None
    if height == 0:
        return ("flat", box)
    c = math.frexp(height)[1]
    return c, math.floor(math.ldexp(box[0], -c)), math.floor(math.ldexp(box[3], -c))


def _near(box: CharBox, cell: object) -> list | None:
    """The cells where the earlier lines that may coincide with `box` (same_place) are kept;
    None: any cell (every line of the bands is compared). Two boxes coincide only when every
    edge is within a fifth of the larger height: then the other's height is within 3/5 h and
    5/3 h (classes c-1 to c+1) and its left and top edges within a third of h (the cells of
    each class that [edge - h/2, edge + h/2] touches). A box of no height coincides only with
    one of no height at the same place; one that is not finite, or of a negative height, is
    compared with every line of its text and bands, and every box with those."""
    if cell is None:
        return None
    if cell[0] == "flat":
        return [cell, None]
    half = 0.5 * (box[3] - box[1])
    near: list = [None]
    for e in (cell[0] - 1, cell[0], cell[0] + 1):
        xs = range(math.floor(math.ldexp(box[0] - half, -e)), math.floor(math.ldexp(box[0] + half, -e)) + 1)
        ys = range(math.floor(math.ldexp(box[3] - half, -e)), math.floor(math.ldexp(box[3] + half, -e)) + 1)
        near.extend((e, x, y) for x in xs for y in ys)
    return near
