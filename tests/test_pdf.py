"""PDF text extraction (heatc.pdf, `heatc extract`): the text fixes on hand-written strings,
reading order and fake-bold copies on hand-made geometry and PDFs (tests/support/pdfgen.py), the
bad inputs, the CLI, and the shared PDFs: CUAD's five against their reference texts, the
Chinese regulation, the Federal Register's three columns, the owner-protected 10-K."""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import SHARED_DATA
from support.pdfgen import BrokenPage, Image, Page, TextRun, write_pdf
from typer.testing import CliRunner

from heatc.cli import app
from heatc.errors import HeatError
from heatc.pdf import RECORD_FIELDS, character_error_rate, extract, extract_file
from heatc.pdf.columns import Box, reading_order
from heatc.pdf.compare import aligned_distance, fold, levenshtein
from heatc.pdf.doubles import repeated_lines, repeats_in_line, same_place
from heatc.pdf.normalise import HYPHEN, KEEP_BLOCKS, KEEP_TAGS, RADICALS, clean, nfkc, resolve_hyphens

pytestmark = pytest.mark.needs("pdf")

# --- normalisation -------------------------------------------------------------------------


def test_clean_newlines_controls_and_trailing_spaces():
    assert clean("a  \r\nb\rc\x00d\x07\n\n") == "a\nb\ncd"
    assert clean("low" + HYPHEN + "dose") == "low" + HYPHEN + "dose"  # the mark waits for the document


def test_nfkc_folds_compatibility_forms_but_keeps_exponents():
    assert nfkc("ﬁle １２３ mg\u00a0/ dL") == "file 123 mg / dL"
    assert nfkc("10⁹/L, H₂O, 5 m²") == "10⁹/L, H₂O, 5 m²"  # NFKC alone: "109/L, H2O, 5 m2"
    assert nfkc("\u2f08\u2f26") == "人子"  # Kangxi radicals: NFKC folds them


# The CJK Unified Ideographs blocks (Python's own Unicode data may predate the newest).
_CJK_UNIFIED = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0x20000, 0x2A6DF), (0x2A700, 0x2EBEF), (0x30000, 0x323AF))


def test_radicals_supplement_mapped_where_nfkc_leaves_it():
    assert nfkc("国家金融监督管理总局\u2ea0法\u2ecb") == "国家金融监督管理总局民法车"
    for src, dst in RADICALS.items():
        assert 0x2E80 <= src <= 0x2EFF and unicodedata.name(chr(src)).startswith("CJK RADICAL")
        assert unicodedata.normalize("NFKC", chr(src)) == chr(src), "NFKC folds it already: drop it from the map"
        assert any(lo <= ord(dst) <= hi for lo, hi in _CJK_UNIFIED), f"{src:X} -> {ord(dst):X}"
    folded = {chr(c) for c in range(0x2E80, 0x2F00) if unicodedata.normalize("NFKC", chr(c)) != chr(c)}
    assert folded == {"\u2e9f", "\u2ef3"}  # the two the map leaves out


def test_kangxi_radicals_all_folded_by_nfkc():
    assigned = [chr(c) for c in range(0x2F00, 0x2FE0) if unicodedata.category(chr(c)) != "Cn"]
    assert len(assigned) == 214
    assert all(not 0x2E80 <= ord(nfkc(c)) <= 0x2FDF for c in assigned)


def test_kept_blocks_hold_every_superscript_and_subscript():
    tagged = {c >> 8 for c in range(0x80, 0x110000) if unicodedata.decomposition(chr(c)).startswith(KEEP_TAGS)}
    assert tagged <= set(KEEP_BLOCKS)


def test_resolve_hyphens_keeps_compounds_and_joins_broken_words():
    pages = ["a low" + HYPHEN + "dose of day-to" + HYPHEN + "day care; treat" + HYPHEN + "ment", "the treatment works"]
    assert resolve_hyphens(pages) == ["a low-dose of day-to-day care; treatment", "the treatment works"]
    assert resolve_hyphens([HYPHEN + "x", "y" + HYPHEN]) == ["-x", "y-"]
    # A tie keeps the hyphen: "non-payment" once, "nonpayment" once.
    assert resolve_hyphens(["non" + HYPHEN + "payment, non-payment, nonpayment"])[0].startswith("non-payment")


