"""What extraction returns: one record per page, and a document holding a file's pages.
The JSON form of a page (`heatc extract --json`, one object a line) is `Page.to_json`.

Public surface: Page, Document, RECORD_FIELDS.
"""

from __future__ import annotations

from dataclasses import dataclass

# The keys of a page's JSON record, in order.
RECORD_FIELDS = ("file", "sha256", "page", "text", "scanned", "error")


@dataclass(frozen=True)
class Page:
    file: str  # the path as given
    sha256: str  # of the whole file
    page: int  # 1-based, the PDF's own page order; a failed page keeps its number
    text: str  # "" when scanned or failed
    scanned: bool  # no characters, and an image: a scan without a text layer
    error: str | None  # why this page could not be read, or None

    def to_json(self) -> dict:
        return {name: getattr(self, name) for name in RECORD_FIELDS}


@dataclass(frozen=True)
class Document:
    file: str
    sha256: str
    page_count: int  # every page in the file, also those not extracted
    pages: tuple[Page, ...]  # the pages extracted, in page order

    @property
    def scanned(self) -> list[int]:
        return [p.page for p in self.pages if p.scanned]

    @property
    def failed(self) -> list[int]:
        return [p.page for p in self.pages if p.error is not None]

    @property
    def text(self) -> str:
        """The pages' text, a blank line between pages."""
        return "\n\n".join(p.text for p in self.pages if p.text)
