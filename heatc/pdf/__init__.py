"""PDF text with pypdfium2: one record per page (file, sha256, page number, text, scanned,
error), the text normalised (newlines, NFKC, CJK radicals, line-end hyphens), fake-bold
copies dropped, multi-column pages put in reading order. docs/pdf.md describes what it does
and does not do.

    from heatc.pdf import extract
    for doc in extract(["a.pdf", "b.pdf"]):
        for page in doc.pages: ...

Needs pypdfium2 (pip install 'heatc[pdf]'); importing this package does not load it.

Public surface: extract, extract_file, Document, Page, RECORD_FIELDS, character_error_rate.
"""

from heatc.pdf.compare import character_error_rate
from heatc.pdf.documents import extract, extract_file
from heatc.pdf.records import RECORD_FIELDS, Document, Page

__all__ = ["RECORD_FIELDS", "Document", "Page", "character_error_rate", "extract", "extract_file"]