# --- fake-bold copies --------------------------------------------------------------------------


def _boxes(positions: list[float], height: float = 10.0):
    return lambda i: (positions[i], 0.0, positions[i] + 8.0, height)


def test_same_place_scales_with_height_not_width():
    assert same_place((0, 0, 500, 10), (1, 0.5, 501, 10.5))
    assert not same_place((0, 0, 500, 10), (0, 20, 500, 30))  # the same line text lower down
    assert not same_place((0, 0, 2, 10), (2.5, 0, 4.5, 10))  # "ll": one advance apart


def test_repeats_in_line():
    # 国家金金融: the second 金 at the first one's place.
    assert repeats_in_line("国家金金融", _boxes([0, 10, 20, 20, 30])) == [range(3, 4)]
    # A real repeat (人人) sits a full advance further on.
    assert repeats_in_line("人人平等", _boxes([0, 10, 20, 30])) == []
    # A run drawn twice, a generated space between the copies.
    text = "Article 1 Article 1 applies"
    pos = [float(i) * 6 for i in range(len(text))]
    for j in range(10, 19):
        pos[j] = pos[j - 10]
    assert repeats_in_line(text, _boxes(pos)) == [range(9, 19)]


def test_repeated_lines():
    lines = [("Article 1", (0, 100, 50, 110)), ("text", (0, 80, 50, 90)), ("Article 1", (0.2, 100, 50, 110))]
    assert repeated_lines(lines) == {2}
    assert repeated_lines([("Article 1", (0, 100, 50, 110)), ("Article 1", (0, 50, 50, 60))]) == set()


# --- reading order ---------------------------------------------------------------------------


def _column(left: float, top: float, lines: int, width: float = 200, chars: int = 40) -> list[Box]:
    return [Box(left, top - 12 * i - 9, left + width, top - 12 * i, chars) for i in range(lines)]


def test_two_columns_stored_row_by_row_read_column_by_column():
    left, right = _column(50, 700, 8), _column(300, 700, 8)
    stored = [b for pair in zip(left, right, strict=True) for b in pair]  # the naive order
    order = reading_order(stored)
    assert [stored[i] for i in order] == left + right


def test_header_and_footer_around_columns():
    header = [Box(50, 740, 500, 750, 60)]
    footer = [Box(50, 40, 500, 50, 60)]
    left, right = _column(50, 700, 6), _column(300, 700, 6)
    stored = footer + right + header + left
    assert [stored[i] for i in reading_order(stored)] == header + left + right + footer


def test_a_table_keeps_its_rows():
    # A label column and two number columns: vertical whitespace, but not running text.
    rows = []
    for i in range(10):
        y = 700 - 12 * i
        rows += [Box(50, y - 9, 200, y, 25), Box(300, y - 9, 330, y, 5), Box(400, y - 9, 430, y, 5)]
    assert reading_order(rows) == list(range(len(rows)))


def test_footnotes_after_all_columns():
    left, right = _column(50, 700, 8), _column(300, 700, 8)
    notes = [Box(50, 500 - 9 * i - 6, 250, 500 - 9 * i, 50) for i in range(3)]  # smaller type, at the foot
    stored = notes + left + right
    assert [stored[i] for i in reading_order(stored)] == left + right + notes


def test_single_column_keeps_stored_order_and_vertical_text_goes_last_on_columns():
    body = _column(50, 700, 5, width=500)
    stored = [body[3], body[0], Box(10, 100, 15, 300, 30), body[1], body[2], body[4]]
    assert reading_order(stored) == list(range(len(stored)))  # no columns: as stored
    left, right = _column(50, 700, 6), _column(300, 700, 6)
    stored = [Box(10, 100, 15, 300, 30), *right, *left]
    assert [stored[i] for i in reading_order(stored)] == [*left, *right, stored[0]]


# --- dense pages: the work grows with the runs, not with their square ----------------------------


