"""Hypothesis strategies shared by the property tests: random rule sets (as DSL source,
valid by construction), inputs built from their vocabulary, and chunkings.

Every backend's differential test draws from here, so a new construct added to the
language should be added here too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hypothesis import note
from hypothesis import strategies as st

# Literal pool: each string at most once per rule set; no two differ only by case; none
# reads as a number; CJK and ASCII, single- and multi-word, punctuation.
ASCII_LITERALS = [
    "glucose", "rate", "mg", "mg/dL", "days", "pay", "notice", "APR", "limit", "blood sugar",
    "not exceed", "K+", "within", "at most", "HR", "bpm", "sats", "e.g.",
]  # fmt: skip
CJK_LITERALS = ["血糖", "利率", "天", "元", "不超过", "通知", "贷款", "年", "年化利率", "万元", "次/分", "毫摩尔/升"]
PUNCT_LITERALS = [".", "。", ";", "；", "/", "(", ")", "%"]
LITERAL_POOL = ASCII_LITERALS + CJK_LITERALS + PUNCT_LITERALS

NUMBER_PIECES = [
    "0", "5", "7", "12", "120", "2000", "1,234", "3.5", "0.25", "0.10", "12.0", "1,234.567", "１．２０", "２０", "4.9", "36%", "8%", "８％", "24 %",
    "三十", "十五", "一千零五", "二〇二四", "30万", "1.5亿", "3.25万", "三点五二", "百分之八", "百分之三十六", "三点五",
    # years written alone (dates) and the numbers beside them
    "2019", "1998", "2119", "2199", "2200", "1899", "2019.5", "2,019", "2019s", "１９９８",
]  # fmt: skip
# Dates and their near misses (docs/semantics.md §2): fractions, pressures, month names alone.
DATE_PIECES = [
    "09/05", "11/30/2026", "1/16/96", "4/96", "9/03", "10/10", "5/5", "7/10", "120/80", "12/8", "/",
    "November 2003", "Nov. 5th", "May 5, 2003", "October of 2006", "November", "Nov", "APR", "MAY 5",
    "2026年11月", "11月30日", "2026年", "月", "０９/０５",
]  # fmt: skip
WORD_PIECES = ["the", "was", "and", "level", "Glucose", "RATE", "mgmt", "xmg", "pays", "Q3", "FY2024", "é", "µ"]
# Words a kernel's idle-stretch skipper must tell from literals: literal heads followed by
# other bytes, near-misses, and words of 15, 16 and 17 letters (its block is 16 bytes).
PLAIN_WORDS = [
    "blood", "bloodsugar", "glucoses", "mgs", "mg-", "notices", "e", "eg", "Within", "hr", "HRs", "bpms",
    "payment", "at", "most", "not", "exceeds", "a", "I", "of", "patient", "May", "may", "MAY", "Nov", "November", "Xylophonists", "qwertyuiopasdfg",
    "qwertyuiopasdfgh", "qwertyuiopasdfghj", "Aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
]  # fmt: skip
# CJK text a skipper must tell from literals and numerals: plain characters, full-width
# punctuation, characters that start pool literals or Chinese numbers, a lone lead byte.
PLAIN_CJK = [
    "的", "是", "本办法所称", "中国人民银行", "，", "（", "）", "、", "：", "“", "”", "第三条", "不得", "利",
    "年度", "元的", "通知书", "贷", "百分", "十", "〇", "０", "．", "％", "\u3000", "\ufffd", "\uffff",
    "借款人应当按照合同约定的期限还款，逾期部分按日计息",
]  # fmt: skip
PLAIN_SEPARATORS = [
    " ",
    " ",
    " ",
    "\r\n",
    "\x0b",
    "\x0c",
    "\t\t",
    "!",
    "?",
    "'",
    '"',
    "*",
    "#",
    "&",
    "_",
    "=",
    "\x01",
    "\x7f",
    # the bytes just outside the SIMD classes: whitespace 9–13, letters A–Z and a–z
    "\x08",
    "\x0e",
    "@",
    "[",
    "`",
    "{",
]
SEPARATORS = [" ", " ", " ", "  ", "\n", "\t", ",", ":", "-", "，", "\u3000", "\u00a0", ""]
CONSTANTS = [0, 0.25, 3.5, 5, 7, 8, 12, 15, 20, 24, 30, 36, 120, 1234, 2000, 2024, 300000, 150000000]
# quantities (`v:quantity(DIM)`): per dimension, units a bound is written in and spellings of
# its units and others' that a generated text holds (affine temperatures, prefixes, Chinese)
QUANTITIES = {
    "mass": ["mg", "g", "mcg", "kg"],
    "temperature": ["°C", "°F", "K"],
    "rate": ["/min", "bpm", "/h"],
}
UNIT_PIECES = ["mg", "MG", "g", "mcg", "µg", "kg", "毫克", "°C", "℃", "°F", "F", "C", "K", "bpm", "/min", "/h",
               "per minute", "mL", "mg/kg", "mmol/L", "lb"]  # fmt: skip
ANCHOR_TERMS = [
    "blood sugar",
    "covered borrower",
    "民间借贷",
    "the level",
    "Military Lending Act",
    "not exceed",
    "贷款利率",
    "glucose level",
]


@dataclass
class GeneratedRules:
    source: str
    pieces: list[str]  # vocabulary to build inputs from


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@st.composite
def rule_sets(draw, max_rules: int = 5) -> GeneratedRules:
    chinese = draw(st.booleans())
    literals = draw(st.lists(st.sampled_from(LITERAL_POOL), min_size=1, max_size=10, unique=True))
    n_classes = draw(st.integers(1, min(4, len(literals))))
    assignment = [draw(st.integers(0, n_classes - 1)) for _ in literals]
    classes: list[list[str]] = [[] for _ in range(n_classes)]
    for lit, c in zip(literals, assignment, strict=True):
        classes[c].append(lit)
    classes = [c for c in classes if c]
    class_names = [f"c{i}" for i in range(len(classes))]
    lines = ["ruleset gen"]
    if chinese:
        lines.append("options { chinese_numbers }")
    for name, lits in zip(class_names, classes, strict=True):
        kind = draw(st.sampled_from(["unit", "keyword", "constraint", "punct", "other"]))
        exact = " exact" if draw(st.booleans()) and draw(st.booleans()) else ""
        lines.append(f"class {name} {kind}{exact} = " + ", ".join(_q(x) for x in lits))

    anchors: list[str] = []
    if draw(st.booleans()):
        terms = draw(st.lists(st.sampled_from(ANCHOR_TERMS), min_size=1, max_size=3, unique=True))
        domain = draw(st.sampled_from(["", ' domain "d1"']))
        lines.append(f"anchor a0{domain} = " + ", ".join(_q(t) for t in terms))
        anchors = ["a0"]

    stmts = []
    if draw(st.booleans()):
        stmts.append(
            "at " + ", ".join(draw(st.lists(st.sampled_from(class_names), min_size=1, max_size=2, unique=True)))
        )
    if draw(st.booleans()):
        stmts.append(
            "barrier " + ", ".join(draw(st.lists(st.sampled_from(class_names), min_size=1, max_size=2, unique=True)))
        )
    if draw(st.booleans()):
        stmts.append(f"every {draw(st.integers(1, 4))}")
    if stmts:
        lines.append("triggers {\n  " + "\n  ".join(stmts) + "\n}")

    n_rules = draw(st.integers(1, max_rules))
    for r in range(n_rules):
        lines.append(draw(_rule(f"r{r}", class_names, literals, anchors)))
    pieces = list(literals) + NUMBER_PIECES + DATE_PIECES + WORD_PIECES + ANCHOR_TERMS
    if "quantity(" in "\n".join(lines):
        pieces += UNIT_PIECES
    pieces += [x.upper() for x in literals if x.isascii()]
    # a space in a literal matches any run of ASCII whitespace
    pieces += [x.replace(" ", ws) for x in literals if " " in x for ws in ("\t", "\r\n", " \x0b\x0c")]
    return GeneratedRules("\n".join(lines) + "\n", pieces)


@st.composite
def _rule(draw, name: str, class_names: list[str], literals: list[str], anchors: list[str]) -> str:
    n = draw(st.integers(1, 4))
    elements = []
    numeric: list[str] = []
    symbolic: list[str] = []  # class captures
    quantities: list[tuple[str, str]] = []  # (capture, dimension)
    for i in range(n):
        kind = draw(
            st.sampled_from(["class", "number", "percent", "date", "literal", "any", "numeric_any", "quantity"])
        )
        if kind == "quantity" and draw(st.booleans()):  # (half as often: 300 unit literals compile slowly)
            kind = "number"
        if kind == "quantity":
            dim = draw(st.sampled_from(sorted(QUANTITIES)))
            atom, cap_kind = f"quantity({dim})", "quantity"
        elif kind == "class":
            atom, cap_kind = draw(st.sampled_from(class_names)), "class"
        elif kind == "literal":
            atom, cap_kind = _q(draw(st.sampled_from(literals))), "class"
        elif kind == "any":
            opts = draw(st.lists(st.sampled_from(class_names), min_size=1, max_size=3, unique=True))
            atom, cap_kind = "(" + " | ".join(opts) + ")", "class"
        elif kind == "numeric_any":
            atom, cap_kind = draw(st.sampled_from(["(number | percent)", "(number | date)"])), "number"
        else:
            atom, cap_kind = kind, "number"
        capture = ""
        if draw(st.integers(0, 2)) > 0:
            cname = f"v{i}"
            capture = f"{cname}:"
            if cap_kind == "quantity":
                quantities.append((cname, dim))
            else:
                (numeric if cap_kind == "number" else symbolic).append(cname)
        dots = draw(st.sampled_from(["..", "..", "..."]))  # binding gaps, and gaps that reach across
        gap = f"{dots}{draw(st.integers(0, 4))} " if i > 0 and draw(st.booleans()) else ""
        elements.append(f"{gap}{capture}{atom}")
    body = ["match " + " ".join(elements)]
    if anchors and draw(st.integers(0, 3)) == 0:
        body.append(f"when {anchors[0]}")
    for v in numeric:
        choice = draw(st.integers(0, 4))
        if choice == 0:
            lo = draw(st.sampled_from(CONSTANTS))
            hi = draw(st.sampled_from([c for c in CONSTANTS if c >= lo]))
            brackets = draw(st.sampled_from(["[]", "[)", "(]", "()"] if hi > lo else ["[]"]))
            body.append(f"require {v} in {brackets[0]}{lo}, {hi}{brackets[1]}")
        elif choice == 1:
            op = draw(st.sampled_from(["<", "<=", ">", ">=", "!="]))
            body.append(f"require {v} {op} {draw(st.sampled_from(CONSTANTS))}")
        elif choice == 2:
            within = draw(st.sampled_from(["", "", " within factor 2", " within factor 10"]))  # exact, or a band
            body.append(f"consistent {v}{within}" + (f" per {symbolic[0]}" if symbolic and draw(st.booleans()) else ""))
        elif choice == 3:
            body.append(f"lock ch_num = {v}")
        if draw(st.integers(0, 4)) == 0:  # the digits after its point ("0.25" has 2, "三点五" 1)
            op = draw(st.sampled_from(["<", "<=", "==", ">="]))
            body.append(f"require places({v}) {op} {draw(st.sampled_from([0, 1, 2]))}")
    for v, dim in quantities:  # bounds in a unit of the dimension, or one value throughout
        choice = draw(st.integers(0, 2))
        if choice == 0:
            lo, hi = sorted(draw(st.lists(st.sampled_from(CONSTANTS), min_size=2, max_size=2)))
            unit = draw(st.sampled_from(QUANTITIES[dim]))  # (one unit: an affine one keeps lo <= hi)
            body.append(f"require {v} in [{lo} {unit}, {hi} {unit}]")
        elif choice == 1:
            body.append(f"consistent {v}")
    if len(numeric) >= 2 and draw(st.booleans()):
        body.append(f"require {numeric[0]} {draw(st.sampled_from(['<', '>', '==', '!=']))} {numeric[1]}")
    if symbolic and draw(st.integers(0, 3)) == 0:
        body.append(f"lock ch_class = {symbolic[0]}")
    heat = draw(st.sampled_from(["", " heat 0.5", " heat 0.9", " heat 0.9 freq 2", " heat 0.1"]))
    # observe-only: rejects and reports, but leaves the rejections counter alone (semantics §7)
    heat += draw(st.sampled_from(["", "", "", " observe"]))
    return f"rule {name}{heat} {{\n  " + "\n  ".join(body) + "\n}"


# One-word keywords whose rules need a number next: a kernel may count such a keyword as a
# plain word and come back to it only if something that matters follows within its gap.
WEAK_KEYWORDS = ["payment", "payments", "pay", "notice", "Article", "liability", "cure", "glucose"]
WEAK_UNITS = ["days", "day", "calendar days", "mg/dL", "%", "天", "times"]


@st.composite
def weak_start_rule_sets(draw) -> GeneratedRules:
    """Rule sets in which one-word keywords start rules whose second element takes numbers
    (or a multi-word or CJK literal) after a gap: no anchors, no rule starting on a number.
    Some also hold late-starting rules (a number right before a unit, or before a keyword,
    which that keyword then starts: no weak start) and a rule on dates (years matter to an
    idle stream, so the skipper stops before them)."""
    keywords = draw(st.lists(st.sampled_from(WEAK_KEYWORDS), min_size=1, max_size=5, unique=True))
    units = draw(st.lists(st.sampled_from(WEAK_UNITS), min_size=1, max_size=3, unique=True))
    lines = ["ruleset weak"]
    if draw(st.booleans()):
        lines.append("options { chinese_numbers }")
    split = draw(st.integers(1, len(keywords)))
    classes = {"k0": keywords[:split], "k1": keywords[split:], "u": units, "cap": ["shall not exceed", "不超过"]}
    classes = {name: lits for name, lits in classes.items() if lits}
    for name, lits in classes.items():
        lines.append(f"class {name} {'unit' if name == 'u' else 'keyword'} = " + ", ".join(_q(x) for x in lits))
    lines.append('class stop punct = ".", ";"')
    stmts = []
    if draw(st.booleans()):
        stmts.append("barrier stop")
    if draw(st.booleans()):
        stmts.append("at stop")
    if draw(st.booleans()):
        stmts.append(f"every {draw(st.integers(1, 4))}")
    if stmts:
        lines.append("triggers {\n  " + "\n  ".join(stmts) + "\n}")
    starts = [name for name in ("k0", "k1") if name in classes]
    late = draw(st.sampled_from(["", "v:number u", "v:(number | date) u", "keyword"]))
    if late == "keyword" and len(keywords) > 1:
        # the last keyword starts the late rule; the first starts a weak one (w0)
        lines.append(f"rule late {{\n  match v:number {_q(keywords[-1])}\n  require v < 50\n}}")
    elif late and late != "keyword":
        lines.append(f"rule late {{\n  match {late}\n  require v < 50\n}}")
    if draw(st.booleans()):
        lines.append("rule years {\n  match v:date\n  require v <= 2050\n}")
    for r in range(draw(st.integers(1, 4))):
        kw = draw(st.sampled_from(starts + [f"({' | '.join(starts)})"] + [_q(k) for k in keywords]))
        kw = _q(keywords[0]) if r == 0 and late == "keyword" and len(keywords) > 1 else kw
        second = draw(st.sampled_from(["v:number", "v:(number | percent)", "cap", "v:percent"]))
        gap = draw(st.integers(0, 7))
        dots = draw(st.sampled_from(["..", "..."]))
        elements = [kw, f"{dots}{gap} {second}"]
        if second == "cap":
            elements.append(f"{dots}{draw(st.integers(0, 3))} v:number")
        if draw(st.booleans()):
            elements.append(f"{dots}{draw(st.integers(0, 2))} u")
        body = ["match " + " ".join(elements)]
        body.append(draw(st.sampled_from(["require v < 100", "consistent v", "require v in [1, 30]", "lock c = v"])))
        lines.append(f"rule w{r} {{\n  " + "\n  ".join(body) + "\n}")
    pieces = keywords + [k.upper() for k in keywords] + units + ["shall not exceed", "不超过", ".", ";"]
    pieces += ["payroll", "noticeable", "Articles", "prepay", "shall", "not", "exceed", "é", "三十", "十五天"]
    pieces += ["09/05", "November 2003", "5/5", "2019", "1999 ", "2200", "12 " + units[0], "2019 " + units[0]]
    pieces += ["7 " + keywords[-1], "2019 " + keywords[-1]]
    return GeneratedRules("\n".join(lines) + "\n", pieces)


# what a kernel may count as percentages, and the `%` signs around them that are literals
PERCENT_PIECES = ["36%", "4.5%", "12.25%", "7 %", "%", "9%%", "18%24", "1,234%", "%5", "12345678%", "1.2.3%", "５%"]


@st.composite
def percent_trigger_rule_sets(draw) -> GeneratedRules:
    """Rule sets in which `%` is a trigger literal that starts nothing, and numbers and
    percentages start nothing either: a kernel's skipper counts percentages (`36%`) in bulk
    in every stream, though the `%` sign alone is plain only in a quiet scan."""
    lines = ["ruleset pct_trigger"]
    if draw(st.booleans()):
        lines.append("options { chinese_numbers }")
    others = draw(st.lists(st.sampled_from([".", ",", ";", "/"]), max_size=2, unique=True))
    lines.append('class kw keyword = "glucose", "rate"')
    lines.append('class u unit = "mg/dL", "bpm"')
    lines.append("class pct unit = " + ", ".join(_q(x) for x in ["%", *others]))
    stmts = ["at pct"] + ([f"every {draw(st.integers(1, 4))}"] if draw(st.booleans()) else [])
    lines.append("triggers {\n  " + "\n  ".join(stmts) + "\n}")
    lines.append(f"rule r {{\n  match kw ..{draw(st.integers(0, 4))} v:number u\n  require v < 300\n}}")
    pieces = ["glucose", "rate", "mg/dL", "bpm", *others, *PERCENT_PIECES, *PERCENT_PIECES]
    return GeneratedRules("\n".join(lines) + "\n", pieces)


def texts(pieces: list[str], max_pieces: int = 30) -> st.SearchStrategy[bytes]:
    """Byte streams built from a vocabulary and separators, with the odd raw (often invalid
    UTF-8) byte run between them."""
    piece = st.one_of(st.sampled_from(pieces), st.sampled_from(SEPARATORS), st.sampled_from(NUMBER_PIECES))
    text = st.lists(piece, max_size=max_pieces).map(lambda parts: "".join(parts).encode("utf-8"))
    chunk = st.one_of(text, text, text, st.binary(min_size=1, max_size=3))
    return st.lists(chunk, min_size=1, max_size=4).map(b"".join)


def long_texts(pieces: list[str]) -> st.SearchStrategy[bytes]:
    """Long streams, mostly plain words between separators (what a kernel may skip without
    its lexer), with the rule set's pieces, numbers and raw bytes mixed in."""
    word = st.one_of(
        st.sampled_from(PLAIN_WORDS), st.sampled_from(PLAIN_WORDS), st.sampled_from(PLAIN_CJK), st.sampled_from(pieces)
    )
    sep = st.one_of(
        st.sampled_from(PLAIN_SEPARATORS), st.sampled_from(SEPARATORS), st.sampled_from(NUMBER_PIECES), st.just("")
    )
    part = st.tuples(word, sep).map(lambda ws: (ws[0] + ws[1]).encode("utf-8"))
    return st.lists(st.one_of(part, part, part, st.binary(min_size=1, max_size=2)), min_size=10, max_size=120).map(
        b"".join
    )


