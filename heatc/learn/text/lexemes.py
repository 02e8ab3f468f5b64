"""Lexical categories for learning, and the lexemes of a sentence aligned to teacher tokens.

Learning sees text the way compiled rules will: through heatc's own lexer (numbers,
percents, words, literals), not the teacher's subword tokens. A built-in seed lexicon names
the categories every domain shares — units, constraint words, dates and quarters, article
references, currencies, sentence ends — to which `heatc.learn.text.discovery` adds the domain's
own keywords.

Public surface: `SEED_CATEGORIES`, `Category`, `Lexicon`, `lex_sentence`, `STOPWORDS`,
`SentenceLexemes`, `align`, `numeral_value`, `compound_numerals`, `is_numeral_name`, `NUMERAL_KIND`,
`NUMERAL_NAMES`.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from heatc import ir
from heatc.lang.compiler import compile_source
from heatc.lang.parse import RESERVED_WORDS
from heatc.lang.unparse import format_string
from heatc.learn.text.model_names import MODEL_NAME_CLASS
from heatc.semantics.lexing import Lexeme, lex
from heatc_runtime.reports.restated import written_number


@dataclass(frozen=True)
class Category:
    name: str
    kind: str  # unit | keyword | constraint | punct | other (the rule language's class kinds)
    group: str  # unit | constraint | date | article | currency | keyword | structure | share
    literals: tuple[str, ...]
    exact: bool = False


def _c(name: str, kind: str, group: str, *literals: str, exact: bool = False) -> Category:
    return Category(name, kind, group, tuple(literals), exact)


# The group of the words after a percentage that make it a share of a whole ("45% of
# revenues"): a share is at most the whole, whatever the word before it. Only a percentage
# takes one ("2 of 3 patients" counts), and only in a cell of its own (no keyword, no term);
# elsewhere such a word is a plain word.
SHARE_GROUP = "share"
# The group of the words a dose or a period is read before, found after values and their
# units ("5 mg daily", "30 days written notice", `discovery.follower_words`): declared with
# kind `other`, so that they stop no gap of the rules that read a keyword before a value.
FOLLOWER_GROUP = "follower"
# The group of the punctuation that ends a listed value ("sodium 138, potassium 4.0"): what a
# bare value's cell takes in its unit's place (`evidence.VALUE_ENDS`); elsewhere a plain token.
END_GROUP = "end"

# Shared by every domain. Units are grouped by quantity so that a swapped unit is a different
# category. English and Chinese; Chinese units matter to the rules even though the default
# teacher cannot read them.
# fmt: off
SEED_CATEGORIES: tuple[Category, ...] = (
    _c("sentence_end", "punct", "structure", ".", "。", ";", "；", "!", "！", "?", "？"),
    _c("item_end", "punct", END_GROUP, ",", "，"),
    _c("abbreviation", "other", "structure", "e.g.", "i.e.", "Dr.", "vs.", "approx.", "No.", "Inc.", "Ltd.", "Co.", "Corp."),
    # medical units
    _c("mg_dl", "unit", "unit", "mg/dL", "mg per dL", "milligrams per deciliter", "毫克/分升"),
    # (a unit per another is a unit of its own: "iron 35mcg/dL" is no dose in mcg, "ESR 113mm/hr" no length)
    _c("mcg_dl", "unit", "unit", "mcg/dL", "µg/dL", "μg/dL", "mcg per dL"),
    _c("mmol_l", "unit", "unit", "mmol/L", "mmol per liter", "millimoles per liter", "毫摩尔/升"),
    _c("meq_l", "unit", "unit", "mEq/L", "meq per liter"),
    _c("g_dl", "unit", "unit", "g/dL", "gm/dL", "grams per deciliter"),
    _c("g_l", "unit", "unit", "g/L", "克/升"),
    _c("u_l", "unit", "unit", "U/L", "IU/L", "units/L"),
    _c("mg_kg", "unit", "unit", "mg/kg", "mg per kg"),
    _c("mcg_kg", "unit", "unit", "mcg/kg", "mcg/kg/min", "mcg per kg"),
    _c("mg", "unit", "unit", "mg", "mgs", "milligram", "milligrams", "毫克"),
    _c("mcg", "unit", "unit", "mcg", "µg", "μg", "microgram", "micrograms", "微克"),
    _c("grams", "unit", "unit", "g", "gm", "gram", "grams", "克"),
    _c("kg", "unit", "unit", "kg", "kilogram", "kilograms", "公斤", "千克"),
    _c("pounds", "unit", "unit", "lb", "lbs", "pound", "pounds"),
    _c("ml", "unit", "unit", "mL", "cc", "milliliter", "milliliters", "毫升"),
    _c("liters", "unit", "unit", "liter", "liters", "litre", "litres", "升"),
    _c("liter_symbol", "unit", "unit", "L", exact=True),  # "2 L"; exact, so "l" stays a word
    _c("mm_hg", "unit", "unit", "mmHg", "mm Hg", "mm/Hg", "毫米汞柱"),
    _c("mm_hour", "unit", "unit", "mm/hr", "mm/h", "mm per hour"),
    _c("bpm", "unit", "unit", "bpm", "beats per minute", "beats/min"),
    _c("per_minute", "unit", "unit", "per minute", "/min", "breaths per minute", "次/分", "次/分钟"),
    _c("celsius", "unit", "unit", "°C", "℃", "degrees C", "degrees Celsius", "degree Celsius", "摄氏度"),
    _c("fahrenheit", "unit", "unit", "°F", "degrees F", "degrees Fahrenheit"),
    _c("degrees", "unit", "unit", "degrees", "degree"),
    _c("cm", "unit", "unit", "cm", "centimeter", "centimeters", "厘米"),
    _c("mm", "unit", "unit", "mm", "millimeter", "millimeters", "毫米"),
    _c("units", "unit", "unit", "units", "IU"),
    # time
    _c("seconds", "unit", "unit", "seconds", "second", "secs", "sec", "秒"),
    _c("minutes", "unit", "unit", "minutes", "minute", "mins", "min", "分钟"),
    _c("hours", "unit", "unit", "hours", "hour", "hrs", "hr", "小时"),
    _c("days", "unit", "unit", "days", "day", "calendar days", "天", "日"),
    _c("business_days", "unit", "unit", "business days", "working days", "个工作日", "工作日"),
    _c("weeks", "unit", "unit", "weeks", "week", "周", "星期"),
    _c("months", "unit", "unit", "months", "month", "个月"),
    _c("years", "unit", "unit", "years", "year", "yrs", "周岁", "年"),
    # money and scale
    _c("scale_thousand", "unit", "unit", "thousand", "thousands", "千元"),
    _c("scale_million", "unit", "unit", "million", "millions", "mn"),
    _c("scale_billion", "unit", "unit", "billion", "billions", "bn"),
    _c("dollars", "unit", "unit", "dollars", "dollar", "USD"),
    _c("yuan", "unit", "unit", "元", "万元", "亿元", "RMB"),
    _c("basis_points", "unit", "unit", "basis points", "bps"),
    _c("times", "unit", "unit", "times", "倍"),
    _c("currency", "keyword", "currency", "$", "US$", "€", "£", "¥", "人民币"),
    # constraint words
    _c("at_most", "constraint", "constraint", "not exceed", "shall not exceed", "not to exceed", "no more than",
       "not more than", "at most", "up to", "maximum", "maximum of", "less than", "below", "under", "不超过",
       "不得超过", "最长", "最高", "以下"),
    _c("at_least", "constraint", "constraint", "no less than", "not less than", "at least", "minimum", "minimum of",
       "more than", "greater than", "above", "exceeds", "over", "不低于", "不得低于", "不少于", "至少", "最低", "以上"),
    _c("within", "constraint", "constraint", "within", "no later than", "prior to", "以内", "之内", "内"),
    # dates and reporting periods
    _c("month_name", "keyword", "date", "January", "February", "March", "April", "June", "July", "August",
       "September", "October", "November", "December", "Jan.", "Feb.", "Mar.", "Apr.", "Aug.", "Sept.", "Sep.", "Oct.",
       "Nov.", "Dec."),
    _c("quarter", "keyword", "date", "Q1", "Q2", "Q3", "Q4", "first quarter", "second quarter", "third quarter",
       "fourth quarter", "quarter", "季度", exact=False),
    _c("fiscal_year", "keyword", "date", "fiscal year", "fiscal", "FY", "财年", "年度"),
    # references to articles, sections and exhibits
    # (a reference numbers a part of a document; it is no quantity, and no cell is keyed on it)
    _c("article_ref", "keyword", "article", "Section", "Article", "Clause", "Exhibit", "Schedule", "Appendix",
       "Paragraph", "§", "第", "Sections", "Articles", "Clauses", "Exhibits", "Schedules", "Appendices",
       "Paragraphs", "Subsection", "Subsections", "Subparagraph", "Subparagraphs", "Annex", "Annexes",
       "Attachment", "Attachments", "Chapter", "Chapters", "Rule", "Rules"),
    # the same in financial reports, written as they are (a standard's number, a note, an item
    # of a filing, a level of the fair-value hierarchy: "ASC 842", "Note 12", "Level 2")
    _c("standard_ref", "keyword", "article", "ASC", "ASU", "IFRS", "IAS", "SFAS", "Topic", "Note", "Item", "Items",
       "Part", "Level", "Row", exact=True),
    # after a percentage, the word that makes it a share of a whole: "45% of revenues"
    _c("share_of", "other", SHARE_GROUP, "of"),
)
# fmt: on

# Seed units by quantity, each quantity a ladder from small to large (units on one rung are
# one unit written two ways). A unit written for its neighbour on the ladder — mg for mcg or
# g, mL for L, million for billion, days for weeks — is the error that keeps a value looking
# plausible, so `guards.unit_swaps` takes such a swap as plausible before any keyword
# shows it. Kept apart from the categories: it does not change how text lexes.
UNIT_LADDERS: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("mcg",), ("mg",), ("grams",), ("kg", "pounds")),
    (("ml",), ("liters", "liter_symbol")),
    (("mg_dl",), ("mmol_l", "meq_l")),
    (("g_dl",), ("g_l",)),
    (("mcg_kg",), ("mg_kg",)),
    (("mm",), ("cm",)),
    (("celsius", "fahrenheit"),),
    (("seconds",), ("minutes",), ("hours",), ("days", "business_days"), ("weeks",), ("months",), ("years",)),
    (("scale_thousand",), ("scale_million",), ("scale_billion",)),
)

# Words that stand before numbers without naming what the number measures.
STOPWORDS = frozenset(
    """a an the of to in on at by for with from and or but nor as is are was were be been being am has have had
    do does did this that these those it its it's he she they we you i his her their our your my me him them us
    which who whom whose what when where while if then than so such not no nor only also very about approximately
    around roughly nearly almost just into onto upon per each every any all some both either neither other another
    same further there here after before since until during between among through over under again once more most
    less least few many much can could would should will shall may might must up down out off new one two three
    four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen
    twenty thirty forty fifty sixty seventy eighty ninety hundred thousand total see page pages table note notes
    item items number numbers x mr mrs ms dr
    telephone phone tel fax facsimile suite avenue ave street st floor room box zip road rd drive blvd boulevard
    lane parkway highway plaza llp llc inc ltd corp
    monday tuesday wednesday thursday friday saturday sunday""".split()
)  # then words of addresses, phone numbers and firms, whose numbers identify, not measure; and weekdays,
# whose numbers are the hours or the date of that day ("Monday through Friday, 8 a.m.")

# Words that name a number. Kept out of keyword discovery (they are stop words: "two
# tablets"), but aggregation offers each as a keyword of its own group, `numeral`: a number
# written out and restated in digits — "thirty (30) days" — is a cell whose values are that
# number, if the corpus and the teacher say so.
NUMBER_WORDS = tuple(
    """one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen
    eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred""".split()
)

# "twenty-five" and "forty five" are one number each. Without them, "five" would be the
# number word before the 25 of "twenty-five (25) days", and a cell "five … number" would
# hold 25, 35, 45 besides 5 — too wide to notice "five (50) days".
NUMBER_WORD_COMPOUNDS = tuple(
    (f"{tens}_{unit}", (f"{tens}-{unit}", f"{tens} {unit}", f"{tens}- {unit}"))  # (a line broken at the hyphen)
    for tens in "twenty thirty forty fifty sixty seventy eighty ninety".split()
    for unit in "one two three four five six seven eight nine".split()
)


# A number written with a scale word and restated in digits: "one hundred twenty (120) days",
# "one hundred and eighty (180)", "two thousand fourteen (2014)". Read by `compound_numerals`.
_NUMBER_WORD = "(?:" + "|".join(sorted((*NUMBER_WORDS, "thousand"), key=len, reverse=True)) + ")"
_SCALED = re.compile(rf"(?<![\w-])({_NUMBER_WORD}(?:(?:[ -]|- )(?:and )?{_NUMBER_WORD})+) ?\( ?\$?\d", re.IGNORECASE)
COMPOUND_MIN = 2  # times a compound number word must be restated in a corpus to be one


def compound_numerals(texts: Iterable[str], min_count: int = COMPOUND_MIN) -> list[tuple[str, tuple[str, ...]]]:
    """The number words with a scale word ("hundred", "thousand") that `texts` restate in
    digits at least `min_count` times, as (category name, spellings): ("one_hundred_eighty",
    ("one hundred and eighty", "one hundred eighty")). Without them, "twenty" would be the
    number word before the 120 of "one hundred twenty (120) days" and "fourteen" the one
    before 2014, and a cell `twenty … number` would hold 20 and 120 — too wide to notice
    "twenty (200) days"; with them, each is a number of its own, whose cell notices "one
    hundred twenty (1200)". Spellings are lower-cased with single spaces; the name leaves
    out "and" and joins the words with "_"."""
    restated: Counter = Counter()  # per name
    spellings: dict[str, set[str]] = {}
    for text in texts:
        for m in _SCALED.finditer(text):
            words = m.group(1).lower().replace("- ", "-")
            parts = [w for w in re.split(r"[ -]+", words) if w]
            if ("hundred" in parts or "thousand" in parts) and written_number(words) is not None:
                name = "_".join(w for w in parts if w != "and")
                restated[name] += 1
                spellings.setdefault(name, set()).add(words)
    return [(name, tuple(sorted(ws))) for name, ws in sorted(spellings.items()) if restated[name] >= min_count]


def is_numeral_name(name: str) -> bool:
    """Whether a category's name is a number word's (`NUMERAL_NAMES`, or a compound that
    `compound_numerals` names: "one_hundred_eighty")."""
    parts = name.split("_")
    return name in NUMERAL_NAMES or (len(parts) > 1 and written_number(" ".join(parts)) is not None)


def restating(words: str) -> tuple[str, str]:
    """The literals of a number word as learning reads it: followed by the parenthesis that
    restates it in digits ("thirty (30) days", "thirty(30)"). A number word read anywhere —
    "one 30-minute infomercial", "Year Two and 60 units", a table's "Five $2,500,000" —
    restates nothing, and a cell `five … number` that read those would reject them."""
    return f"{words} (", f"{words}("


NUMERAL_KIND = "other"  # the class kind of number words (`Lexicon.with_numerals`)
# the names of the number-word categories (`Lexicon.with_numerals`)
NUMERAL_NAMES = frozenset(NUMBER_WORDS) | frozenset(name for name, _ in NUMBER_WORD_COMPOUNDS)


def numeral_value(literal: str) -> int | None:
    """The number a number word names ("thirty" 30, "forty-five" and "forty five" 45; read
    as the conflicts layer reads them, `heatc_runtime.reports.restated.written_number`), None for
    anything else. "hundred", a number word of its own here, names 100. The parenthesis of a
    learned number word's literal (`restating`) is not part of it."""
    literal = literal.rstrip("( \t\n")
    return 100 if literal.lower() == "hundred" else written_number(literal)


