"""Whole files: open and check each one (a file PDFium cannot open is an error about that
file, raised before any page is read), hash it, read its pages — in worker processes when
there are enough of them, since PDFium is not thread-safe — and resolve line-end hyphens
over the whole document. Output is in the order of the files given and of their pages,
whatever the number of workers.

Public surface: extract, extract_file, open_error.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.pdf.normalise import resolve_hyphens
from heatc.pdf.records import Document, Page
from heatc_runtime.backends.files import UnreadableFile, read_file

# Pages a worker reads per task, and the fewest pages worth starting workers for (a spawned
# worker costs about half a second to start).
_CHUNK = 16
_MIN_PARALLEL_PAGES = 48
MAX_PDF_BYTES = 1 << 31  # a file is read whole to hash and open it

# FPDF_GetLastError codes, as PdfiumError.err_code carries them.
_OPEN_ERRORS = {
    2: "cannot be opened by PDFium (file access error)",
    3: "not a PDF, or damaged beyond repair",
    4: "encrypted: needs a password",
    5: "encrypted with a security handler PDFium does not support",
}


def open_error(err_code: int | None, detail: str) -> str:
    """The message for a file PDFium refused, from its error code."""
    return _OPEN_ERRORS.get(err_code, f"cannot be opened (PDFium: {detail})")


def _inspect(path: Path) -> tuple[str, int] | Diagnostic:
    """(sha256, page count), or what is wrong with the file."""
    import pypdfium2 as pdfium

    try:  # (a regular file of a bounded size, checked before reading: a FIFO or /dev/zero is refused)
        data = read_file(path, MAX_PDF_BYTES)
    except UnreadableFile as e:
        return Diagnostic(str(path), 0, 0, f"cannot read: {e}")
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        return Diagnostic(str(path), 0, 0, open_error(e.err_code, str(e)))
    try:
        return hashlib.sha256(data).hexdigest(), len(pdf)
    finally:
        pdf.close()


def _read(path: str, indices: Sequence[int]) -> list:
    """Read pages `indices` (0-based) of one file; runs in a worker process or in this one."""
    import pypdfium2 as pdfium

    from heatc.pdf.pages import read_page

    pdf = pdfium.PdfDocument(path)
    try:
        return [read_page(pdf, i) for i in indices]
    finally:
        pdf.close()


def extract(
    paths: Sequence[str | Path], *, pages: Sequence[int] | None = None, workers: int | None = None
) -> list[Document]:
    """One Document per path, in order. `pages`: 1-based page numbers to read from every
    file (default: all). `workers`: processes to read pages in (default: one per CPU when
    there are enough pages; 1 reads everything in this process).

    Raises HeatError naming every file that cannot be read, before reading any page."""
    found, problems = [], []
    for p in map(Path, paths):
        r = _inspect(p)
        (problems.append(r) if isinstance(r, Diagnostic) else found.append((p, *r)))
    plans = []
    for path, digest, count in found:
        wanted = list(range(1, count + 1)) if pages is None else sorted(set(pages))
        outside = [n for n in wanted if not 1 <= n <= count]
        if outside:
            problems.append(Diagnostic(str(path), 0, 0, f"has {count} pages; asked for page {outside[0]}"))
        plans.append((path, digest, count, wanted))
    if problems:
        raise HeatError(problems)

    tasks = [
        (str(path), [n - 1 for n in wanted[i : i + _CHUNK]])
        for path, _, _, wanted in plans
        for i in range(0, len(wanted), _CHUNK)
    ]
    total = sum(len(w) for *_, w in plans)
    if workers is None:
        workers = min(os.cpu_count() or 1, len(tasks)) if total >= _MIN_PARALLEL_PAGES else 1
    if workers <= 1:
        results = [_read(path, indices) for path, indices in tasks]
    else:
        # spawn, not fork: a forked child would share the parent's PDFium state.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_read, *zip(*tasks, strict=True)))
    read = iter(page for chunk in results for page in chunk)

    documents = []
    for path, digest, count, wanted in plans:
        texts = [next(read) for _ in wanted]
        resolved = resolve_hyphens([t.text for t in texts])
        records = tuple(
            Page(str(path), digest, n, text, t.scanned, t.error)
            for n, t, text in zip(wanted, texts, resolved, strict=True)
        )
        documents.append(Document(str(path), digest, count, records))
    return documents


def extract_file(path: str | Path, *, pages: Sequence[int] | None = None) -> Document:
    """One file, read in this process."""
    return extract([path], pages=pages, workers=1)[0]