def _naive_repeated_lines(lines):
    """repeated_lines as docs/pdf.md defines it: a line whose text and box repeat a kept earlier
    line's, of its band of 8 points or the next, is dropped (every earlier line compared)."""
    kept, drop = [], set()
    for i, (text, box) in enumerate(lines):
        key, band = text.strip(), int(box[3] // 8.0)
        if not key:
            continue
        if any(k == key and abs(b - band) <= 1 and same_place(box, other) for k, b, other in kept):
            drop.add(i)
        else:
            kept.append((key, band, box))
    return drop


_EDGE = st.integers(0, 8).map(lambda i: 1.8 + i * 0.05)  # across 2: the edge of a cell of every size


def _line(text: str, left: float, base: float, up: float, width: float, height: float):
    return text, (left, base + up, left + width, base + up + height)


_LINE = st.builds(
    _line,
    st.sampled_from(["1", "the", " "]),
    _EDGE,
    st.sampled_from([0.0, 5.9]),
    _EDGE,
    st.sampled_from([-0.5, 0.0, 4.0, 4.1, 4.3]),
    st.integers(-2, 36).map(lambda i: i * 0.1),
)


@settings(max_examples=500)
@given(st.lists(_LINE, max_size=40))
@example([("1", (1.95, 0, 5.95, 1)), ("1", (2.1, 0, 6.1, 1))])  # left edges 0.15 apart, across a cell's edge
@example([("1", (0, 0.95, 4, 1.95)), ("1", (0, 1.1, 4, 2.1))])  # top edges so
@example([("1", (0, 0, 4, 1.0)), ("1", (0, 0, 4, 0.9))])  # heights of two classes
@example([("1", (0, 1, 4, 1)), ("1", (0, 1, 4, 1)), ("1", (0, 1, 4, 1.1))])  # of no height
@example([("1", (4, 1, 0, 2)), ("1", (4, 1, 0, 2)), ("1", (0, 2, 4, 1)), ("1", (0, 2.1, 4, 1))])  # not normalised
@example([("1", (0, -math.inf, 4, 1)), ("1", (0, 0, 4, 1)), ("1", (math.inf, 0, 9, 1)), ("1", (math.inf, 0, 9, 1))])
@example([("1", (0, 0, 10, 100)), ("1", (300, 0, 310, 84)), ("1", (0, 0, 10, 83.9))])  # coincide, 2 bands apart
def test_repeated_lines_compares_only_near_lines_and_drops_the_same(lines):
    """Boxes on a grid of 0.05 points, some across a band's edge, of heights -0.2 to 3.6 points
    and widths -0.5 to 4.3: many near each other, of no height, or not normalised. The lines of a
    text are found through the grid once there are more than a few (here: from the first)."""
    from heatc.pdf import doubles

    assert repeated_lines(lines) == _naive_repeated_lines(lines)
    few, doubles._FEW = doubles._FEW, 0
    try:
        assert repeated_lines(lines) == _naive_repeated_lines(lines)
    finally:
        doubles._FEW = few


def _dense_page(path: Path, runs: int, same: bool) -> Path:
    """`runs` short runs in rows of 12 across the page, each a segment of its own (far apart on
    a line PDFium reads as one), 40 rows deep, then the rows again a little lower and to the
    right (more than a copy's offset): the same word everywhere, or numbers."""
    cells = []
    for k in range(runs):
        row, col = divmod(k, 12)
        again = row // 40
        x, y = 10 + col * 50 + again * 4.7, 785 - (row % 40) * 2.3 - again * 1.3
        cells.append(TextRun(round(x, 2), round(y, 2), "x" if same else f"{k % 997:,}", size=6))
    return write_pdf(path, [Page(cells)])


def test_a_dense_page_costs_the_runs_not_their_square(tmp_path, monkeypatch):
    """Characters read by count_rects grow x2 when the runs double, and boxes compared stay a
    few per run. Before, each cut in a line was searched from the line's start (x4 per doubling
    in characters read) and each line compared with every earlier line of its text and band
    (x4 in comparisons): a page of 100,000 runs did not finish in 4 minutes."""
    import pypdfium2 as pdfium

    from heatc.pdf import doubles

    read, compared = [0], [0]
    count_rects = pdfium.PdfTextPage.count_rects

    def counted_count_rects(self, index=0, count=-1):
        read[0] += count if count >= 0 else self.count_chars() - index
        return count_rects(self, index, count)

    def counted_same_place(a, b):
        compared[0] += 1
        return same_place(a, b)

    monkeypatch.setattr(pdfium.PdfTextPage, "count_rects", counted_count_rects)
    monkeypatch.setattr(doubles, "same_place", counted_same_place)
    for same in (False, True):
        work = []
        for runs in (1500, 3000):
            read[0] = compared[0] = 0
            page = extract_file(_dense_page(tmp_path / f"dense{runs}{same}.pdf", runs, same)).pages[0]
            assert page.error is None and len(page.text) >= runs
            work.append((read[0], compared[0]))
        (read1, _), (read2, compared2) = work
        assert read2 < 2.3 * read1, work
        # a line meets at most the 3 x 16 earlier lines of its text in its bands one by one, or
        # else the few in the grid's cells near it (before: 360 a run on the page of one word)
        assert compared2 < 3 * 16 * 3000, work


def test_segment_bounds_searched_from_the_cut_before_are_those_from_the_line_start(tmp_path):
    """Where each segment of a line begins: the shortest prefix of the line that needs one more
    rectangle than the cut's index, searched from the line's start for every cut."""
    import pypdfium2 as pdfium

    from heatc.pdf import pages

    pdf = pdfium.PdfDocument(_dense_page(tmp_path / "dense.pdf", 600, False))
    textpage = pdf[0].get_textpage()
    raw = pages._page_chars(textpage, textpage.count_chars())
    checked = 0
    for start, end in pages._lines(raw):
        rects = pages._rects(textpage, start, end)
        if not rects:
            continue
        height = max(r[3] - r[1] for r in rects)
        cuts = [
            k
            for k in range(1, len(rects))
            if rects[k][0] - rects[k - 1][2] >= pages._SEGMENT_GAP * height
            or rects[k][3] <= rects[k - 1][1]
            or rects[k][1] >= rects[k - 1][3]
        ]
        want = []
        for k in cuts:
            lo, hi = 1, end - start
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if textpage.count_rects(start, mid) >= k + 1 else (mid + 1, hi)
            want.append(start + lo - 1)
        assert [s.start for s in pages._segments(textpage, start, end, rects)[1:]] == want
        checked += len(cuts)
    pdf.close()
    assert checked > 100


# --- comparing against a reference -----------------------------------------------------------


@given(st.text("ab c", max_size=14), st.text("ab c", max_size=14))
def test_levenshtein_against_the_textbook_recurrence(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
        prev = cur
    assert levenshtein(a, b) == prev[-1]


@given(
    st.lists(st.sampled_from(["a", "bb", "ab", "c"]), max_size=8),
    st.lists(st.sampled_from(["a", "bb", "ab", "c"]), max_size=8),
)
def test_aligned_distance_bounds_levenshtein(wa, wb):
    a, b = " ".join(wa), " ".join(wb)
    assert aligned_distance(a, b) >= levenshtein(a, b)


def test_character_error_rate_folds_quotes_and_whitespace():
    assert fold(" “Agreement”\n  means\t‘this’ ") == "\"Agreement\" means 'this'"
    assert character_error_rate("“Agreement”\nmeans this", '"Agreement" means this') == 0.0
    assert character_error_rate("the Agreement means thus", "the Agreement means this") == pytest.approx(1 / 24)


# --- hand-made PDFs ----------------------------------------------------------------------------

# Six lines in each of two columns, written row by row: col 1 line 1, col 2 line 1, ... —
# PDFium reads each row as one line; the reading order is column 1, then column 2.
LEFT = [
    "The first column starts here and it",
    "carries on down the page with words",
    "that a reader takes in one line at",
    "a time until this column comes to",
    "its end at the bottom of the page,",
    "and only then moves to the second.",
]
RIGHT = [
    "The second column begins at the top",
    "again and it goes on in the same way",
    "with more words on every line until",
    "it too reaches the bottom of a page",
    "where the text of the page ends for",
    "good and the next page takes over.",
]


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pdfs")
    prose = Page(
        [
            TextRun(72, 720, "The patient took a low-"),
            TextRun(72, 708, "dose of aspirin for the treat-"),
            TextRun(72, 696, "ment of pain. The treatment helped."),
            TextRun(72, 660, "Article 1"),
            *[TextRun(72, 640 - 12 * i, f"Filler line {i}.") for i in range(6)],
            TextRun(72, 660, "Article 1"),  # drawn again later: a fake-bold copy PDFium keeps
        ]
    )
    columns = Page([TextRun(x, 700 - 12 * i, text) for i in range(6) for x, text in ((72, LEFT[i]), (320, RIGHT[i]))])
    return {
        "prose": write_pdf(d / "prose.pdf", [prose, columns]),
        "mixed": write_pdf(
            d / "mixed.pdf",
            [
                Page([TextRun(72, 720, "First page")]),
                BrokenPage(),
                Page([TextRun(72, 720, "Third page")]),
                Page(images=[Image()]),
                Page(),
            ],
        ),
        "user": write_pdf(d / "user.pdf", [prose], user_password="open", owner_password="owner"),
        "owner": write_pdf(d / "owner.pdf", [prose], owner_password="owner"),
        "text": _write(d / "notes.pdf", b"these are not the bytes of a PDF\n" * 20),
        "truncated": _write(d / "truncated.pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog"),
    }


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_line_end_hyphens_copies_and_records(pdfs):
    doc = extract_file(pdfs["prose"])
    first = doc.pages[0]
    assert first.text.startswith("The patient took a low-dose of aspirin for the treatment of pain.")
    assert first.text.count("Article 1") == 1
    assert (first.file, first.page, first.scanned, first.error) == (str(pdfs["prose"]), 1, False, None)
    assert first.sha256 == hashlib.sha256(pdfs["prose"].read_bytes()).hexdigest()
    assert not re.search("[\x02\ufffe\r]", doc.text)


def test_columns_stored_row_by_row_read_in_column_order(pdfs):
    text = extract_file(pdfs["prose"], pages=[2]).pages[0].text
    assert text.split("\n") == LEFT + RIGHT


def test_failed_scanned_and_empty_pages_keep_their_numbers(pdfs):
    doc = extract_file(pdfs["mixed"])
    assert [(p.page, p.text) for p in doc.pages] == [(1, "First page"), (2, ""), (3, "Third page"), (4, ""), (5, "")]
    assert doc.failed == [2] and "cannot be loaded" in doc.pages[1].error
    assert doc.scanned == [4]  # page 5 has neither text nor an image: empty, not scanned


def test_owner_password_only_reads_normally(pdfs):
    assert extract_file(pdfs["owner"]).pages[0].text.startswith("The patient took a low-dose")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("user", "encrypted: needs a password"),
        ("text", "not a PDF, or damaged beyond repair"),
        ("truncated", "not a PDF, or damaged beyond repair"),
    ],
)
def test_files_that_cannot_be_opened(pdfs, name, message):
    with pytest.raises(HeatError) as e:
        extract_file(pdfs[name])
    assert e.value.render() == f"{pdfs[name]}: error: {message}"


