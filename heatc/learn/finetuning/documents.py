"""The domain corpus `heatc finetune` reads: a document per PDF page with text (`heatc.pdf`;
scanned and failed pages skipped and counted), so values cross-validate over pages, then the
text files' documents, read as `heatc learn` reads a corpus; and what the heatmap's provenance
records of each file.

Public surface: `domain_documents`, `file_sha256`, `corpus_sha256`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.learn.config import FinetuneConfig
from heatc.learn.text.corpus import Document, read_corpus
from heatc_runtime.backends.files import UnreadableFile, read_file


def file_sha256(path: Path) -> str:
    try:  # (a regular file of a bounded size: a FIFO hung here, /dev/zero filled memory)
        return hashlib.sha256(read_file(path, 1 << 31)).hexdigest()
    except UnreadableFile as e:
        raise HeatError(Diagnostic(str(path), 0, 0, f"cannot read: {e}")) from None


def corpus_sha256(documents: list[Document]) -> str:
    """The documents' ids and texts, as the work folder's fingerprint counts them."""
    return hashlib.sha256(b"".join(d.id.encode() + b"\0" + d.text.encode() + b"\0" for d in documents)).hexdigest()


def domain_documents(config: FinetuneConfig) -> tuple[list[Document], list[dict]]:
    """The domain corpus: a document per PDF page with text, then the text files' documents;
    and a provenance entry per PDF (sha256, pages used, scanned pages skipped, failed pages)."""
    documents: list[Document] = []
    sources: list[dict] = []
    if config.pdfs:
        try:
            from heatc.pdf import extract
        except ModuleNotFoundError as missing:
            raise HeatError(
                Diagnostic("--pdf", 0, 0, f"reading PDFs needs {missing.name!r}: pip install 'heatc[pdf]'")
            ) from None
        for doc in extract([str(p) for p in config.pdfs]):
            wanted = None if config.pages is None else set(config.pages.get(doc.file, ()))
            pages = [p for p in doc.pages if wanted is None or p.page in wanted]
            used = [p.page for p in pages if p.text.strip()]
            documents.extend(Document(f"{Path(doc.file).name}#{p.page}", p.text) for p in pages if p.text.strip())
            sources.append({
                "file": Path(doc.file).name, "sha256": doc.sha256, "pages": doc.page_count, "pages_used": _spans(used),
                "scanned_skipped": len([p for p in pages if p.scanned]), "failed": [p.page for p in pages if p.error],
            })  # fmt: skip
    if config.texts:
        documents.extend(read_corpus(config.texts))
        sources.extend({"file": Path(t).name, "sha256": file_sha256(t)} for t in config.texts if Path(t).is_file())
    if not documents:
        pages = sum(s.get("pages", 0) for s in sources)
        scanned = sum(s.get("scanned_skipped", 0) for s in sources)
        what = "no PDF or text file given" if not (config.pdfs or config.texts) else (
            f"no text in {pages} PDF page{'s' * (pages != 1)} ({scanned} scanned: no text layer; heatc does no OCR)"
            if config.pdfs and not config.texts else "the documents hold no text"
        )  # fmt: skip
        raise HeatError(Diagnostic(str(config.output), 0, 0, f"nothing to fine-tune on: {what}"))
    return documents, sources


def _spans(pages: list[int]) -> str:
    """1, 2, 3, 5, 7, 8 → "1-3,5,7-8"."""
    out: list[str] = []
    for p in pages:
        if out and out[-1].split("-")[-1] == str(p - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{p}"
        else:
            out.append(str(p))
    return ",".join(out)
