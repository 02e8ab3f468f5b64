"""The lexer automaton against the brute-force regex oracle (docs/semantics.md §1–2)."""

from hypothesis import assume, example, given
from hypothesis import strategies as st
from support import compile_cached
from support.oracle import regex_lex
from support.strategies import DATE_PIECES, LITERAL_POOL, NUMBER_PIECES, SEPARATORS, WORD_PIECES

from heatc import ir
from heatc.errors import HeatError
from heatc.semantics.lexing import lex

# Literals from the shared pool plus short random ones over an alphabet that makes
# prefixes, boundaries and case collide.
random_literals = st.text("abAB .%/十万元x", min_size=1, max_size=4).map(str.strip).filter(bool)
literal_sets = st.lists(
    st.one_of(st.sampled_from(LITERAL_POOL), random_literals), min_size=0, max_size=8, unique_by=str.lower
)

pieces = st.sampled_from(
    LITERAL_POOL + NUMBER_PIECES + DATE_PIECES + WORD_PIECES + SEPARATORS + ["ab", "AB", "b.", "a b", "十万", "x"]
)
streams = st.one_of(
    st.lists(pieces, max_size=25).map(lambda p: "".join(p).encode("utf-8")),
    st.binary(max_size=40),
)


def _program(literals: list[str], exact: list[bool], chinese: bool):
    lines = ["options { chinese_numbers }"] if chinese else []
    for i, (lit, ex) in enumerate(zip(literals, exact, strict=True)):
        quoted = '"' + lit.replace("\\", "\\\\").replace('"', '\\"') + '"'
        lines.append(f"class c{i} other{' exact' if ex else ''} = {quoted}")
    try:
        return compile_cached("\n".join(lines) + "\n")
    except HeatError:
        assume(False)  # e.g. a literal that reads as a number; covered by the error tests


@given(literal_sets, st.data(), st.booleans(), streams)
@example(["mg", "mg/dL"], [False, False], False, b"mg/dLx mgmt 500mg MG/DL")
@example(["blood sugar"], [False], False, b"blood \n sugar bloodsugar blood sugars")
@example(["a"], [False], False, b"a" * 70)
@example([], [], True, "09/05 11/30/2026 120/80 November 35 Nov. 5thx 2026年11月30日 11月30 APR 4".encode())
def test_dfa_lexer_matches_regex_oracle(literals, data, chinese, stream):
    exact = (
        data.draw(st.lists(st.booleans(), min_size=len(literals), max_size=len(literals)))
        if isinstance(data, st.DataObject)
        else data
    )
    program = _program(literals, exact, chinese)
    got = [(_name(x.code), x.start, x.end) for x in lex(program, stream)]
    want = regex_lex(stream, [(lit.text, lit.exact) for lit in program.literals], chinese)
    assert got == want


def _name(code: int) -> str:
    if code >= ir.LEX_LITERAL0:
        return f"lit{code - ir.LEX_LITERAL0}"
    return ir.LEXEME_NAMES[code]
