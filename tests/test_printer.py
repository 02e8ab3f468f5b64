"""parse(format(tree)) == tree, on generated trees and on the shipped examples."""

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from heatc.lang import ast
from heatc.lang.parse import RESERVED_WORDS, parse
from heatc.lang.unparse import format_file

names = (
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(lambda s: s not in RESERVED_WORDS).map(ast.Name)
)
strings = st.text(max_size=12).map(ast.Str)
numbers = st.floats(allow_nan=False, allow_infinity=False).map(ast.Num)
simple_atoms = st.one_of(
    names.map(ast.AtomClass),
    strings.map(ast.AtomLiteral),
    st.just(ast.AtomNumber()),
    st.just(ast.AtomPercent()),
    st.just(ast.AtomDate()),
)
atoms = st.one_of(simple_atoms, st.lists(simple_atoms, min_size=1, max_size=3).map(lambda xs: ast.AtomAny(tuple(xs))))
elements = st.one_of(
    st.builds(ast.Element, atoms, st.none(), st.none() | names),
    st.builds(ast.Element, atoms, numbers, st.none() | names, across=st.booleans()),  # `..N` or `...N`
)
operands = st.one_of(names, numbers)
rule_stmts = st.one_of(
    st.builds(ast.WhenStmt, names),
    st.builds(ast.MatchStmt, st.lists(elements, min_size=1, max_size=4).map(tuple)),
    st.builds(ast.RequireCmp, operands, st.sampled_from(ast.COMPARISONS), operands),
    st.builds(ast.RequireIn, operands, numbers, numbers, st.booleans(), st.booleans()),
    st.builds(ast.ConsistentStmt, names, st.none() | names),
    st.builds(ast.LockStmt, names, names),
)
name_lists = st.lists(names, min_size=1, max_size=3).map(tuple)
decls = st.one_of(
    st.builds(ast.OptionsDecl, st.lists(names, max_size=2).map(tuple)),
    st.builds(
        ast.ClassDecl,
        names,
        st.sampled_from(ast.CLASS_KINDS),
        st.booleans(),
        st.lists(strings, min_size=1, max_size=3).map(tuple),
    ),
    st.builds(ast.AnchorDecl, names, st.none() | strings, st.lists(strings, min_size=1, max_size=3).map(tuple)),
    st.builds(
        ast.TriggersDecl,
        st.lists(
            st.one_of(
                st.builds(ast.TriggerAt, name_lists),
                st.builds(ast.TriggerEvery, numbers),
                st.builds(ast.TriggerBarrier, name_lists),
            ),
            max_size=3,
        ).map(tuple),
    ),
    st.builds(
        ast.RuleDecl,
        names,
        st.none() | strings,
        st.none() | numbers,
        st.none() | numbers,
        st.lists(rule_stmts, max_size=4).map(tuple),
    ),
    st.builds(ast.ExpectDecl, strings, st.just("passes"), st.lists(names, max_size=2).map(tuple)),
    st.builds(ast.ExpectDecl, strings, st.just("rejects"), name_lists),
)
files = st.builds(
    ast.RuleFile,
    st.none() | st.builds(ast.RulesetDecl, names, st.none() | strings),
    st.lists(decls, max_size=6).map(tuple),
)


@given(files)
def test_print_then_parse_is_identity(tree):
    assert parse(format_file(tree)) == tree


def test_examples_round_trip():
    for path in sorted(Path(__file__).parent.parent.glob("examples/*.heat")):
        tree = parse(path.read_text(encoding="utf-8"))
        text = format_file(tree)
        assert parse(text) == tree
        assert format_file(parse(text)) == text  # the canonical form is a fixed point
