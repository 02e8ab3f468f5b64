"""`heatc extract`: the text of PDF files.

Public surface: the command, registered on `heatc.cli.common.app`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from heatc.cli.common import app, fail
from heatc.errors import HeatError


@app.command()
def extract(
    files: Annotated[list[Path], typer.Argument(help="PDF files.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per page: file, sha256, page, text, scanned, error.")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here instead of standard output (all or nothing).")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=1, help="Processes reading pages (default: one per CPU for long inputs)."),
    ] = None,
) -> None:
    """Print the text of PDF files page by page, a header line before each page.

    Scanned pages (an image and no text) and pages that fail are reported, and the rest is
    kept; a file that cannot be opened stops everything before anything is written.
    Exit status: 0, or 1 on an input error.
    """
    try:
        import pypdfium2  # noqa: F401

        from heatc.pdf import extract as run_extract
    except ModuleNotFoundError as missing:
        raise fail(f"heatc extract needs {missing.name!r}: pip install 'heatc[pdf]'") from None
    try:
        documents = run_extract(files, workers=workers)
    except HeatError as e:
        raise fail(e.render()) from None
    chunks = []
    for doc in documents:
        for page in doc.pages:
            if as_json:
                chunks.append(json.dumps(page.to_json(), ensure_ascii=False) + "\n")
                continue
            state = " (scanned: no text layer)" if page.scanned else f" (failed: {page.error})" if page.error else ""
            header = f"==> {doc.file} page {page.page} of {doc.page_count}{state} <==\n"
            chunks.append(("\n" if chunks else "") + header + (page.text + "\n" if page.text else ""))
    text = "".join(chunks)
    if output is None:
        sys.stdout.write(text)
    else:
        _write_whole(output, text)
    pages = sum(len(d.pages) for d in documents)
    scanned = sum(len(d.scanned) for d in documents)
    failed = [(d.file, p) for d in documents for p in d.pages if p.error]
    for file, page in failed:
        sys.stderr.write(f"{file}: page {page.page}: {page.error}\n")
    n = len(documents)
    sys.stderr.write(
        f"heatc extract: {n} file{'s' * (n != 1)}, {pages} pages, {scanned} scanned, {len(failed)} failed\n"
    )


def _write_whole(path: Path, text: str) -> None:
    """Write through a temporary file beside `path`, renamed over it: a reader never sees half."""
    import os
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise fail(f"{path}: error: cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise fail(f"{path}: error: cannot write: {e.strerror or e}") from None
