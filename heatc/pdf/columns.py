"""Reading order from boxes: a recursive cut of the page along its whitespace. A region
whose segments leave a vertical strip of whitespace from top to bottom is split into
columns, read left to right, but only when every column looks like running text (enough
lines, each filling most of the column's width) — a table's label and number columns also
leave vertical whitespace, and reading all labels before all numbers would tear every row
apart. A region that cannot be split into columns is split at its widest horizontal gap
(read top to bottom); a region that cannot be split at all keeps the order the PDF stored.
A page with no columns anywhere keeps its stored order throughout.

Vertical text (a rotated margin note) is read last, in stored order.

Coordinates are PDF user space: points, y grows upwards.

Public surface: Box, reading_order.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

# A column must fill this share of its width on a typical line, hold this many lines of
# this many characters, and be this share of the region's width: running text does; a
# column of numbers, or the two halves of a signature block ("Name  Michael Derby"), which
# read row by row, do not.
_MIN_FILL = 0.7
_MIN_LINES = 4
_MIN_LINE_CHARS = 20
_MIN_WIDTH_SHARE = 0.15
# Footnotes: type below this share of the body's height, after a gap at a column's foot.
_FOOTNOTE_SIZE = 0.85
_NOTE_LINE_SHARE = 0.3
# A gutter is at least this wide: in points, and as a share of the median line height.
_MIN_GUTTER_PT = 3.0
_MIN_GUTTER_HEIGHTS = 0.4
# Beyond this many segments a page is a table or a chart label soup: keep the stored order.
_MAX_SEGMENTS = 3000


@dataclass(frozen=True)
class Box:
    left: float
    bottom: float
    right: float
    top: float
    chars: int = 1  # characters in the segment, to tell vertical text from a tall glyph

    @property
    def width(self) -> float:
        return self.right - self.left

    @property
    def height(self) -> float:
        return self.top - self.bottom

    @property
    def vertical(self) -> bool:
        return self.chars >= 3 and self.height > 2 * self.width


def reading_order(boxes: list[Box]) -> list[int]:
    """Indices into `boxes` (which are in stored order) in reading order."""
    if len(boxes) > _MAX_SEGMENTS:
        return list(range(len(boxes)))
    flat = [i for i, b in enumerate(boxes) if not b.vertical]
    if not flat:
        return list(range(len(boxes)))
    heights = [boxes[i].height for i in flat if boxes[i].height > 0]
    gutter = max(_MIN_GUTTER_PT, _MIN_GUTTER_HEIGHTS * (median(heights) if heights else 0.0))
    out: list[int] = []
    if not _cut(boxes, flat, gutter, out):
        return list(range(len(boxes)))  # one column: the stored order stands
    out.extend(i for i, b in enumerate(boxes) if b.vertical)
    return out


def _gaps(intervals: list[tuple[float, float]], min_gap: float) -> list[tuple[float, float]]:
    """Stretches of at least min_gap that no interval covers, between the first and the last."""
    gaps = []
    intervals = sorted(intervals)
    reach = intervals[0][1]
    for lo, hi in intervals[1:]:
        if lo - reach >= min_gap:
            gaps.append((reach, lo))
        reach = max(reach, hi)
    return gaps


def _cut(boxes: list[Box], region: list[int], gutter: float, out: list[int]) -> bool:
    """Append `region` to `out` in reading order; whether some part of it had columns."""
    # An explicit stack, not recursion: a long column cuts once per line.
    stack = [region]
    had_columns = False
    while stack:
        region = stack.pop()
        if len(region) == 1:
            out.append(region[0])
            continue
        # Two columns of _MIN_LINES lines need at least that many segments.
        columns = _columns(boxes, region, gutter) if len(region) >= 2 * _MIN_LINES else None
        if columns is not None:
            split = [_footnotes(boxes, part) for part in columns]
            # Each column's body, then each column's footnotes.
            stack.extend(reversed([body for body, _ in split] + [notes for _, notes in split if notes]))
            had_columns = True
            continue
        gaps = _gaps([(boxes[i].bottom, boxes[i].top) for i in region], 1e-6)
        if not gaps:
            out.extend(sorted(region))  # stored order
            continue
        lo, hi = max(gaps, key=lambda g: g[1] - g[0])
        split = (lo + hi) / 2
        upper = [i for i in region if boxes[i].bottom >= split]
        lower = [i for i in region if boxes[i].bottom < split]
        stack.extend([lower, upper])  # upper is read first
    return had_columns


def _columns(boxes: list[Box], region: list[int], gutter: float) -> list[list[int]] | None:
    gaps = _gaps([(boxes[i].left, boxes[i].right) for i in region], gutter)
    if not gaps:
        return None
    cuts = [(lo + hi) / 2 for lo, hi in gaps]
    parts: list[list[int]] = [[] for _ in range(len(cuts) + 1)]
    for i in region:
        parts[sum(1 for c in cuts if boxes[i].left > c)].append(i)
    span = max(boxes[i].right for i in region) - min(boxes[i].left for i in region)
    widths = [max(boxes[i].right for i in part) - min(boxes[i].left for i in part) for part in parts]
    if any(
        len(part) < _MIN_LINES or width < _MIN_WIDTH_SHARE * span for part, width in zip(parts, widths, strict=True)
    ):
        return None
    for part, width in zip(parts, widths, strict=True):
        lines = _lines(boxes, part)
        if len(lines) < _MIN_LINES:
            return None
        if median(right - lo for lo, right, _ in lines) < _MIN_FILL * width:
            return None
        if median(chars for _, _, chars in lines) < _MIN_LINE_CHARS:
            return None
    return parts


def _footnotes(boxes: list[Box], part: list[int]) -> tuple[list[int], list[int]]:
    """A column's body and the footnotes at its foot: the lines below the highest gap under
    which every line (not counting short runs such as a note's number) is set in markedly
    smaller type than the body."""
    left = min(boxes[i].left for i in part)
    width = max(boxes[i].right for i in part) - left
    for lo, hi in reversed(_gaps([(boxes[i].bottom, boxes[i].top) for i in part], 1e-6)):
        split = (lo + hi) / 2
        above = [i for i in part if boxes[i].bottom >= split]
        below = [i for i in part if boxes[i].bottom < split]
        body = median(boxes[i].height for i in above)
        lines = [boxes[i].height for i in below if boxes[i].width >= _NOTE_LINE_SHARE * width]
        if lines and max(lines) < _FOOTNOTE_SIZE * body:
            return above, below
    return part, []


def _lines(boxes: list[Box], part: list[int]) -> list[tuple[float, float, int]]:
    """(left, right, characters) of each line of a column: segments whose heights overlap
    (a label and its colon, a superscript) are one line."""
    by_y = sorted(part, key=lambda i: -boxes[i].top)
    lines: list[list[float]] = []  # [bottom, left, right, characters]
    for i in by_y:
        b = boxes[i]
        if lines and b.top > lines[-1][0] + 0.25 * b.height:
            line = lines[-1]
            line[0] = min(line[0], b.bottom)
            line[1] = min(line[1], b.left)
            line[2] = max(line[2], b.right)
            line[3] += b.chars
        else:
            lines.append([b.bottom, b.left, b.right, b.chars])
    return [(lo, hi, int(n)) for _, lo, hi, n in lines]
