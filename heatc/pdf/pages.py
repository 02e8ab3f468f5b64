"""One page's text with pypdfium2. PDFium's text page gives the characters in the order the
PDF draws them, with generated spaces and "\\r\\n" line breaks, and a rectangle for each run
of characters on a line. From those: physical lines (PDFium's lines, also broken after a
line-end hyphen, where PDFium drops the break), cut into segments at wide gaps (a line that
runs across two columns), copies of fake-bold text dropped (doubles.py), the segments put
in reading order (columns.py), and the text cleaned (normalise.py), line-end hyphens left
marked for the document-wide decision.

PDFium is not thread-safe: call this from one thread per process.

Public surface: PageText, read_page.
"""

from __future__ import annotations

import ctypes
import itertools
import re
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from heatc.pdf import doubles
from heatc.pdf.columns import Box, reading_order
from heatc.pdf.normalise import HYPHEN, clean

# PDFium writes a line-end hyphen as U+0002 (FPDFText_GetUnicode) or U+FFFE (FPDFText_GetText).
_PDFIUM_HYPHENS = ("\x02", "\ufffe")
# A line is cut into segments where its runs are this many line heights apart: wider than
# a word space, narrower than a column gutter.
_SEGMENT_GAP = 0.8
_LINE_END = re.compile("\r\n|[" + "".join(_PDFIUM_HYPHENS) + "]")


@dataclass(frozen=True)
class PageText:
    text: str  # cleaned, with HYPHEN marks where a word may carry on over a line break
    scanned: bool  # no characters, and an image: a scan without a text layer
    error: str | None  # why the page could not be read; then text is ""


@dataclass
class _Segment:
    start: int  # [start, end) in the page's character indices
    end: int
    box: Box


def read_page(pdf: pdfium.PdfDocument, index: int) -> PageText:
    """Page `index` (0-based) of an open document. A page PDFium cannot load is reported in
    `error`, never raised."""
    try:
        page = pdf[index]
    except pdfium.PdfiumError as e:
        return PageText("", False, f"page cannot be loaded (PDFium: {e})")
    try:
        textpage = page.get_textpage()
        n = textpage.count_chars()
        raw = _page_chars(textpage, n)
        if not raw.strip():
            return PageText("", _has_image(page), None)
        return PageText(_text(textpage, raw), False, None)
    except pdfium.PdfiumError as e:
        return PageText("", False, f"page text cannot be read (PDFium: {e})")
    finally:
        page.close()


def _page_chars(textpage: pdfium.PdfTextPage, n: int) -> str:
    """One Python character per PDFium character index (FPDFText_GetText writes UTF-16, so
    a character beyond the BMP would shift every index after it)."""
    if n <= 0:
        return ""
    text = textpage.get_text_range(0, n)
    if len(text) == n:
        return text
    return "".join(chr(pdfium_c.FPDFText_GetUnicode(textpage, i)) for i in range(n))


def _has_image(page: pdfium.PdfPage) -> bool:
    # Form XObjects nest: a scanner's image is often one level down.
    return any(True for _ in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=4))


def _lines(raw: str) -> list[tuple[int, int]]:
    """[start, end) of each physical line: PDFium's lines, also ended after a hyphen mark."""
    out, start = [], 0
    for m in _LINE_END.finditer(raw):
        if m.group() == "\r\n":
            out.append((start, m.start()))
        else:
            out.append((start, m.end()))
        start = m.end()
    out.append((start, len(raw)))
    return [(s, e) for s, e in out if not raw[s:e].isspace() and e > s]


def _rects(textpage: pdfium.PdfTextPage, start: int, end: int) -> list[tuple[float, float, float, float]]:
    """(left, bottom, right, top) of each run of the line [start, end)."""
    # The raw call with reused out-parameters: pages with a text object per glyph have
    # thousands of runs, and the helper allocates four doubles per call.
    left, top, right, bottom = (ctypes.c_double() for _ in range(4))
    refs = (ctypes.byref(left), ctypes.byref(top), ctypes.byref(right), ctypes.byref(bottom))
    out = []
    for k in range(textpage.count_rects(start, end - start)):
        pdfium_c.FPDFText_GetRect(textpage, k, *refs)
        out.append((left.value, bottom.value, right.value, top.value))
    return out


def _overlapping(rects) -> bool:
    """Whether a run is drawn over another run of the same line (a fake-bold copy); a copy
    and its original are neighbours once sorted by their left edges."""
    ordered = sorted(rects)
    for a, b in itertools.pairwise(ordered):
        w = min(a[2] - a[0], b[2] - b[0])
        if w > 0 and min(a[2], b[2]) - b[0] > 0.5 * w and min(a[3], b[3]) - max(a[1], b[1]) > 0:
            return True
    return False


