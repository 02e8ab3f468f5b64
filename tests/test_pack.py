"""The skipper's word fingerprints (heatc.wasm.skipper): whatever buckets the patterns get, a word
start that begins a pattern must pass them — in any letter case, with any whitespace where
the pattern has a space — or the skipper would count a literal as a plain word."""

from hypothesis import given, settings
from hypothesis import strategies as st

from heatc.wasm.skipper import ASCII_WHITESPACE, WORD_FINGERPRINT_BUCKETS, _fingerprint_buckets, _teddy

letters = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
patterns = st.lists(
    st.tuples(letters, st.text(alphabet="abcdefghijklmnopqrstuvwxyzAZ ./-%0", max_size=6)).map(
        lambda t: (t[0] + t[1]).encode()
    ),
    min_size=1,
    max_size=60,
    unique=True,
)


def passes(tables: bytes, text: bytes) -> bool:
    """The kernel's test at a word start: per byte offset, the low-nibble table of the raw
    byte and the high-nibble table of the raw byte's high nibble share a bucket bit."""
    size = 2 * 16 * WORD_FINGERPRINT_BUCKETS // 8
    fits = 0xFF
    for j in range(2):
        b = text[j] if j < len(text) else 0x20
        lo, hi = tables[size * j : size * j + 16], tables[size * j + 16 : size * j + 32]
        fits &= lo[b & 15] & hi[b >> 4]
    return fits != 0


@settings(max_examples=300)
@given(patterns, st.data())
def test_every_pattern_start_passes_its_fingerprint(texts, data):
    bucket = _fingerprint_buckets(set(texts))
    assert set(bucket.values()) <= set(range(WORD_FINGERPRINT_BUCKETS))
    tables = _teddy(set(texts), lambda t: bucket[t[0] | 0x20], offsets=2, buckets=WORD_FINGERPRINT_BUCKETS)
    for text in texts:
        # as it may appear: letters in either case, any whitespace byte for a space
        seen = bytes(
            (c ^ 0x20 if chr(c).isalpha() and data.draw(st.booleans()) else c)
            if c not in ASCII_WHITESPACE
            else data.draw(st.sampled_from(sorted(ASCII_WHITESPACE)))
            for c in text[:2]
        )
        assert passes(tables, seen + text[2:]), (text, seen)


def test_buckets_are_deterministic():
    words = {w.encode() for w in "payment notice cure remedy liability shall not article total days".split()}
    assert _fingerprint_buckets(words) == _fingerprint_buckets(set(sorted(words, reverse=True)))
