"""Text drawn twice at the same place. Fake-bold headings are printed two or more times with
a fraction of a point's offset; PDFium drops most copies but not all, and what is left reads
"国家金金融" or "Article 1" twice. A copy is dropped only when the text repeats AND the
character boxes coincide: a real "ll" or "人人" repeats at a full advance, a copy within a
fraction of the glyph's height.

Public surface: CharBox, same_place, repeats_in_line, repeated_lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

CharBox = tuple[float, float, float, float]  # left, bottom, right, top

# Copies of a run of up to 40 characters, optionally separated by whitespace.
_REPEAT = re.compile(r"(\S.{0,39}?)(\s*)\1", re.S)
# Two boxes coincide when every edge is within this share of the taller box's height: the
# height, not the width, since a line's width says nothing about how far its copy may be.
_TOLERANCE = 0.2
_BAND = 8.0  # points; wider than any copy's offset in the PDFs we measured (under 1)


def same_place(a: CharBox, b: CharBox) -> bool:
    tol = _TOLERANCE * max(a[3] - a[1], b[3] - b[1])
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


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
    # its original's band or the next one.
    seen: dict[tuple[str, int], list[CharBox]] = {}
    drop = set()
    for i, (text, box) in enumerate(lines):
        key = text.strip()
        if not key:
            continue
        band = int(box[3] // _BAND)
        earlier = (prior for b in (band - 1, band, band + 1) for prior in seen.get((key, b), ()))
        if any(same_place(box, prior) for prior in earlier):
            drop.add(i)
        else:
            seen.setdefault((key, band), []).append(box)
    return drop
