"""The module ABI as data, defined here once (docs/abi.md): versions, the fixed memory map, the
control block, the record layouts (events, snapshots, the fixed part of a state record and
its sub-records, the packed rule tables, rules.hct's header), the lexeme codes and flag bits
a kernel reads, status and verdict codes.

Every reader takes it from here: this runtime (checker, batch, records); the compiler
(`heatc.ir`'s codes and state layout, `heatc.wasm`'s pack and codegen, and the kernel
template, rendered with `constants()`); the Node.js host, through runtime/js/abi.mjs; C and
C++, the native and CUDA core included, through cuda_bridge/include/heatc_abi.h. Both files
are generated from here by heatc_runtime.abi_export (`make abi` writes them) and
tests/test_abi.py checks that they are current and that every reader agrees. Guard's
decision's constants are here too: the C++ core reads them through the header.

Public surface: the constants below, `Record`, `check_abi(where, major, minor)`,
`constants() -> dict[str, int]`, `HASH_CONSTANTS`.
"""

from __future__ import annotations

import struct

from .errors import ModuleError

#: The ABI this runtime speaks: same major, minor up to this one.
# 4: RULE.observe (an observe-only rule's rejections leave the state's `rejections` alone: the
#    rule record grew, 3.x tables do not read);
# 3: ELEMENT.convert and .units, UNIT_CONVERSION (quantities: the element record grew again);
# 2: ELEMENT.places, `places(v)` (the element record grew: 1.x tables do not read)
ABI_MAJOR = 4
ABI_MINOR = 0

# --- the memory map: fixed regions below the tables ----------------------------------------

CONTROL = 0x100  #: the control block (`CONTROL_BLOCK`), exported as the global `control`
SHA_W = 0x200  #: 256 bytes: the sha256 message schedule (anchors)
TMP_THREAD = 0x300  #: a thread record (`THREAD` + captures) for rules of one element
SCRATCH = 0x800  #: the anchor run text and sha256 message; the tables follow, aligned
TABLES_ALIGN = 64
PAGE = 65536


class Record:
    """A little-endian record layout: named fields in order, each with its struct code
    (`B` u8, `H` u16, `I` u32, `i` i32, `Q` u64, `d` f64, `Ns` N bytes). Every field is at its
    natural alignment; fields whose name starts with `_` are padding. `tail` names what
    follows the record when something of variable length does (an event's captures)."""

    def __init__(self, name: str, prefix: str, fields: tuple[tuple[str, str], ...], tail: str = "") -> None:
        self.name, self.prefix, self.fields, self.tail = name, prefix, fields, tail
        self.struct = struct.Struct("<" + "".join(code for _, code in fields))
        self.size = self.struct.size
        self.offsets: dict[str, int] = {}
        for i, (field, code) in enumerate(fields):
            offset = struct.calcsize("<" + "".join(c for _, c in fields[:i]))
            assert code.endswith("s") or offset % struct.calcsize(code) == 0, f"{name}.{field} is misaligned"
            self.offsets[field] = offset
        self.names = tuple(field for field, _ in fields)

    def offset(self, name: str) -> int:
        return self.offsets[name]

    def position(self, name: str) -> int:
        """The field's index in a tuple that `self.struct` unpacks."""
        return self.names.index(name)

    def constants(self) -> dict[str, int]:
        """PREFIX_FIELD = byte offset for every named field, and PREFIX_TAIL (or PREFIX_SIZE)."""
        out = {f"{self.prefix}_{name.upper()}": off for name, off in self.offsets.items() if not name.startswith("_")}
        out[f"{self.prefix}_{(self.tail or 'size').upper()}"] = self.size
        if not self.tail and self.size & (self.size - 1) == 0:
            out[f"{self.prefix}_SHIFT"] = self.size.bit_length() - 1  # for a kernel's index × size
        return out


# --- the control block ----------------------------------------------------------------------

#: The control block's u32 words, in order (docs/abi.md, "Control block").
CONTROL_FIELDS = ("ev_ptr", "ev_cap", "ev_count", "snap_ptr", "snap_cap", "snap_count",
                  "tok_offsets", "n_tokens", "tok_bytes", "status", "bad_index", "scratch", "quiet")  # fmt: skip