_IDENT = re.compile(r"[^a-z0-9]+")


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> ir.Program:
    """A lexicon's program: each stage of a run asks for the same few lexicons again (a
    compile costs seconds with a large keyword family), so the last ones are kept."""
    return compile_source(source, "<learned lexicon>")


@dataclass
class Lexicon:
    """The categories learning sees: the seed lexicon plus learned keywords."""

    categories: list[Category] = field(default_factory=lambda: list(SEED_CATEGORIES))
    chinese_numbers: bool = True

    def by_name(self) -> dict[str, Category]:
        return {c.name: c for c in self.categories}

    def literal_set(self) -> set[str]:
        """Every category's literals, lower-cased: what a new literal must not already be."""
        return {lit.lower() for c in self.categories for lit in c.literals}

    def groups(self) -> dict[str, str]:
        """Category name → its group (keyword, unit, constraint, …)."""
        return {c.name: c.group for c in self.categories}

    def source(self) -> str:
        """The rule-language text that declares every category (no rules)."""
        lines = ["options { chinese_numbers }"] if self.chinese_numbers else []
        for c in self.categories:
            literals = ", ".join(format_string(x) for x in c.literals)
            lines.append(f"class {c.name} {c.kind} {'exact ' if c.exact else ''}= {literals}")
        return "\n".join(lines) + "\n"

    def program(self, rules: str = "") -> ir.Program:
        return _compiled(self.source() + rules)

    def without_literals(self, literals: Iterable[str]) -> Lexicon:
        """Drop literals that hand-written rule files declare (a literal belongs to one class)."""
        drop = {x.lower() for x in literals}
        kept = []
        for c in self.categories:
            lits = tuple(x for x in c.literals if x.lower() not in drop)
            if lits:
                kept.append(Category(c.name, c.kind, c.group, lits, c.exact))
        return Lexicon(kept, self.chinese_numbers)

    def with_keywords(self, phrases: Iterable[str], group: str = "keyword", kind: str = "keyword") -> Lexicon:
        taken = {c.name for c in self.categories} | set(RESERVED_WORDS) | {MODEL_NAME_CLASS}
        seen = self.literal_set()
        added = []
        for phrase in phrases:
            if phrase.lower() in seen:
                continue
            seen.add(phrase.lower())
            base = _IDENT.sub("_", phrase.lower()).strip("_") or "keyword"
            if base[0].isdigit():
                base = "kw_" + base
            if base in RESERVED_WORDS:
                base += "_kw"  # "consistent", "lock", "number": words the rule language reserves
            name, k = base, 2
            while name in taken:
                name, k = f"{base}_{k}", k + 1
            taken.add(name)
            added.append(Category(name, kind, group, (phrase,)))
        return Lexicon(self.categories + added, self.chinese_numbers)

    def with_model_names(self, names: Iterable[str]) -> Lexicon:
        """The model names (`model_names`) that are no literal yet, added to the class
        `MODEL_NAME_CLASS` (made when there is none and a name to put in it)."""
        seen = self.literal_set()
        new = tuple(dict.fromkeys(n for n in names if n.lower() not in seen))
        if not new:
            return self
        if MODEL_NAME_CLASS not in self.by_name():
            return Lexicon(
                [*self.categories, Category(MODEL_NAME_CLASS, "other", "structure", new)], self.chinese_numbers
            )
        cats = [
            Category(c.name, c.kind, c.group, c.literals + new, c.exact) if c.name == MODEL_NAME_CLASS else c
            for c in self.categories
        ]
        return Lexicon(cats, self.chinese_numbers)

    def with_families(self, families: dict[str, list[str]]) -> Lexicon:
        """Each family (name → member keyword categories) as one keyword category holding its
        members' literals, in place of them (`guards.keyword_families`)."""
        member_of = {m: f for f, ms in families.items() for m in ms}
        by_name = self.by_name()
        kept = [c for c in self.categories if c.name not in member_of]
        added = [
            Category(f, "keyword", "keyword", tuple(lit for m in ms for lit in by_name[m].literals))
            for f, ms in families.items()
        ]
        return Lexicon(kept + added, self.chinese_numbers)

    def with_numerals(self, compounds: Iterable[tuple[str, tuple[str, ...]]] = ()) -> Lexicon:
        """Number words (`NUMBER_WORDS`, `NUMBER_WORD_COMPOUNDS`, and the `compounds` with a
        scale word a corpus writes, `compound_numerals`) as keywords of the group
        `numeral`, each number one category ("forty-five (" and "forty five (" alike), read
        where a parenthesis follows them (`restating`). Their class
        kind is `other`, not `keyword`: a gap does not skip a lexeme of the kind it binds
        (docs/semantics.md §3), and a number word is part of the value it restates — "notice
        of thirty (30) days" is notice's term, which a gap that died at "thirty" would lose."""
        taken = {c.name for c in self.categories}
        seen = {lit.lower().rstrip("( ") for c in self.categories for lit in c.literals}
        extra = [
            Category(name, NUMERAL_KIND, "numeral", tuple(r for w in words for r in restating(w)))
            for name, words in [(w, (w,)) for w in NUMBER_WORDS] + list(NUMBER_WORD_COMPOUNDS) + list(compounds)
            if name not in taken and not any(w in seen for w in words)
        ]
        return Lexicon(self.categories + extra, self.chinese_numbers)


