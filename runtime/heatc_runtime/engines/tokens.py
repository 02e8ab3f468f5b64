"""Token tables: for each token id of a tokenizer, the bytes that token adds to the text.

Built from a Hugging Face `tokenizer.json` (or `vocab.txt`) without running the tokenizer —
at build time from a file (`heatc build`, `tokenizer: {file: …}`), or at load time from the
tokenizer object an engine holds (`table_for_tokenizer`, cached by the tokenizer's hash):

- **WordPiece** (BERT, MiniLM): `##piece` continues a word (its bytes are `piece`); any other
  token starts a word and is preceded by a space — except punctuation and digits, which
  attach, so "4.9" and "1,234" still read as numbers (a number right after a word is still a
  separate lexeme). WordPiece does not record whether the original text had a space before
  a word, so "mg/dL" comes back as "mg/ dl", as from the tokenizer's own decoder; uncased
  vocabularies give lower-case text.
- **Byte-level BPE** (GPT-2, Llama-3, SmolLM, Qwen): each character of a token stands for
  one byte through the GPT-2 byte-to-unicode map; the table undoes the map, so it is lossless.
- **SentencePiece style** (Llama-2, Mistral: Metaspace `▁` for spaces, `<0xAB>` byte-fallback
  tokens): `▁` becomes a space and byte tokens their byte. The tokenizer's decoder drops the
  space of the first word; the table keeps it (whitespace changes no verdict, but event spans
  count it).

Special tokens ([CLS], <s>, <|endoftext|>, <|im_end|>…) add nothing; an unknown-token
placeholder ([UNK], <unk>) adds U+FFFD, so it reads as one character of unknown text. Added
tokens that are not special add their text as written (an added token's id may be a vocab
piece's: the added token is what the tokenizer decodes it to).

Refused with the reason: a tokenizer with no tokens, one whose vocabulary gives one id to two
pieces (or lists a Unigram piece twice, or a Unigram entry that is not a [piece, score] pair),
and one whose ids are mostly unused (a 100-byte file naming id 2^24 - 1 would make a 67 MB
table of empty tokens): at most `MAX_UNUSED_IDS` ids, or a tenth of them, may have no token.

Public surface: `TokenTable`, `TokenizerError`, `table_from_tokenizer_json(path)`,
`table_from_json_bytes(data, source)`, `table_from_vocab_txt(path)`,
`table_for_tokenizer(tokenizer)`, `table_sha256(tokens)`, `cache_dir()`.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..backends.files import UnreadableFile, read_file
from ..backends.tables import read_token_table, token_table_bytes

UNKNOWN = "\ufffd".encode()


class TokenizerError(ValueError):
    """A tokenizer heatc cannot read: the message names it and says why."""


@dataclass
class TokenTable:
    kind: str  # wordpiece | bytelevel | metaspace | bytes
    tokens: list[bytes]
    source: str  # where the tokenizer came from
    source_sha256: str  # of the tokenizer file (or serialised tokenizer) the table was built from
    _sha: str = field(default="", repr=False, compare=False)

    @property
    def sha256(self) -> str:
        """The hash of the table itself (of its tokens.bin): equal tables, equal hashes,
        however the tokenizer was serialised."""
        if not self._sha:
            self._sha = table_sha256(self.tokens)
        return self._sha


def table_sha256(tokens: list[bytes]) -> str:
    """The sha256 of a token table as tokens.bin stores it (what a build records of its tokenizer).

    Parameters
    ----------
    tokens : list of bytes
        Entry i is token id i's bytes.

    Returns
    -------
    str
        The hex digest.
    """
    return hashlib.sha256(token_table_bytes(tokens)).hexdigest()


def cache_dir() -> Path:
    """Where heatc keeps what it derives once (token tables, converted models):
    $HEATC_CACHE, else $XDG_CACHE_HOME/heatc, else ~/.cache/heatc.

    Returns
    -------
    Path
        The folder (not created here).
    """
    if os.environ.get("HEATC_CACHE"):
        return Path(os.environ["HEATC_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "heatc"


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


def _wordpiece(tok: str, prefix: str = "##") -> bytes:
    if tok.startswith(prefix):
        return tok[len(prefix) :].encode("utf-8", "surrogatepass")
    return tok.encode("utf-8", "surrogatepass") if _attaches(tok) else b" " + tok.encode("utf-8", "surrogatepass")


MAX_TOKENIZER_BYTES = 512 << 20  # the largest tokenizer files on the Hub are a few tens of MB
MAX_VOCAB = 1 << 24
MAX_UNUSED_IDS = 1024  # ids without a token a tokenizer may have, beyond a tenth of its ids
_HEX = frozenset("0123456789abcdefABCDEF")


def table_from_json_bytes(data: bytes, source: str) -> TokenTable:
    """The table of a serialised Hugging Face tokenizer (the contents of a tokenizer.json).
    Its fields are checked, not trusted.

    Parameters
    ----------
    data : bytes
        The tokenizer.json's bytes.
    source : str
        Where they came from, for errors.

    Returns
    -------
    TokenTable
        Each token id's bytes, and the tokenizer's kind and name.

    Raises
    ------
    TokenizerError
        A malformed file (naming `source` and what is wrong).
    """
    try:
        spec = json.loads(data)
        model = spec["model"]
        vocab = model["vocab"]
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            pieces = {}
            for i, entry in enumerate(vocab):
                if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
                    raise ValueError(f"Unigram vocab entry {i} is {str(entry)[:40]!r}, not a [piece, score] pair")
                if entry[0] in pieces:
                    raise ValueError(
                        f"the Unigram vocab lists {entry[0][:40]!r} twice (ids {pieces[entry[0]]} and {i})"
                    )
                pieces[entry[0]] = i
        else:
            pieces = dict(vocab)
            if len(set(map(repr, pieces.values()))) != len(pieces):
                holders: dict[str, str] = {}
                for tok, i in pieces.items():
                    if repr(i) in holders:
                        raise ValueError(
                            f"the vocab gives the id {str(i)[:20]} to {holders[repr(i)][:40]!r} and {tok[:40]!r}"
                        )
                    holders[repr(i)] = tok
        added = spec.get("added_tokens") or []
        specials = {t["content"] for t in added if t.get("special")}
        plain_added = {t["id"]: t["content"] for t in added if not t.get("special")}
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
        raise TokenizerError(f"{source}: not a Hugging Face tokenizer.json: {e}") from None
    except RecursionError:
        raise TokenizerError(f"{source}: not a Hugging Face tokenizer.json: nested too deeply") from None
    size = max(pieces.values(), default=-1) + 1
    if size == 0:
        raise TokenizerError(f"{source}: the tokenizer has no tokens")
    unused = size - len(set(pieces.values()))
    if unused > max(MAX_UNUSED_IDS, size // 10):
        raise TokenizerError(
            f"{source}: the tokenizer's ids run to {size - 1:,} but {unused:,} of them have no token (a table of "
            f"{size:,} tokens, mostly empty): not a tokenizer a model is served with"
        )
    by_id: list[str | None] = [None] * size
    for tok, i in pieces.items():
        by_id[i] = tok
    tokens: list[bytes] = []
    if model.get("type") == "WordPiece" or "WordPiece" in decoders:
        kind = "wordpiece"
        for i, tok in enumerate(by_id):
            if tok is None or (tok in specials and tok != unk):
                tokens.append(b"")
            elif tok == unk:
                tokens.append(b" " + UNKNOWN)
            elif i in plain_added:
                tokens.append(tok.encode("utf-8", "surrogatepass"))
            else:
                tokens.append(_wordpiece(tok, prefix))
    elif "ByteLevel" in decoders or '"ByteLevel"' in pre:
        kind = "bytelevel"
        for i, tok in enumerate(by_id):
            if tok is None or tok in specials:
                tokens.append(b"")
            elif i not in plain_added and all(ch in _BYTE_DECODER for ch in tok):
                tokens.append(bytes(_BYTE_DECODER[ch] for ch in tok))
            else:  # an added token: the tokenizer writes its text as it is
                tokens.append(tok.encode("utf-8", "surrogatepass"))
    elif "Metaspace" in decoders or "Metaspace" in pre or "ByteFallback" in decoders or "Replace" in decoders:
        kind = "metaspace"
        for i, tok in enumerate(by_id):
            if tok is None or (tok in specials and tok != unk):
                tokens.append(b"")
            elif tok == unk:
                tokens.append(UNKNOWN)
            elif i in plain_added:
                tokens.append(tok.encode("utf-8", "surrogatepass"))
            elif len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">") and _HEX.issuperset(tok[3:5]):
                tokens.append(bytes([int(tok[3:5], 16)]))
            else:
                tokens.append(tok.replace("\u2581", " ").encode("utf-8", "surrogatepass"))
    else:
        raise TokenizerError(
            f"{source}: unsupported tokenizer: model {model.get('type')!r} with decoder {sorted(map(str, decoders)) or None} "
            "(heatc reads WordPiece, byte-level BPE and SentencePiece-style Metaspace tokenizers)"
        )
    return TokenTable(kind, tokens, source, hashlib.sha256(data).hexdigest())


def _read(path: Path) -> bytes:
    try:
        return read_file(path, MAX_TOKENIZER_BYTES)
    except UnreadableFile as e:
        raise TokenizerError(f"{path}: cannot read the tokenizer: {e}") from None


def table_from_tokenizer_json(path: str | Path) -> TokenTable:
    """The table of a Hugging Face tokenizer.json file.

    Parameters
    ----------
    path : str or Path
        The tokenizer.json file.

    Returns
    -------
    TokenTable
        Each token id's bytes, as the tokenizer decodes it.

    Raises
    ------
    TokenizerError
        The file cannot be read or is malformed.
    """
    return table_from_json_bytes(_read(Path(path)), str(path))


def table_from_vocab_txt(path: str | Path) -> TokenTable:
    """The table of a WordPiece vocab.txt (one token a line; "##" continues a word).

    Parameters
    ----------
    path : str or Path
        The vocab.txt file.

    Returns
    -------
    TokenTable
        Each token id's bytes (a word's first piece with its leading space).

    Raises
    ------
    TokenizerError
        The file cannot be read, is not UTF-8, or holds no tokens.
    """
    path = Path(path)
    data = _read(path)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{path}: vocab.txt is not valid UTF-8 (byte {e.start})") from None
    if not lines:
        raise TokenizerError(f"{path}: vocab.txt holds no tokens")
    tokens = []
    for tok in lines:
        if tok.startswith("[") and tok.endswith("]"):
            tokens.append(b" " + UNKNOWN if tok == "[UNK]" else b"")
        else:
            tokens.append(_wordpiece(tok))
    return TokenTable("wordpiece", tokens, str(path), hashlib.sha256(data).hexdigest())


# -- tables of the tokenizers engines hold ----------------------------------------------

_CACHE: OrderedDict[str, TokenTable] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _serialised(tokenizer) -> tuple[bytes, str]:
    """(tokenizer.json bytes, a name) of a transformers tokenizer, a `tokenizers.Tokenizer`,
    an engine's wrapper of one, or a path to a tokenizer.json or a folder holding one."""
    if isinstance(tokenizer, str | Path):
        path = Path(tokenizer)
        path = path / "tokenizer.json" if path.is_dir() else path
        return _read(path), str(path)
    seen = set()
    obj = tokenizer
    while obj is not None and id(obj) not in seen:  # wrappers hold the tokenizer they wrap
        seen.add(id(obj))
        if hasattr(obj, "to_str") and hasattr(obj, "get_vocab_size"):  # tokenizers.Tokenizer
            name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
            return obj.to_str().encode(), str(name)
        obj = (
            getattr(obj, "backend_tokenizer", None)
            or getattr(obj, "tokenizer", None)
            or getattr(obj, "_tokenizer", None)
        )
    raise TokenizerError(
        f"{type(tokenizer).__name__}: heatc needs a fast (Rust) Hugging Face tokenizer to build a token table "
        "(load it with use_fast=True, or pass the path of its tokenizer.json)"
    )


