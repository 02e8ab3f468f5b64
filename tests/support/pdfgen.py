"""Small PDFs written byte by byte for the extraction tests: text at given positions in
Helvetica, image-only pages, a page whose dictionary is broken, and the standard security
handler (RC4, revision 2) with a user or an owner password. Nothing here reads the shared
data; every string a test checks is written here.

Public surface: TextRun, Image, BrokenPage, Page, write_pdf, PAGE_SIZE.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from pathlib import Path

PAGE_SIZE = (612, 792)  # US letter, in points
_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")  # PDF 32000-1, 7.6.3.3


@dataclass(frozen=True)
class TextRun:
    """`text` drawn with its baseline starting at (x, y), `size` points of Helvetica."""

    x: float
    y: float
    text: str
    size: float = 10


@dataclass(frozen=True)
class Image:
    """A 2x2 grey image scaled to w x h points at (x, y) — a stand-in for a scanned page."""

    x: float = 50
    y: float = 50
    w: float = 500
    h: float = 700


@dataclass(frozen=True)
class BrokenPage:
    """A page-tree kid that is a number, not a page dictionary: PDFium counts the page, keeps
    the pages after it in place, and fails to load this one."""


@dataclass
class Page:
    runs: list[TextRun] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)


def _escape(text: str) -> bytes:
    raw = text.encode("cp1252")  # Helvetica's WinAnsiEncoding
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def _content(page: Page) -> bytes:
    ops = []
    for i, im in enumerate(page.images):
        ops.append(f"q {im.w} 0 0 {im.h} {im.x} {im.y} cm /Im{i} Do Q".encode())
    for run in page.runs:
        ops.append(f"BT /F1 {run.size} Tf {run.x} {run.y} Td (".encode() + _escape(run.text) + b") Tj ET")
    return b"\n".join(ops)


def _rc4(key: bytes, data: bytes) -> bytes:
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def _padded(password: str) -> bytes:
    return (password.encode("latin-1") + _PAD)[:32]


class _Security:
    """The standard security handler, revision 2 (40-bit RC4): algorithms 2, 3 and 4 of PDF 32000-1."""

    def __init__(self, user: str, owner: str, file_id: bytes, permissions: int = -44):
        owner_key = hashlib.md5(_padded(owner or user)).digest()[:5]
        self.o = _rc4(owner_key, _padded(user))
        self.p = permissions
        self.key = hashlib.md5(_padded(user) + self.o + struct.pack("<i", permissions) + file_id).digest()[:5]
        self.u = _rc4(self.key, _PAD)

    def encrypt(self, number: int, data: bytes) -> bytes:
        object_key = hashlib.md5(self.key + struct.pack("<i", number)[:3] + b"\0\0").digest()[:10]
        return _rc4(object_key, data)

    def dictionary(self) -> bytes:
        return f"<< /Filter /Standard /V 1 /R 2 /O <{self.o.hex()}> /U <{self.u.hex()}> /P {self.p} >>".encode()


def write_pdf(
    path: Path, pages: list[Page | BrokenPage], *, user_password: str | None = None, owner_password: str | None = None
) -> Path:
    """Write `pages` as a PDF at `path`; with a password, encrypted (an owner password alone:
    anyone may open it, as with most 'protected' PDFs)."""
    objects: dict[int, bytes] = {}
    kids = []
    number = 3
    file_id = hashlib.md5(str(path.name).encode()).digest()
    security = (
        _Security(user_password or "", owner_password or "", file_id) if (user_password or owner_password) else None
    )

    def stream(num: int, header: str, data: bytes) -> bytes:
        if security is not None:
            data = security.encrypt(num, data)
        return f"<< {header} /Length {len(data)} >>\nstream\n".encode() + data + b"\nendstream"

    for page in pages:
        page_num = number
        kids.append(f"{page_num} 0 R")
        if isinstance(page, BrokenPage):
            objects[page_num] = b"42"
            number += 1
            continue
        contents = page_num + 1
        xobjects = []
        number += 2
        for i, _ in enumerate(page.images):
            objects[number] = stream(
                number,
                "/Type /XObject /Subtype /Image /Width 2 /Height 2 /ColorSpace /DeviceGray /BitsPerComponent 8",
                b"\x00\xff\xff\x00",
            )
            xobjects.append(f"/Im{i} {number} 0 R")
            number += 1
        resources = "/Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >> >>"
        if xobjects:
            resources += " /XObject << " + " ".join(xobjects) + " >>"
        objects[page_num] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_SIZE[0]} {PAGE_SIZE[1]}] "
            f"/Resources << {resources} >> /Contents {contents} 0 R >>"
        ).encode()
        objects[contents] = stream(contents, "", _content(page))
    objects[1] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[2] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(pages)} >>".encode()
    encrypt_ref = ""
    if security is not None:
        objects[number] = security.dictionary()
        encrypt_ref = f" /Encrypt {number} 0 R"
        number += 1

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for num in sorted(objects):
        offsets[num] = len(out)
        out += f"{num} 0 obj\n".encode() + objects[num] + b"\nendobj\n"
    xref = len(out)
    size = max(objects) + 1
    out += f"xref\n0 {size}\n0000000000 65535 f \n".encode()
    for num in range(1, size):
        out += f"{offsets[num]:010d} 00000 n \n".encode() if num in offsets else b"0000000000 65535 f \n"
    out += (
        f"trailer\n<< /Size {size} /Root 1 0 R{encrypt_ref} /ID [<{file_id.hex()}> <{file_id.hex()}>] >>\n"
        f"startxref\n{xref}\n%%EOF\n"
    ).encode()
    path.write_bytes(bytes(out))
    return path