def _segments(textpage: pdfium.PdfTextPage, start: int, end: int, rects) -> list[_Segment]:
    """The line [start, end) cut where its runs (`rects`, as count_rects gave them) are far
    apart or on different lines."""
    n = end - start
    count = len(rects)
    height = max(r[3] - r[1] for r in rects)
    # Cut at a wide gap, and where a run lies wholly above or below the one before (PDFium
    # took the next line for the same one).
    cuts = [
        k
        for k in range(1, count)
        if rects[k][0] - rects[k - 1][2] >= _SEGMENT_GAP * height
        or rects[k][3] <= rects[k - 1][1]
        or rects[k][1] >= rects[k - 1][3]
    ]
    if not cuts:
        return [_Segment(start, end, _union(rects, n))]
    # Rectangles follow the characters in order; the k-th begins at the shortest prefix
    # that needs k + 1 of them. PDFium starts a rectangle where a character (not a generated
    # one, nor one of no size) belongs to another text object than the one before, so counted
    # from where one begins, the rectangles after it are the same: each boundary is searched
    # from the one before, a doubling step then halving, and count_rects (which reads the
    # characters it counts) reads a line about log n times, not once per cut.
    bounds = []
    at, rect = start, 0  # the character where rectangle `rect` begins (rectangle 0: the line's start)
    for k in cuts:
        need = k - rect + 1
        step = 1
        while step < end - at and textpage.count_rects(at, step) < need:
            step *= 2
        lo, hi = step // 2 + 1, min(step, end - at)
        while lo < hi:
            mid = (lo + hi) // 2
            if textpage.count_rects(at, mid) >= need:
                hi = mid
            else:
                lo = mid + 1
        at, rect = at + lo - 1, k
        bounds.append(at)
    groups = [0, *cuts, count]
    edges = [start, *bounds, end]
    return [
        _Segment(edges[g], edges[g + 1], _union(rects[groups[g] : groups[g + 1]], edges[g + 1] - edges[g]))
        for g in range(len(cuts) + 1)
    ]


def _union(rects, chars: int) -> Box:
    return Box(
        min(r[0] for r in rects), min(r[1] for r in rects), max(r[2] for r in rects), max(r[3] for r in rects), chars
    )


def _text(textpage: pdfium.PdfTextPage, raw: str) -> str:
    dropped: set[int] = set()
    segments: list[_Segment] = []
    for start, end in _lines(raw):
        rects = _rects(textpage, start, end)
        if not rects:
            continue
        # Only a line with a run drawn over another can hold a copy: the character-level
        # check is costly, and PDFium reports each copy as a run of its own.
        if len(rects) > 1 and _overlapping(rects):
            for r in doubles.repeats_in_line(raw[start:end], lambda j, s=start: textpage.get_charbox(s + j)):
                dropped.update(range(start + r.start, start + r.stop))
        segments.extend(_segments(textpage, start, end, rects))

    def seg_text(s: _Segment) -> str:
        if not dropped:
            return raw[s.start : s.end]
        return "".join(raw[i] for i in range(s.start, s.end) if i not in dropped)

    segments = [s for s in segments if seg_text(s).strip()]
    copies = doubles.repeated_lines([(seg_text(s), _edges(s.box)) for s in segments])
    segments = [s for k, s in enumerate(segments) if k not in copies]
    order = reading_order([s.box for s in segments])
    pieces: list[str] = []
    previous: _Segment | None = None
    for k in order:
        s = segments[k]
        text = seg_text(s)
        if previous is not None:
            if pieces[-1].endswith(_PDFIUM_HYPHENS):
                if _continues(previous.box, s.box) and text.lstrip()[:1].isalnum():
                    pieces[-1] = pieces[-1][:-1] + HYPHEN
                    text = text.lstrip()
                else:
                    pieces[-1] = pieces[-1][:-1] + "-\n"
                    text = text.lstrip()
            elif previous.end != s.start or not _same_line(previous.box, s.box):
                pieces[-1] = pieces[-1].rstrip() + "\n"
                text = text.lstrip()
        pieces.append(text)
        previous = s
    if pieces and pieces[-1].endswith(_PDFIUM_HYPHENS):
        pieces[-1] = pieces[-1][:-1] + "-"
    return clean("".join(pieces))


def _edges(b: Box) -> doubles.CharBox:
    return (b.left, b.bottom, b.right, b.top)


def _same_line(a: Box, b: Box) -> bool:
    return a.bottom < b.top and b.bottom < a.top


def _continues(above: Box, below: Box) -> bool:
    """Whether `below` is the next line of the paragraph `above` ends: just below it, in the
    same column."""
    h = max(above.height, below.height)
    return -0.5 * h <= above.bottom - below.top <= h and below.left < above.right and below.right > above.left - h
