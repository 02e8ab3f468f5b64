"""Token tables for the three tokenizer families, and tokenisation invariance: feeding a
text token by token through the table gives the verdicts of scanning the text."""

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from heatc.errors import HeatError
from heatc.heatmap.format import Tokenizer as TokenizerSpec
from heatc.heatmap.tokenizers import minilm_tokenizer_json, table_bytes, table_from_tokenizer_json, token_table
from heatc.lang.compiler import compile_file
from heatc.verify.backends import run_document, wasm_checker
from heatc.wasm import compile_wasm
from heatc_runtime import from_bytes
from heatc_runtime.backends.tables import read_token_table

pytestmark = pytest.mark.needs("tokenizers")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TEXTS = [
    (EXAMPLES / "texts" / name).read_text(encoding="utf-8")
    for name in sorted(p.name for p in (EXAMPLES / "texts").glob("*.txt"))
]
MEDICAL = compile_file(EXAMPLES / "medical.heat")


def _train(model, pre, dec, trainer, path: Path) -> Path:
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre
    tok.decoder = dec
    tok.train_from_iterator(TEXTS, trainer)
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def bytelevel(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]
    )
    return _train(models.BPE(), pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel(), trainer, path)


@pytest.fixture(scope="module")
def metaspace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sp") / "tokenizer.json"
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>"])
    model = models.BPE(unk_token="<unk>", byte_fallback=True)
    tok_path = _train(model, pre_tokenizers.Metaspace(), decoders.Metaspace(), trainer, path)
    # byte fallback needs <0x00>..<0xFF> in the vocabulary, as SentencePiece models have
    spec = json.loads(tok_path.read_text())
    vocab = spec["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    tok_path.write_text(json.dumps(spec))
    return tok_path


def _feed_tokens(ids: list[int], table: list[bytes]):
    checker = wasm_checker(MEDICAL)
    checker.set_token_table(table)
    batch = checker.batch(1)
    snaps = []
    for i in ids:
        snaps += batch.feed_ids(np.array([i], dtype=np.uint32)).get(0, [])
    snaps += batch.finish().get(0, [])
    return [e for s in snaps for e in s.events], dict(snaps[-1].verdicts)


def test_bytelevel_bpe_is_lossless(bytelevel):
    table = table_from_tokenizer_json(bytelevel)
    assert table.kind == "bytelevel"
    tok = Tokenizer.from_file(str(bytelevel))
    special = tok.token_to_id("<|endoftext|>")
    assert table.tokens[special] == b""
    for text in TEXTS:
        ids = tok.encode(text).ids
        assert b"".join(table.tokens[i] for i in ids) == text.encode()
        events, verdicts = _feed_tokens(ids, table.tokens)
        want_events, want_verdicts, _ = run_document("reference", MEDICAL, text.encode())
        assert (events, verdicts) == (want_events, dict(want_verdicts))


def test_sentencepiece_style_with_byte_fallback(metaspace):
    table = table_from_tokenizer_json(metaspace)
    assert table.kind == "metaspace"
    tok = Tokenizer.from_file(str(metaspace))
    for text in TEXTS:
        ids = tok.encode(text).ids
        spelled = b"".join(table.tokens[i] for i in ids)
        assert spelled == b" " + text.encode()  # Metaspace prepends one space; otherwise lossless
        events, verdicts = _feed_tokens(ids, table.tokens)
        want_events, want_verdicts, _ = run_document("reference", MEDICAL, spelled)
        assert (events, verdicts) == (want_events, dict(want_verdicts))
    assert table.tokens[tok.token_to_id("<0x0A>")] == b"\n"


def test_wordpiece_minilm_spells_what_its_decoder_spells():
    table = token_table(TokenizerSpec("embedded", "minilm"))
    assert table.kind == "wordpiece" and len(table.tokens) == 30522
    tok = Tokenizer.from_file(str(minilm_tokenizer_json()))
    text = "Potassium 4.9, glucose 1,250 mg/dL and BP 130/80."
    ids = tok.encode(text).ids
    spelled = b"".join(table.tokens[i] for i in ids)
    assert spelled == b" potassium4.9, glucose1,250 mg/ dl and bp130/80."
    assert (
        table.tokens[tok.token_to_id("[CLS]")] == b"" and table.tokens[tok.token_to_id("[UNK]")] == " \ufffd".encode()
    )
    # the verdicts a model writing these tokens gets: those of the text the tokens spell
    events, verdicts = _feed_tokens(ids, table.tokens)
    want_events, want_verdicts, _ = run_document("reference", MEDICAL, spelled)
    assert (events, verdicts) == (want_events, dict(want_verdicts))
    assert [e.name for e in events] == ["potassium_value", "glucose_value"]  # 4.9 and 1,250 stay numbers


def test_vocab_txt_directory(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\nglucose\n##s\n5\n.\nmg\n")
    table = token_table(TokenizerSpec("dir", str(tmp_path)))
    assert table.tokens == [b"", " \ufffd".encode(), b"", b" glucose", b"s", b"5", b".", b" mg"]


def test_table_file_round_trip_and_refusal():
    table = token_table(TokenizerSpec("bytes"))
    data = table_bytes(table)
    assert read_token_table(data) == table.tokens
    with pytest.raises(ValueError, match="bad magic"):
        read_token_table(b"NOTATABL" + data[8:])
    with pytest.raises(ValueError, match="do not match its size"):
        read_token_table(data[:-1])


def test_unsupported_and_broken_tokenizers(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(HeatError, match=r"not a Hugging Face tokenizer\.json"):
        table_from_tokenizer_json(tmp_path / "broken.json")
    (tmp_path / "odd.json").write_text(json.dumps({"model": {"type": "Mystery", "vocab": {"a": 0}}, "decoder": None}))
    with pytest.raises(HeatError, match="unsupported tokenizer: model 'Mystery'"):
        table_from_tokenizer_json(tmp_path / "odd.json")
    with pytest.raises(HeatError, match=r"has neither tokenizer\.json nor vocab\.txt"):
        token_table(TokenizerSpec("dir", str(tmp_path)))


def test_a_batch_made_before_its_token_table():
    """feed_ids refuses to run without a token table, and a batch made before the table was
    set reads it once it is: the same events and verdicts as a batch made after."""
    table = [b"Glucose", b" ", b"5000", b" mg/dL", b"."]
    ids = [0, 1, 2, 3, 4]
    module = compile_wasm(MEDICAL)
    checker = from_bytes(module.manifest, module.wasm)  # (wasm_checker's is shared, with a table)
    early = checker.batch(1)
    with pytest.raises(ValueError, match="no token table"):
        early.feed_ids(np.array([0], dtype=np.uint32))
    checker.set_token_table(table)
    snaps = []
    for i in ids:
        snaps += early.feed_ids(np.array([i], dtype=np.uint32)).get(0, [])
    snaps += early.finish().get(0, [])
    events = [e for s in snaps for e in s.events]
    assert (events, dict(snaps[-1].verdicts)) == _feed_tokens(ids, table)
    assert {e.name for e in events} == {"glucose_value", "glucose_quantity"}  # 5000 fails both
