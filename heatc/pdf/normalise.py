"""The text fixes applied to every extracted page: one newline convention, no control
characters, Unicode NFKC (ligatures, full-width digits and letters, Kangxi radicals, no-break
spaces) except superscripts and subscripts (NFKC turns "10⁹/L" into "109/L"), CJK Radicals
Supplement characters mapped to the ideographs they stand for (NFKC leaves U+2E80–U+2EFF
alone), and line-end hyphens resolved against the whole document's words.

PDFium marks a hyphen at the end of a line as U+0002 and drops the line break after it.
Extraction keeps that mark (HYPHEN) where the next line of the same paragraph carries on the
word; `resolve_hyphens` then reads it as a hyphen ("non-payment", "FAA-approved": in the
PDFs we measured, nearly every line-end hyphen belongs to the word) unless the document
spells the joined word more often than the hyphenated one, when it was a break ("treat-
ment" where "treatment" occurs).

Public surface: HYPHEN, RADICALS, KEEP_TAGS, KEEP_BLOCKS, fold_radicals, nfkc, clean, resolve_hyphens.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter

HYPHEN = "\x02"

# CJK Radicals Supplement → the equivalent unified ideograph, from the Unicode Character
# Database's EquivalentUnifiedIdeograph.txt (Unicode 17.0), less the two NFKC already folds
# (U+2E9F, U+2EF3). Radicals with no equivalent ideograph (U+2E80, U+2E9A is unassigned)
# are kept.
_RADICAL_PAIRS = (
    "2E81:5382 2E82:4E5B 2E83:4E5A 2E84:4E59 2E85:4EBB 2E86:5182 2E87:20628 2E88:5200 2E89:5202 2E8A:535C "
    "2E8B:353E 2E8C:5C0F 2E8D:5C0F 2E8E:5140 2E8F:5C23 2E90:5C22 2E91:21BC2 2E92:5DF3 2E93:5E7A 2E94:5F51 "
    "2E95:2B739 2E96:5FC4 2E97:5FC3 2E98:624C 2E99:6535 2E9B:65E1 2E9C:65E5 2E9D:6708 2E9E:6B7A 2EA0:6C11 "
    "2EA1:6C35 2EA2:6C3A 2EA3:706C 2EA4:722B 2EA5:722B 2EA6:4E2C 2EA7:725B 2EA8:72AD 2EA9:738B 2EAA:24D14 "
    "2EAB:76EE 2EAC:793A 2EAD:793B 2EAE:25AD7 2EAF:7CF9 2EB0:7E9F 2EB1:7F53 2EB2:7F52 2EB3:34C1 2EB4:5197 "
    "2EB5:2626B 2EB6:7F8A 2EB7:2634C 2EB8:2634B 2EB9:8002 2EBA:8080 2EBB:807F 2EBC:8089 2EBD:26951 2EBE:8279 "
    "2EBF:8279 2EC0:8279 2EC1:864E 2EC2:8864 2EC3:8980 2EC4:897F 2EC5:89C1 2EC6:89D2 2EC7:278B2 2EC8:8BA0 "
    "2EC9:8D1D 2ECA:27FB7 2ECB:8F66 2ECC:8FB6 2ECD:8FB6 2ECE:8FB6 2ECF:9091 2ED0:9485 2ED1:9577 2ED2:9578 "
    "2ED3:957F 2ED4:95E8 2ED5:28E0F 2ED6:961D 2ED7:96E8 2ED8:9752 2ED9:97E6 2EDA:9875 2EDB:98CE 2EDC:98DE "
    "2EDD:98DF 2EDE:2967F 2EDF:98E0 2EE0:9963 2EE1:29810 2EE2:9A6C 2EE3:9AA8 2EE4:9B3C 2EE5:9C7C 2EE6:9E1F "
    "2EE7:5364 2EE8:9EA6 2EE9:9EC4 2EEA:9EFE 2EEB:6589 2EEC:9F50 2EED:6B6F 2EEE:9F7F 2EEF:7ADC 2EF0:9F99 "
    "2EF1:9F9C 2EF2:4E80"
)
RADICALS: dict[int, str] = {
    int(src, 16): chr(int(dst, 16)) for src, dst in (pair.split(":") for pair in _RADICAL_PAIRS.split())
}

# Compatibility decompositions NFKC would apply but that change what the text says. They
# live in these 256-code-point blocks (a test checks the whole of Unicode against them).
KEEP_TAGS = ("<super>", "<sub>")
KEEP_BLOCKS = (0x00, 0x02, 0x10, 0x1D, 0x20, 0x21, 0x2C, 0x2D, 0x31, 0xA6, 0xA7, 0xAB, 0x107, 0x1F1)


@functools.cache
def _kept() -> re.Pattern[str]:
    chars = (chr(c) for block in KEEP_BLOCKS for c in range(block << 8, (block + 1) << 8))
    return re.compile(
        "[" + "".join(re.escape(c) for c in chars if unicodedata.decomposition(c).startswith(KEEP_TAGS)) + "]"
    )


_SUPPLEMENT = re.compile("[\u2e80-\u2eff]")
_CONTROLS = re.compile(r"[\x00-\x01\x03-\x08\x0b-\x1f\x7f]")
_WORD_BEFORE = re.compile(r"[\w-]+$")
_WORD_AFTER = re.compile(r"^\w+")
_WORDS = re.compile(r"\w+(?:-\w+)*")


def fold_radicals(text: str) -> str:
    """Map CJK Radicals Supplement characters to their ideographs (Kangxi radicals: see nfkc)."""
    return text.translate(RADICALS) if _SUPPLEMENT.search(text) else text


def nfkc(text: str) -> str:
    """NFKC, but superscripts and subscripts stay, then fold_radicals. NFKC also folds the
    Kangxi radicals (U+2F00–U+2FD5) to their ideographs."""
    if text.isascii():
        return text
    if unicodedata.is_normalized("NFKC", text):  # nothing to fold, no superscript to keep
        return fold_radicals(text)
    kept = _kept()
    if kept.search(text) is None:
        out = unicodedata.normalize("NFKC", text)
    else:
        pieces, pos = [], 0
        for m in kept.finditer(text):
            pieces.append(unicodedata.normalize("NFKC", text[pos : m.start()]))
            pieces.append(m.group())
            pos = m.end()
        pieces.append(unicodedata.normalize("NFKC", text[pos:]))
        out = "".join(pieces)
    return fold_radicals(out)


def clean(text: str) -> str:
    """One page's text: "\\n" line ends, no trailing spaces, no control characters except
    tabs, newlines and HYPHEN marks, then nfkc."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROLS.sub("", text)
    text = nfkc(text)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


def resolve_hyphens(pages: list[str]) -> list[str]:
    """Replace each HYPHEN mark in one document's pages by "-" or, where the document uses
    the joined word more often than the hyphenated one, by nothing."""
    if not any(HYPHEN in p for p in pages):
        return pages
    # The marked words themselves are not evidence: count the document's words with each
    # mark read as a break.
    counts = Counter(w.lower() for p in pages for w in _WORDS.findall(p.replace(HYPHEN, " ")))

    def choose(text: str, at: int) -> str:
        before = _WORD_BEFORE.search(text, 0, at)
        after = _WORD_AFTER.search(text[at + 1 :])
        if before is None or after is None:
            return "-"
        left, right = before.group(), after.group()
        joined, hyphenated = (left + right).lower(), f"{left}-{right}".lower()
        return "" if counts[joined] > counts[hyphenated] else "-"

    out = []
    for text in pages:
        pieces, pos = [], 0
        for m in re.finditer(HYPHEN, text):
            pieces.append(text[pos : m.start()])
            pieces.append(choose(text, m.start()))
            pos = m.end()
        pieces.append(text[pos:])
        out.append("".join(pieces))
    return out