CONTROL_BLOCK = Record("control", "CTL", tuple((name, "I") for name in CONTROL_FIELDS))
# word indices, for hosts that view the block as u32[]
EV_COUNT = CONTROL_FIELDS.index("ev_count")
SNAP_COUNT = CONTROL_FIELDS.index("snap_count")
STATUS = CONTROL_FIELDS.index("status")
QUIET = CONTROL_FIELDS.index("quiet")

#: What the `status` word says (the kernel sets it, the host clears it).
STATUS_OK, STATUS_BAD_TOKEN, STATUS_FINISHED = 0, 1, 2
STATUS_TEXT = {
    STATUS_BAD_TOKEN: "a token id is out of range for the token table",
    STATUS_FINISHED: "the stream is finished; reset it first",
}

# --- records the kernel writes for the host ------------------------------------------------

#: An event: a match (index = the rule, in IR order) or an anchor (index = the anchor group);
#: failed requirement and conflicting channel slot, or NO_INDEX; the conflicting channel's
#: value and the span that set it. One f64 per capture follows.
EVENT = Record("event", "EV", (
    ("seq", "I"), ("kind", "B"), ("verdict", "B"), ("_pad0", "H"), ("index", "I"), ("failed", "i"),
    ("start", "Q"), ("end", "Q"), ("conflict", "i"), ("_pad1", "I"),
    ("conflict_value", "d"), ("conflict_start", "Q"), ("conflict_end", "Q"),
), tail="captures")  # fmt: skip
EVENT_MATCH, EVENT_ANCHOR = 0, 1
NO_INDEX = -1  #: no failed requirement, no conflict, no gate, no capture, no key

#: A snapshot: seq, the events of this sequence it covers (the next that many in buffer
#: order), whether it is final, then the counters; one verdict byte per rule follows.
#: `rejections` counts the rejections a policy acts on: REJECTED matches of rules that are not
#: observe-only (RULE.observe); the events and verdicts report every rule's.
SNAPSHOT_COUNTERS = ("bytes", "lexemes", "tokens", "matches", "rejections")
SNAPSHOT = Record("snapshot", "SNAP", (
    ("seq", "I"), ("events", "I"), ("final", "I"), ("pad", "I"), *((name, "Q") for name in SNAPSHOT_COUNTERS),
), tail="verdicts")  # fmt: skip

#: Verdict codes, by severity (snapshot bytes, `verdicts()`, event records).
VERDICT_NAMES = ("CONFIRMED", "PENDING", "REJECTED")
VERDICT_CONFIRMED = 0
VERDICT_PENDING = 1
VERDICT_REJECTED = 2
VERDICT_NONE = 255  #: an anchor event's verdict byte

# --- the state record ----------------------------------------------------------------------

