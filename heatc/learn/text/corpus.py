"""Corpora: read documents from files and directories, split them into sentences.

Reads .txt/.md, .jsonl and .json (every long string value, so MTSamples transcriptions and
TAT-QA paragraphs both work), the same compressed with .gz, and .tar.gz archives of text
files (CUAD). Every document keeps its id, so consistency within a document can be learned.

Public surface: `Document`, `read_corpus(paths, exclude)`, `sentences(text)`, `copy_groups`, `SPLIT_VERSION`.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import json
import re
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc_runtime.backends.files import UnreadableFile, read_file

TEXT_SUFFIXES = (".txt", ".md", ".text")
MAX_FILE_BYTES = 1 << 31  # a corpus file, an archive's member, a decompressed .gz: each is read whole
MIN_STRING = 40  # characters: shorter JSON strings are names, labels, keys


@dataclass(frozen=True)
class Document:
    id: str
    text: str


def _json_strings(value) -> Iterator[str]:
    if isinstance(value, str):
        if len(value) >= MIN_STRING:
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _json_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_strings(v)


def _read(path: Path) -> bytes:
    """A corpus file's bytes: a regular file of a bounded size, checked before a byte is read
    (a FIFO given as a file hung the reader, /dev/zero filled memory)."""
    try:
        return read_file(path, MAX_FILE_BYTES)
    except UnreadableFile as e:
        raise HeatError(Diagnostic(str(path), 0, 0, f"cannot read: {e}")) from None


def _bounded(stream, where: str) -> bytes:
    """All of a decompressing stream, refused past MAX_FILE_BYTES (a small .gz can hold gigabytes)."""
    data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise HeatError(Diagnostic(where, 0, 0, f"more than {MAX_FILE_BYTES:,} bytes once decompressed"))
    return data


def _open_text(path: Path) -> str:
    data = _read(path)
    if path.suffix == ".gz":
        data = _bounded(gzip.GzipFile(fileobj=io.BytesIO(data)), str(path))
    return data.decode("utf-8", errors="replace")


def _documents_in_file(path: Path) -> Iterator[Document]:
    try:
        yield from _documents(path)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:  # (a damaged archive or .gz)
        raise HeatError(Diagnostic(str(path), 0, 0, f"not a readable archive or .gz file: {e}")) from None


def _documents(path: Path) -> Iterator[Document]:
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(fileobj=io.BytesIO(_read(path))) as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                if member.isfile() and member.name.lower().endswith(TEXT_SUFFIXES):
                    data = _bounded(tar.extractfile(member), f"{path}:{member.name}").decode("utf-8", errors="replace")
                    yield Document(f"{path.name}:{member.name}", data)
        return
    base = name[:-3] if name.endswith(".gz") else name
    if not base.endswith((".jsonl", ".json", *TEXT_SUFFIXES)):
        return  # (a file of another kind is not read at all)
    base = name[:-3] if name.endswith(".gz") else name
    text = _open_text(path)
    if base.endswith(".jsonl"):
        for i, line in enumerate(text.splitlines()):
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise HeatError(Diagnostic(str(path), i + 1, e.colno, f"not valid JSON lines: {e.msg}")) from None
                body = "\n".join(_json_strings(record))
                if body:
                    yield Document(f"{path.name}:{i + 1}", body)
    elif base.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise HeatError(Diagnostic(str(path), e.lineno, e.colno, f"not valid JSON: {e.msg}")) from None
        items = data if isinstance(data, list) else [data]
        for i, item in enumerate(items):
            body = "\n".join(_json_strings(item))
            if body:
                yield Document(f"{path.name}:{i}", body)
    elif base.endswith(TEXT_SUFFIXES):
        yield Document(path.name, text)


def read_corpus(paths: list[str | Path], exclude: list[str] | tuple[str, ...] = ()) -> list[Document]:
    """All documents under the given files and directories, in a stable order, duplicates dropped,
    and those whose id (`file`, `archive:member`, `file:index`) matches a glob of `exclude`
    left out — a pattern that leaves out nothing is an error: a typo there would silently
    keep documents that were meant to be held out."""
    docs: list[Document] = []
    seen: set[str] = set()
    unused = dict.fromkeys(exclude, True)
    for p in map(Path, paths):
        if not p.exists():
            raise HeatError(Diagnostic(str(p), 0, 0, "no such file or directory"))
        files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
        for f in files:
            for d in _documents_in_file(f):
                matched = [x for x in exclude if fnmatch.fnmatchcase(d.id, x)]
                if matched:
                    unused.update(dict.fromkeys(matched, False))
                    continue
                digest = hashlib.sha1(d.text.encode()).hexdigest()
                if digest not in seen:
                    seen.add(digest)
                    docs.append(d)
    if any(unused.values()):
        pattern = next(x for x, left in unused.items() if left)
        raise HeatError(Diagnostic(pattern, 0, 0, "--exclude matches no document of the corpus (ids look like "
                                   "'archive.tar.gz:folder/name.txt' or 'file.jsonl:3')"))  # fmt: skip
    if not docs:
        raise HeatError(
            Diagnostic(
                ", ".join(map(str, paths)),
                0,
                0,
                "the corpus holds no readable text (.txt, .md, .json, .jsonl, .tar.gz)",
            )
        )
    return docs


SPLIT_VERSION = 2  # how `sentences` splits (2: list items too); a work folder of another is redone
# Where a sentence ends: a sentence end before a capital, a digit or a quote; a blank line;
# a heading ("PLAN:"); a line that starts with a bullet (a list item has no sentence end, and
# a bulleted list would otherwise run on past the longest sentence and be dropped); a line
# that ends with a cited section, "(2.3)", before a capital (a drug label's highlights list
# one statement a line, each citing the section it summarises).
_SPLIT = re.compile(
    r"(?<=[.!?;。！？；])\s+(?=[A-Z0-9\u4e00-\u9fff(\"'])|\n\s*\n|\n(?=[A-Z][A-Z /]+:)|,\s*(?=[A-Z][A-Z /&-]{2,}:)"
    r"|\s*\n\s*(?=[•●▪◦■]\s)|(?<=\d\))[ \t]*\n(?=[A-Z])"
)
_SPACE = re.compile(r"\s+")


def sentences(text: str, min_chars: int = 12, max_chars: int = 400) -> list[str]:
    """Sentences of a document: split at sentence ends, blank lines, section headings and list
    items (`_SPLIT`), whitespace collapsed; fragments too short or too long to be sentences are dropped."""
    out = []
    for part in _SPLIT.split(text):
        s = _SPACE.sub(" ", part).strip(" ,")
        if min_chars <= len(s) <= max_chars:
            out.append(s)
    return out


COPY_SHARE = 0.9  # of a document's sentences, found in an earlier one, make it a copy of it (or all but one)
COPY_SENTENCE = 40  # characters: shorter sentences ("Vital signs stable.") recur in documents that are no copies


def copy_groups(texts: list[str]) -> list[int]:
    """Per document, the first document it is a copy of — itself if none: of its sentences of
    `COPY_SENTENCE` characters or more, `COPY_SHARE` or all but one, and two at least, are found
    in one earlier document. MTSamples files one transcription under several specialties, its
    keyword line (run into the last sentence) apart; a copy in another cross-validation fold
    would vouch for its own values as if unseen, so copies share a fold (`ranges`)."""
    found_in: dict[str, set[int]] = {}  # sentence -> the groups of the documents it was found in
    out: list[int] = []
    for d, text in enumerate(texts):
        own = {s for s in sentences(text) if len(s) >= COPY_SENTENCE}
        owners: dict[int, int] = {}
        for s in own:
            for g in found_in.get(s, ()):
                owners[g] = owners.get(g, 0) + 1
        best = max(owners.items(), key=lambda x: (x[1], -x[0]), default=(d, 0))
        copy = best[1] >= max(2, min(COPY_SHARE * len(own), len(own) - 1))
        out.append(best[0] if copy else d)
        for s in own:
            found_in.setdefault(s, set()).add(out[-1])
    return out