def table_for_tokenizer(tokenizer, disk_cache: bool = True) -> TokenTable:
    """The token table of the tokenizer an engine uses, cached by the hash of its
    serialisation (in this process, and as tokens.bin files in `cache_dir()`).

    Parameters
    ----------
    tokenizer : tokenizer object
        A transformers tokenizer (fast or slow), a `tokenizers.Tokenizer`, or vLLM's.
    disk_cache : bool
        Whether to read and write the tokens.bin cache in `cache_dir()`.

    Returns
    -------
    TokenTable
        Each token id's bytes.

    Raises
    ------
    TokenizerError
        The tokenizer cannot be serialised or its serialisation is malformed.
    """
    data, name = _serialised(tokenizer)
    key = hashlib.sha256(data).hexdigest()
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    cached = cache_dir() / "tokens" / f"{key}.bin" if disk_cache else None
    table = None
    if cached is not None and cached.is_file():
        try:
            meta = json.loads(cached.with_suffix(".json").read_text(encoding="utf-8"))
            table = TokenTable(meta["kind"], read_token_table(cached.read_bytes()), name, key)
        except (OSError, ValueError, KeyError):
            table = None  # a damaged cache entry is rebuilt
    if table is None:
        table = table_from_json_bytes(data, name)
        if cached is not None:
            _write_cache(cached, table)
    with _CACHE_LOCK:
        _CACHE[key] = table
        while len(_CACHE) > 8:
            _CACHE.popitem(last=False)
    return table


def _write_cache(path: Path, table: TokenTable) -> None:
    # Written to a temporary name and renamed, so a reader never sees half a file. A cache
    # that cannot be written (read-only home) only costs the rebuild next time.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for target, data in (
            (path.with_suffix(".json"), json.dumps({"kind": table.kind}).encode()),
            (path, token_table_bytes(table.tokens)),
        ):
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
    except OSError:
        pass