@dataclass
class SentenceLexemes:
    """A sentence's lexemes with their categories (None: a plain word or other-token)."""

    text: str
    lexemes: list[Lexeme]
    categories: list[str | None]

    def is_value(self, i: int) -> bool:
        return self.lexemes[i].code in ir.VALUE_CODES

    def value_category(self, i: int) -> str:
        """number | percent | date (a date's value is its year)."""
        return ir.LEXEME_NAMES[self.lexemes[i].code]


def lex_sentence(program: ir.Program, text: str) -> SentenceLexemes:
    lexemes = lex(program, text.encode())
    return SentenceLexemes(text, lexemes, [category_of(program, x.code) for x in lexemes])


def category_of(program: ir.Program, code: int) -> str | None:
    """The category (class) name of a literal lexeme code; None for words, numbers, others."""
    if code < ir.LEX_LITERAL0:
        return None
    return program.classes[program.literals[code - ir.LEX_LITERAL0].class_id].name


def align(s: SentenceLexemes, offsets: list[tuple[int, int]]) -> list[list[int]]:
    """For each lexeme, the teacher token positions whose character spans overlap it."""
    data = s.text.encode()
    char_at = _char_offsets(data)
    spans = [(char_at[x.start], char_at[x.end]) for x in s.lexemes]
    out: list[list[int]] = [[] for _ in spans]
    for t, (a, z) in enumerate(offsets):
        if z <= a:
            continue
        for k, (ls, le) in enumerate(spans):
            if a < le and ls < z:
                out[k].append(t)
    return out


def _char_offsets(data: bytes) -> list[int]:
    out, c = [], 0
    for b in range(len(data)):
        out.append(c)
        if b + 1 == len(data) or (data[b + 1] & 0xC0) != 0x80:
            c += 1
    out.append(c)
    return out