def test_every_bad_file_is_named_and_nothing_is_read(pdfs, tmp_path):
    with pytest.raises(HeatError) as e:
        extract([pdfs["prose"], pdfs["user"], tmp_path / "missing.pdf"])
    assert [d.path for d in e.value.diagnostics] == [str(pdfs["user"]), str(tmp_path / "missing.pdf")]
    assert "cannot read: No such file or directory" in e.value.render()
    with pytest.raises(HeatError, match="has 2 pages; asked for page 3"):
        extract_file(pdfs["prose"], pages=[3])


def test_worker_processes_give_the_same_records_in_the_same_order(pdfs):
    files = [pdfs["mixed"], pdfs["prose"], pdfs["owner"]]
    assert extract(files, workers=2) == extract(files, workers=1)


# --- the command line --------------------------------------------------------------------------

runner = CliRunner()


def test_cli_prints_pages_with_headers_and_a_summary(pdfs):
    r = runner.invoke(app, ["extract", str(pdfs["mixed"])])
    assert r.exit_code == 0, r.output
    f = pdfs["mixed"]
    assert r.stdout.splitlines()[:3] == [f"==> {f} page 1 of 5 <==", "First page", ""]
    assert f"==> {f} page 2 of 5 (failed: page cannot be loaded" in r.stdout
    assert f"==> {f} page 4 of 5 (scanned: no text layer) <==" in r.stdout
    assert r.stderr.splitlines()[-1] == "heatc extract: 1 file, 5 pages, 1 scanned, 1 failed"
    assert f"{f}: page 2: page cannot be loaded" in r.stderr