def dense_texts(pieces: list[str]) -> st.SearchStrategy[bytes]:
    """Long streams of short words, the rule set's pieces and numbers, so that a 32-byte
    block often holds a keyword and the lexemes of a whole gap after it."""
    word = st.one_of(
        st.sampled_from(["a", "of", "to", "the", "x", "be", "in", "no"]),
        st.sampled_from(pieces),
        st.sampled_from(NUMBER_PIECES),
    )
    sep = st.sampled_from([" ", " ", " ", "  ", "\n", ", ", "(", ") ", "-", "\t", "é", "，"])
    part = st.tuples(word, sep).map(lambda ws: (ws[0] + ws[1]).encode("utf-8"))
    return st.lists(part, min_size=20, max_size=150).map(b"".join)


def chunkings(data: bytes) -> st.SearchStrategy[list[bytes]]:
    """Ways to cut `data` into consecutive pieces (possibly empty ones)."""
    return st.lists(st.integers(0, len(data)), max_size=8).map(lambda cuts: _cut(data, sorted(cuts)))


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    out, prev = [], 0
    for c in cuts:
        out.append(data[prev:c])
        prev = c
    out.append(data[prev:])
    return out


@contextmanager
def reported(rules: str, *fed: list[bytes]) -> Iterator[None]:
    """On a failure inside the block, note each stream as it was fed (lists of pieces, read
    at the failure): hypothesis prints the notes with the shrunk example, one
    `corpus case: ...` line each, which tests/corpus_case.py turns into a corpus case."""
    try:
        yield
    except Exception:
        from corpus_case import failure_line

        for i, pieces in enumerate(fed):
            note(failure_line(rules, list(pieces), f"sequence {i}" if len(fed) > 1 else ""))
        raise