#: The fixed head of every state record (heatc.ir.state_layout lays out the rest, per
#: program): counters and the lexer's state; the lexer's look-back buffer follows.
STATE_HEAD = Record("state_head", "ST", (
    ("pos", "Q"), ("lexemes", "Q"), ("tokens", "Q"), ("matches", "Q"), ("rejections", "Q"),
    ("tok_start", "Q"), ("last_end", "Q"),
    ("dfa_state", "I"), ("buf_len", "I"), ("last_tok", "I"), ("last_len", "I"), ("pend_tok", "I"),
    ("pend_fallback", "I"), ("pend_len", "I"), ("flags", "I"), ("pending_events", "I"), ("n_active", "I"),
), tail="buf")  # fmt: skip
STATE_FINISHED = 1  #: `flags` bit: the stream is finished
#: Per rule: verdict bit and match count; one thread slot per element after the first follows.
RULE_STATE = Record("rule_state", "RS", (("rejected", "I"), ("matches", "I")), tail="slots")
#: A thread slot: live flag, gaps skipped since its last element, span start; one f64 per
#: capture follows (the rule record's `slot_size` is the whole slot's size).
THREAD = Record(
    "thread", "TH", (("active", "B"), ("gaps", "B"), ("_pad0", "H"), ("_pad1", "I"), ("start", "Q")), tail="captures"
)
#: A channel slot: whether it is set, its value, the span of the match that set it.
CHANNEL_STATE = Record("channel_state", "CH", (("set", "Q"), ("value", "d"), ("start", "Q"), ("end", "Q")))
#: The longest lexeme in bytes: the lexer's look-back buffer, an anchor ring entry's text.
MAX_LEXEME = 64
#: An entry of the anchor ring: span start, whitespace before it, text length; the
#: normalised text follows (max_lexeme bytes; entries 8-aligned).
ANCHOR_ENTRY = Record("anchor_entry", "AE", (("start", "Q"), ("space_before", "B"), ("len", "B")), tail="text")
#: An anchor ring entry's size in a state record: the entry and MAX_LEXEME bytes, 8-aligned.
RING_ENTRY = -(-(ANCHOR_ENTRY.size + MAX_LEXEME) // 8) * 8

# --- codes the kernel reads from the tables -------------------------------------------------

# Lexeme codes the lexer automaton accepts; a lexeme's symbol is its lexeme code.
LEX_NONE = 0
LEX_SPACE = 1  # not a lexeme
LEX_OTHER = 2
LEX_WORD = 3
LEX_NUMBER = 4
LEX_PERCENT = 5
LEX_DATE = 6  # a calendar date or a month of a year; its value is the year (docs/semantics.md §2)
LEX_LITERAL0 = 8  # literal i has lexeme code LEX_LITERAL0 + i

# Per-lexeme-code flags (heatc.ir.Program.code_flags, the packed `code_flags` table).
FLAG_TRIGGER = 1  # publish a snapshot after this lexeme
FLAG_BARRIER = 2  # gaps never skip this lexeme
FLAG_STARTS = 4  # some rule's first element accepts this token (lets kernels skip the rest)
FLAG_ANCHOR_MEMBER = 8  # a literal whose normalised text occurs in some anchor term
FLAG_ANCHOR_END = 16  # ... and ends one
# Lexeme kinds (heatc.ir.Program.code_kinds, the packed `code_kinds` table), one bit each; a
# rule's element records which kinds its gap never skips (the rule record's `blocks`).
KIND_VALUE = 1  # number, percent, date
KIND_UNIT = 2
KIND_KEYWORD = 4
KIND_CONSTRAINT = 8
KIND_PUNCT = 16

#: A two-digit year of a date below this is in the 2000s, else in the 1900s (POSIX %y).
YEAR_PIVOT = 69

#: Kernel-only (set by the packer, not the IR): the code may begin a late-starting rule, so
#: a kernel keeps such a lexeme as its look-behind (heatc.ir.starts_late).
FLAG_LOOK = 32

#: Requirement operators, numbered in this order in the packed requirement records.
OPS = ("<", "<=", ">", ">=", "==", "!=", "in")
OP_NAMES = ("LT", "LE", "GT", "GE", "EQ", "NE", "IN")

#: A lexer automaton row's last u32, its accept word: lexeme code (bits 0–14), whether it
#: waits for a word-boundary byte (bit 15), the fallback code when the boundary fails (16–31).
DFA_CODE_MASK = 0x7FFF
DFA_BOUNDARY = 0x8000
DFA_FALLBACK_SHIFT = 16

# --- the skipper's tables (heatc.wasm.skipper writes them; kernels read them) --------------

#: The `skip_plain` section: the plain-byte nibble table for any stream at 0, for a quiet
#: stream at SKIP_PLAIN_QUIET, a high nibble's bit (1, 2, 4 … 128, then zeros) at
#: SKIP_NIBBLE_BITS, then the word fingerprints, the CJK fingerprints and the CJK table.
SKIP_PLAIN_QUIET = 16
SKIP_NIBBLE_BITS = 32
WORD_FINGERPRINT_BUCKETS = 8
SKIP_WORD_FINGERPRINTS = 48
SKIP_CJK_FINGERPRINTS = SKIP_WORD_FINGERPRINTS + 2 * 2 * 16 * WORD_FINGERPRINT_BUCKETS // 8
SKIP_CJK_TABLE = SKIP_CJK_FINGERPRINTS + 3 * 4 * 16
#: The `skip_words` section of a table of 2^log2 slots: each part at slots × its bytes per
#: slot from the section's start (the filter bits, the u64 keys, the u64 next-word prefixes,
#: the horizons; `size` the whole).
SKIP_WORDS_PER_SLOT = {"filter": 0, "slots": 4, "nexts": 12, "horizons": 20, "size": 21}
#: A word key's multiplier into its table's slot (64-bit: `HASH_CONSTANTS`), a CJK key's.
SKIP_KEY_MUL = 0x9E3779B97F4A7C15
CJK_KEY_MUL = 0x9E3779B1
#: The three-byte continuations a CJK table entry lists; the longest gap a weak start's
#: horizon covers (a byte).
CJK_CONTINUATIONS = 40
WEAK_HORIZON_MAX = 255
#: Digit runs: the longest a skipper counts as a number (one i64 load), the most plain bytes
#: that may extend a number, the heads of a year written alone (1900–2199).
DIGIT_RUN_MAX = 8
DIGIT_EXTENDERS_MAX = 4
YEAR_HEADS = (b"19", b"20", b"21")
#: The anchor prefilter's hash, FNV-1a-64 (heatc.semantics.lexing.anchor_filter_hash).
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
#: The 64-bit constants a core reads (C writes them as `…ull`; JavaScript has no such number).
HASH_CONSTANTS = {"SKIP_KEY_MUL": SKIP_KEY_MUL, "FNV_OFFSET": FNV_OFFSET, "FNV_PRIME": FNV_PRIME}

#: The Chinese-numeral table: (codepoint, kind << 16 | value), sorted by codepoint.
CN_ENTRY = Record("cn_entry", "CNE", (("codepoint", "I"), ("code", "I")))
CN_KIND_DIGIT, CN_KIND_SMALL, CN_KIND_BIG, CN_KIND_POINT = 1, 2, 3, 4
CN_KIND_SHIFT = 16
#: The anchor domains' index: (offset into domain_bytes, length) per domain.
DOMAIN_ENTRY = Record("domain_entry", "DOM", (("offset", "I"), ("len", "I")))

# --- the packed rule records (docs/abi.md, "Tables"); offsets `…s` are from the record ----

#: `observe`: 1 for an observe-only rule (ir.Rule.observe): its rejection is an event with its
#: REJECTED verdict and sets its verdict, but does not raise the state's `rejections` — the
#: count the engines act on (stop, guard, drafts) counts only the rules a policy acts on.
RULE = Record("rule", "RULE", (
    ("n_elements", "I"), ("n_captures", "I"), ("gate", "i"), ("state_off", "I"), ("n_requirements", "I"),
    ("n_channels", "I"), ("elements", "I"), ("requirements", "I"), ("channels", "I"), ("slot_size", "I"),
    ("late", "I"), ("blocks", "I"), ("observe", "I"),
))  # fmt: skip
#: `places`: the capture slot that takes the digits the value writes after its point, or -1.
#: `convert`: for a quantity's unit, the capture slot its lexeme converts, or -1; `units` then
#: the offset *from this element record* of its `n_accepts` UNIT_CONVERSION records.
ELEMENT = Record("element", "EL", (
    ("gap", "I"), ("accepts", "I"), ("n_accepts", "I"), ("capture", "i"), ("places", "i"), ("convert", "i"),
    ("units", "I"),
))  # fmt: skip
#: A quantity unit's conversion (heatc.units): the slot becomes ((v + pre) * mul) / div when
#: the element accepts lexeme `code`; 8-aligned.
UNIT_CONVERSION = Record("unit_conversion", "UC", (
    ("code", "I"), ("_pad", "I"), ("pre", "d"), ("mul", "d"), ("div", "d"),
))  # fmt: skip
#: low ≤ v ≤ high for `in`, each bound's `closed` an all-ones or zero u64 (one v128 mask).
REQUIREMENT = Record("requirement", "REQ", (
    ("op", "I"), ("left", "i"), ("right", "i"), ("_pad", "I"), ("left_const", "d"), ("right_const", "d"),
    ("low", "d"), ("high", "d"), ("low_closed", "Q"), ("high_closed", "Q"),
))  # fmt: skip
CHANNEL_USE = Record("channel_use", "CU", (
    ("channel", "I"), ("capture", "I"), ("key", "i"), ("n_keys", "I"), ("keys", "I"), ("factor", "I"),
))  # fmt: skip

# --- rules.hct, the CUDA bridge's tables (docs/heatmap.md, "rules.hct") ------------------

HCT_MAGIC = b"HEATCRUL"
HCT_VERSION = 3
HCT_HEADER = Record("hct_header", "HCTH", (
    ("magic", "8s"), ("version", "I"), ("abi_major", "I"), ("abi_minor", "I"), ("n_rules", "I"),
    ("state_size", "I"), ("blob_size", "I"), ("l2_end", "Q"), ("device_end", "Q"), ("blob_sha256", "32s"),
    ("n_sections", "I"),
), tail="sections")  # fmt: skip
HCT_SECTION = Record("hct_section", "HCTS", (("name", "16s"), ("offset", "I")))  # name truncated to 16 bytes
#: After the section table: a u32 count, then one parameter record per name in HCT_VALUES.
HCT_PARAM = Record("hct_param", "HCTP", (("name", "24s"), ("value", "I")))
#: The per-program parameters rules.hct holds by name: what a core needs besides the tables
#: (record sizes, the program's constants, the state record's field offsets; 0 when absent).
HCT_VALUES = (
    "state_size", "event_size", "snapshot_size", "n_rules", "n_codes", "dfa_width", "dfa_words", "max_lexeme",
    "plm", "window", "late", "anchor_lexemes", "n_groups", "anchor_size", "filter_bits", "n_domains", "n_cn",
    "max_captures", "n_channels", "word_row", "skip_log2", "skip_cjk", "skip_weak", "skip_digits", "digit_extenders",
    "off_pos", "off_lexemes", "off_tokens", "off_matches", "off_rejections", "off_tok_start", "off_last_end",
    "off_dfa_state", "off_buf_len", "off_last_tok", "off_last_len", "off_pend_tok", "off_pend_fallback",
    "off_pend_len", "off_flags", "off_pending_events", "off_n_active", "off_buf", "off_active_rules",
    "off_look_mark", "off_look_start", "off_look_code", "off_look_len", "off_look_buf", "off_anchor_count",
    "off_anchor_head", "off_ring", "off_anchor_active", "off_channels",
)  # fmt: skip
#: The sections of the blob a core reads; their offsets follow HCT_VALUES in HCT_PARAMS, as `t_<name>`.
HCT_TABLES = (
    "byte_class", "dfa", "code_flags", "inert", "literal_class", "start_off", "start_rules", "rules", "rule_off",
    "anchor_keys", "anchor_groups", "anchor_filter", "anchor_end_filter", "anchor_member_filter", "domain_index",
    "domain_bytes", "pow10", "cn_table", "sha256_k", "skip_plain", "skip_words", "code_kinds",
)  # fmt: skip
#: Sections only some programs have (0 when absent: the skipper's, heatc.wasm.skipper).
HCT_OPTIONAL_TABLES = ("skip_plain", "skip_words")
#: Parameters a file may lack (0 when absent: a rules.hct written before them runs without
#: those parts of the skipper): its CJK table's log2 size, whether it has weak starts, its
#: digit runs (HCT_DIGITS_* bits) and the bytes that may extend a number (one a byte, low first).
HCT_OPTIONAL_VALUES = ("skip_cjk", "skip_weak", "skip_digits", "digit_extenders")
#: `skip_digits`: digit runs are counted; with one `.` between digits; a `%` right after a run;
#: stopping before a year written alone; and, shifted left by i, extender i (byte i of
#: `digit_extenders`) extends a number only when a digit follows (heatc.wasm.digits.digit_runs)
HCT_DIGITS_ON, HCT_DIGITS_DECIMALS, HCT_DIGITS_PERCENT, HCT_DIGITS_YEARS = 1, 2, 4, 8
HCT_DIGITS_BEFORE_DIGIT = 16
#: The order of a core's parameter array (heatc_program.p; HEATC_P_<NAME> in C).
HCT_PARAMS = HCT_VALUES + tuple(f"t_{name}" for name in HCT_TABLES)

RECORDS = (CONTROL_BLOCK, EVENT, SNAPSHOT, STATE_HEAD, RULE_STATE, THREAD, CHANNEL_STATE, ANCHOR_ENTRY,
           CN_ENTRY, DOMAIN_ENTRY, RULE, ELEMENT, UNIT_CONVERSION, REQUIREMENT, CHANNEL_USE, HCT_HEADER, HCT_SECTION,
           HCT_PARAM)  # fmt: skip


def constants() -> dict[str, int]:
    """Every constant of the ABI by name: what the kernel template is rendered with (as
    `ABI.NAME`) and what the generated JS and C files define. A name is defined once."""
    groups: list[dict[str, int]] = [
        {"ABI_MAJOR": ABI_MAJOR, "ABI_MINOR": ABI_MINOR, "HCT_VERSION": HCT_VERSION},
        {"CONTROL": CONTROL, "SHA_W": SHA_W, "TMP_THREAD": TMP_THREAD, "SCRATCH": SCRATCH},
        {"TABLES_ALIGN": TABLES_ALIGN, "PAGE": PAGE},
        *(record.constants() for record in RECORDS),
        {"STATUS_OK": STATUS_OK, "STATUS_BAD_TOKEN": STATUS_BAD_TOKEN, "STATUS_FINISHED": STATUS_FINISHED},
        {"EVENT_MATCH": EVENT_MATCH, "EVENT_ANCHOR": EVENT_ANCHOR, "NO_INDEX": NO_INDEX},
        {f"VERDICT_{name}": code for code, name in enumerate(VERDICT_NAMES)},
        {"VERDICT_NONE": VERDICT_NONE, "STATE_FINISHED": STATE_FINISHED},
        {name: value for name, value in globals().items() if name.startswith(("LEX_", "FLAG_", "CN_KIND_", "KIND_"))},
        {"YEAR_PIVOT": YEAR_PIVOT, "MAX_LEXEME": MAX_LEXEME, "RING_ENTRY": RING_ENTRY},
        {
            name: value
            for name, value in globals().items()
            if name.startswith(("SKIP_", "CJK_", "WEAK_", "DIGIT_", "HCT_DIGITS_"))
            and isinstance(value, int)
            and name != "SKIP_KEY_MUL"
        },
        {f"SKIP_WORDS_{part.upper()}": per for part, per in SKIP_WORDS_PER_SLOT.items()},
        {f"OP_{name}": code for code, name in enumerate(OP_NAMES)},
        {"DFA_CODE_MASK": DFA_CODE_MASK, "DFA_BOUNDARY": DFA_BOUNDARY, "DFA_FALLBACK_SHIFT": DFA_FALLBACK_SHIFT},
    ]
    out: dict[str, int] = {}
    for group in groups:
        twice = out.keys() & group.keys()
        assert not twice, f"ABI constants defined twice: {sorted(twice)}"
        out |= group
    return out


def check_abi(where: str, major: int, minor: int) -> None:
    if major != ABI_MAJOR or minor > ABI_MINOR:
        raise ModuleError(
            f"{where}: module ABI {major}.{minor} is not supported by this runtime "
            f"(it runs ABI {ABI_MAJOR}.0 to {ABI_MAJOR}.{ABI_MINOR}); rebuild the module with a matching heatc"
        )


# --- guard's decision (heatc_runtime.engines.guarding carries it out in Python, the C++ core
# through the C header) -----------------------------------------------------------------------

PROBES = (b"0", b"9", b"00", b"99", b"000", b"999", b".9")
"""What guard appends to a number left open, looking for one way it could still be accepted."""
AS_NUMBER = b".0"
"""What guard appends to text that ends in a year's digits to read them as the number they spell."""
TAIL = 8
"""Bytes of each sequence's text the decision reads (right-aligned, zero where the text has none:
a zero byte is neither a digit nor "." nor ",", so it reads as the start of the text)."""
YEAR_CENTURIES = (b"19", b"20", b"21")
"""A year written alone, 1900–2199, as heatc's lexer reads one (heatc/lang/lexicon.py; a test
holds the two to each other)."""
# what a token does to the value a text is writing (Tails.value_marks; the C++ core's tail_mark)
VALUE_BEGINS, VALUE_ENDS = 1, 2
# the candidate mask's codes, as every backend writes them
# (MASK_UNTRIED: under greedy decoding, a candidate below the first that passed, not judged)
MASK_ALLOWED, MASK_REJECTED, MASK_REFUSED, MASK_UNTRIED = 0, 1, 2, 3
