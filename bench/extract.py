"""PDF text: heatc.pdf against the text a user would otherwise take — pypdfium2's own
get_text_bounded() (what heatc builds on, no fixes), pypdf and pdfplumber — on every PDF in
../shared/data/*/pdf/, in one run. `python bench/extract.py [--repeats N]` (needs the bench
extra for the peers: pip install -e '.[dev,bench]').

Per file and extractor: pages per CPU second of this process (time.process_time, so that
other work on a shared machine does not count; median of --repeats rounds, the extractors
interleaved within a round; pdfplumber, at a few pages a second, one round), pages with no
text (heatc: scanned pages, an image and no characters), and where a reference text exists
(CUAD's five contracts, ../shared/data/legal/text/cuad_selected_txt/) the character error
rate: exact Levenshtein distance over the reference's length after folding quotes and
whitespace (heatc.pdf.compare). Then the checks: the Chinese regulation's radical code points
(U+2E80–U+2FDF) and doubled fake-bold headings, the 10-K's table rows kept on one line (a
label and two numbers), and heatc over all files with worker processes.

Dense pages (`--dense`): one page of N text runs, written by tests/support/pdfgen.py, N doubling up
to 100,000 (a 4 MB page), in five shapes: numbers in rows of cells far apart (PDFium reads a
row as one line of many segments), one word everywhere (every line's text repeats), words
scattered at random, runs on one line drawn over each other (fake bold everywhere), and a
column of one line per run stacked a sliver apart. CPU seconds of heatc and of pypdfium2's
text and rectangles alone, the median of --repeats. Target: a 100,000-run page in <= 5 s.

    python bench/extract.py --dense [--runs 1000,2000,4000,100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
REFERENCES = DATA / "legal/text/cuad_selected_txt"
# The Chinese regulation's two fake-bold headings, and how PDFium's leftovers double them.
HEADINGS = {"国家金融监督管理总局令": "国家金金融", "保险销售行为管理办法": "销售行行为"}
_RADICAL = re.compile("[\u2e80-\u2fdf]")
_ARTICLE_TWICE = re.compile(r"(第[一二三四五六七八九十百]+[章条])\s*\1")
# A table row on one line: a label, then two amounts ("Revenue $ 11,139 $ 17,455",
# "Interest expense (458) (483)").
_NUMBER = r"\(?\$?[ \t]?\d{1,3}(?:,\d{3})*(?:\.\d+)?\)?%?"
_ROW = re.compile(rf"^[A-Za-z][A-Za-z ,.'’()&/-]{{2,}}?[ \t]+{_NUMBER}[ \t]+(?:\$[ \t]*)?{_NUMBER}[ \t]*$", re.M)


def heatc_pages(path: Path) -> list[str]:
    from heatc.pdf import extract_file

    return [p.text for p in extract_file(path).pages]


def pdfium_pages(path: Path) -> list[str]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(path)
    try:
        return [pdf[i].get_textpage().get_text_bounded() for i in range(len(pdf))]
    finally:
        pdf.close()


def pypdf_pages(path: Path) -> list[str]:
    from pypdf import PdfReader

    return [page.extract_text() or "" for page in PdfReader(path).pages]


def pdfplumber_pages(path: Path) -> list[str]:
    import logging

    import pdfplumber

    logging.getLogger("pdfminer").setLevel(logging.ERROR)  # a warning per glyph of some fonts

    with pdfplumber.open(path) as pdf:
        return [page.extract_text() or "" for page in pdf.pages]


EXTRACTORS = {"heatc": heatc_pages, "pypdfium2": pdfium_pages, "pypdf": pypdf_pages, "pdfplumber": pdfplumber_pages}
SLOW = {"pdfplumber"}  # one round: minutes for the 10-K alone


def available() -> dict:
    out = {}
    for name, fn in EXTRACTORS.items():
        module = {"heatc": "pypdfium2", "pypdfium2": "pypdfium2"}.get(name, name)
        try:
            __import__(module)
        except ModuleNotFoundError:
            print(f"bench: {name} is not installed (pip install -e '.[dev,bench]'); left out", file=sys.stderr)
            continue
        out[name] = fn
    return out


def reference(path: Path) -> str | None:
    twin = REFERENCES / (path.stem.removeprefix("cuad_") + ".txt")
    return twin.read_text(encoding="utf-8") if twin.is_file() else None


# --- dense pages ---------------------------------------------------------------------------


def dense_page(shape: str, runs: int):
    """One tests/support/pdfgen.py page of `runs` runs in `shape` (the docstring's five)."""
    import random

    from support.pdfgen import Page, TextRun

    rng = random.Random(runs)
    word = lambda: "".join(rng.choice("abcdefghij") for _ in range(3))  # noqa: E731
    out = []
    for k in range(runs):
        row, col = divmod(k, 12)
        if shape == "numbers in rows":
            out.append(TextRun(10 + col * 50, round(785 - (row * 2.3) % 780, 2), f"{rng.randint(1, 999):,}", size=6))
        elif shape == "one word everywhere":
            again = row // 40
            out.append(TextRun(10 + col * 50 + again * 4.7, round(785 - row % 40 * 2.3 - again * 1.3, 2), "x", size=6))
        elif shape == "scattered words":
            out.append(TextRun(round(rng.uniform(0, 600), 2), round(rng.uniform(0, 790), 2), word(), size=8))
        elif shape == "drawn over each other":
            out.append(TextRun(round(5 + (k % 400) * 1.45, 2), round(780 - (k // 400) * 3.1 % 775, 2), word(), size=5))
        else:  # a column of one line per run
            step = 780 / runs
            out.append(TextRun(20, round(785 - k * step, 3), "lorem ipsum dolor sit amet", size=round(0.7 * step, 3)))
    return Page(out)


DENSE_SHAPES = ("numbers in rows", "one word everywhere", "scattered words", "drawn over each other", "one column")


def pdfium_alone(path: Path) -> None:
    """What heatc asks of PDFium, without heatc: the page's characters and rectangles."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(path)
    try:
        textpage = pdf[0].get_textpage()
        n = textpage.count_chars()
        textpage.get_text_range(0, n)
        for k in range(textpage.count_rects(0, n)):
            textpage.get_rect(k)
    finally:
        pdf.close()


def run_dense(sizes: list[int], repeats: int) -> None:
    import tempfile

    from support.pdfgen import write_pdf

    from heatc.pdf import extract_file

    print("| shape | runs | MB | heatc CPU s | pypdfium2 alone CPU s | characters |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in DENSE_SHAPES:
            for runs in sizes:
                path = write_pdf(Path(tmp) / "dense.pdf", [dense_page(shape, runs)])
                heatc, alone = [], []
                for _ in range(repeats):
                    t = time.process_time()
                    page = extract_file(path).pages[0]
                    heatc.append(time.process_time() - t)
                    t = time.process_time()
                    pdfium_alone(path)
                    alone.append(time.process_time() - t)
                mb = path.stat().st_size / 1e6
                print(
                    f"| {shape} | {runs} | {mb:.1f} | {statistics.median(heatc):.2f} | {statistics.median(alone):.2f} "
                    f"| {len(page.text)} |",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds per file for the faster extractors")
    parser.add_argument("--dense", action="store_true", help="time one dense page of N runs instead")
    parser.add_argument("--runs", default="1000,2000,4000,8000,16000,100000", help="N, for --dense")
    args = parser.parse_args()
    if args.dense:
        sys.path.insert(0, str(REPO / "tests"))  # tests/support/pdfgen.py writes the pages
        run_dense([int(n) for n in args.runs.split(",")], args.repeats)
        return
    if not DATA.is_dir():
        sys.exit(f"bench: {DATA} is missing (the shared data sits beside the repository)")
    from run import machine  # bench/run.py: CPU, cores, versions

    from heatc.pdf import extract
    from heatc.pdf.compare import fold, levenshtein

    extractors = available()
    files = sorted(DATA.glob("*/pdf/*"))
    print(f"PDF text extraction — {machine()}")
    print(f"command: python bench/extract.py --repeats {args.repeats}\n")
    print("| file | pages | extractor | pages per CPU s | pages without text | CER vs reference |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    texts: dict[tuple[str, str], list[str]] = {}
    for path in files:
        seconds: dict[str, list[float]] = {name: [] for name in extractors}
        for round_ in range(args.repeats):
            for name, fn in extractors.items():
                if name in SLOW and round_:
                    continue
                t = time.process_time()
                texts[path.name, name] = fn(path)
                seconds[name].append(time.process_time() - t)
        ref = reference(path)
        for name in extractors:
            pages = texts[path.name, name]
            rate = len(pages) / statistics.median(seconds[name])
            empty = sum(1 for p in pages if not p.strip())
            cer = ""
            if ref is not None:
                hyp, gold = fold("\n".join(pages)), fold(ref)
                cer = f"{100 * levenshtein(hyp, gold) / len(gold):.3f} %"
            print(f"| {path.name[:48]} | {len(pages)} | {name} | {rate:.1f} | {empty} | {cer} |")

    print("\nChecks")
    zh = next((p for p in files if p.name.startswith("zh_")), None)
    if zh is not None:
        for name in extractors:
            text = "\n".join(texts[zh.name, name])
            doubled = sum(text.count(bad) for bad in HEADINGS.values()) + len(_ARTICLE_TWICE.findall(text))
            missing = sum(1 for good in HEADINGS if good not in text)
            print(
                f"- Chinese regulation, {name}: {len(_RADICAL.findall(text))} radical code points, "
                f"{doubled} doubled headings, {missing} of {len(HEADINGS)} headings missing"
            )
    tenk = next((p for p in files if p.name.startswith("uber_")), None)
    if tenk is not None:
        for name in extractors:
            text = "\n".join(texts[tenk.name, name]).replace("\r\n", "\n")  # PDFium's own line ends
            rows = len(_ROW.findall(text))
            print(f"- 10-K, {name}: {rows} lines with a label and two numbers")
    workers = os.cpu_count() or 1
    t = time.perf_counter()
    docs = extract(files, workers=workers)
    elapsed = time.perf_counter() - t  # wall time: the work is in other processes
    pages = sum(len(d.pages) for d in docs)
    print(
        f"- heatc, all {len(files)} files in {workers} worker processes: {pages} pages in {elapsed:.1f} s wall "
        f"({pages / elapsed:.1f} pages/s; {os.getloadavg()[0]:.1f} load average), {sum(len(d.scanned) for d in docs)} scanned, "
        f"{sum(len(d.failed) for d in docs)} failed"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