def test_cli_json_records_to_a_file(pdfs, tmp_path):
    out = tmp_path / "pages.jsonl"
    r = runner.invoke(app, ["extract", "--json", str(pdfs["prose"]), str(pdfs["mixed"]), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [tuple(rec) for rec in records] == [RECORD_FIELDS] * 7
    assert [(rec["file"], rec["page"]) for rec in records] == [(str(pdfs["prose"]), 1), (str(pdfs["prose"]), 2)] + [
        (str(pdfs["mixed"]), n) for n in range(1, 6)
    ]
    assert records[3]["error"] and records[5]["scanned"] is True


def test_cli_bad_input_writes_nothing(pdfs, tmp_path):
    out = tmp_path / "pages.txt"
    out.write_text("earlier output\n")
    r = runner.invoke(app, ["extract", str(pdfs["prose"]), str(pdfs["user"]), "-o", str(out)])
    assert r.exit_code == 1
    assert r.stdout == ""
    assert r.stderr == f"{pdfs['user']}: error: encrypted: needs a password\n"
    assert "Traceback" not in r.output
    assert out.read_text() == "earlier output\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pages.txt"]  # no temporary left


# --- the shared PDFs ---------------------------------------------------------------------------

needs_shared = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"the shared PDFs are not at {SHARED_DATA}")
CUAD_TEXT = SHARED_DATA / "legal/text/cuad_selected_txt"


def _shared(pattern: str) -> Path:
    (path,) = SHARED_DATA.glob(pattern)
    return path


@needs_shared
@pytest.mark.parametrize("pdf", sorted(p.name for p in (SHARED_DATA / "legal/pdf").glob("cuad_*")) or ["none"])
def test_cuad_against_its_reference_text(pdf):
    path = SHARED_DATA / "legal/pdf" / pdf
    reference = (CUAD_TEXT / (path.stem.removeprefix("cuad_") + ".txt")).read_text(encoding="utf-8")
    doc = extract_file(path)
    assert not doc.failed and not doc.scanned
    assert character_error_rate(doc.text, reference) <= 0.001


@needs_shared
def test_chinese_regulation_has_no_radicals_and_no_doubled_headings():
    doc = extract_file(_shared("finance/pdf/zh_*.pdf"))
    text = doc.text
    assert not re.search("[\u2e80-\u2eff\u2f00-\u2fdf]", text)
    # The title and the heading are drawn twice (fake bold); PDFium keeps one character
    # of each copy ("国家金金融", "保险销售行行为").
    assert text.startswith("国家金融监督管理总局令\n")
    assert "\n保险销售行为管理办法\n" in text
    assert "金金" not in text and "行行" not in text
    headings = re.findall(r"^(第[一二三四五六七八九十百]+[章条])", text, re.M)
    assert len(headings) > 50 and not any(text.count(h + h) for h in headings)


@needs_shared
def test_federal_register_page_reads_in_column_order():
    import pypdfium2 as pdfium

    path = _shared("legal/pdf/us_federal_register_*.pdf")
    text = fold(extract_file(path, pages=[2]).pages[0].text)
    # Crosses from the second column to the third: a line-by-line (top to bottom) reading
    # interleaves the columns here.
    assert "the manufacturer, the operator, and the Ethiopian Civil Aviation Authority (ECAA)." in text
    # The PDF stores the footnotes before the body; read, the body comes first.
    pdf = pdfium.PdfDocument(path)
    stored = pdf[1].get_textpage().get_text_range()
    pdf.close()
    assert stored.index("Preliminary KNKT") < stored.index("Hatta International Airport")
    assert text.index("Hatta International Airport") < text.index("activation, airspeed disagree alert, and")
    assert text.index("activation, airspeed disagree alert, and") < text.index("1Preliminary KNKT")


@needs_shared
def test_owner_protected_10k_reads_normally():
    path = _shared("finance/pdf/uber_*.pdf")
    assert b"/Encrypt" in path.read_bytes()
    doc = extract_file(path, pages=[1, 2])
    assert doc.page_count > 300 and not doc.failed
    assert "UNITED STATES" in doc.pages[0].text.upper()
