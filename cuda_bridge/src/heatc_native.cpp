// heatc_runtime._native: the core (heatc_core.h) on the CPU, as a CPython extension.
//
// A Module holds one program's tables and a linear memory laid out like the WASM module's
// (control block, event and snapshot buffers, token table, state arrays, input), so the
// runtime's Checker and Batch drive it exactly as they drive the WASM instance: every entry
// point takes and returns the WASM exports' u32 offsets. Every offset is checked against the
// memory before use, and the tables are checked once at load, so nothing a caller passes
// can make the core read or write outside them.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HEATC_WITH_SKIPPER 1
#include "heatc_core.h"
#include "heatc_kernels.h"

#include "heatc_skipper.h"
#include "heatc_topk.h"
#include "heatc_audit_json.h"

namespace heatc {

// the skipper's implementation for this machine (the fastest it has; `skipper(name)` picks another)
static skip::Isa skip_isa = skip::ISA_NONE;
static skip::SkipFn skip_fn = nullptr;

uint32_t skip_plain(const Program& g, const Io& io, uint8_t* s, const uint8_t* in, uint32_t i, uint32_t len,
                    uint64_t* tok_start, uint64_t* lexemes) {
  if (!skip_fn) return i;  // (none: the automaton reads everything)
  if (io.skip_configs)
    return skip_fn(((const skip::Config*)io.skip_configs)[io.quiet != 0], s, in, i, len, tok_start, lexemes);
  return skip_fn(skip::config(g, io.quiet != 0), s, in, i, len, tok_start, lexemes);
}

}  // namespace heatc

namespace {

using heatc::ld;

enum Fn { RESET, FORK, FEED, FINISH, SNAPSHOT, SCAN, VERDICTS, STEP_BATCH, RESET_BATCH, SNAPSHOT_BATCH, FINISH_BATCH, N_FN };
const char* const FN_NAMES[N_FN] = {"reset",   "fork",       "feed",        "finish",         "snapshot",    "scan",
                                    "verdicts", "step_batch", "reset_batch", "snapshot_batch", "finish_batch"};
const int FN_ARGS[N_FN] = {1, 2, 5, 2, 2, 4, 2, 4, 2, 3, 3};

struct Module {
  PyObject_HEAD
  heatc::Program prog;
  uint8_t* tables;  // owned copy of the blob
  uint32_t tables_size;
  uint8_t* mem;  // reserved once (never moves); `size` bytes of it are the visible memory
  size_t reserved;
  uint64_t size;
  uint64_t committed;  // bytes from `mem` readable and writable (the rest of the reservation is not)
  Py_ssize_t exports;  // buffer views of the memory alive (it is unmapped only when none is)
  int closed;          // close(): every call refuses, the memory goes with the last view
  uint32_t control;
  uint64_t step_limit;  // the most steps one call may take (0: only the automatic budget, steps())
  PyObject* trap;      // the exception raised for a bad offset (heatc_runtime.ModuleTrap)
  uint8_t* scratch;    // guard's scratch slot (a state record and an event record), made when first needed
  uint32_t* rule_states;  // per rule its state's offset, | 1 << 31 if it starts late (heatc::Io::rule_states)
  uint16_t* dfa16;     // the automaton's target states and states' accept words (heatc::Io::dfa16,
  uint32_t* accepts;   // ::accepts), where it has at most 2^16 states; else null
  heatc::skip::Config skip_configs[2];  // the skipper's view of the program, for a stream and a quiet one
  uint8_t* late_only;  // its late-only keywords (skip::late_only_codes), a byte per code; null if none
};

struct Call {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  Module* module;
  int fn;
  int bound;  // 1: args[] are fixed
  uint32_t args[5];
};

PyTypeObject ModuleType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject CallType = {PyVarObject_HEAD_INIT(nullptr, 0)};

#define P(name) (m->prog.p[HEATC_P_##name])

bool in_mem(const Module* m, uint64_t off, uint64_t len) { return off <= m->size && len <= m->size - off; }

int trap(Module* m, const char* what) {
  PyErr_Format(m->trap, "the native module was passed an offset outside its memory (%s)", what);
  return -1;
}

uint32_t* ctl(Module* m) { return (uint32_t*)(m->mem + m->control); }
// a word of the control block `c` (the ABI gives its fields as byte offsets)
#define CTL(name) (c[HEATC_CTL_##name / 4])

// the control block as pointers, each range checked
int load_io(Module* m, heatc::Io& io, bool tokens) {
  uint32_t* c = ctl(m);
  io.ev_cap = CTL(EV_CAP);
  io.ev_count = CTL(EV_COUNT);
  io.snap_cap = CTL(SNAP_CAP);
  io.snap_count = CTL(SNAP_COUNT);
  if (!in_mem(m, CTL(EV_PTR), (uint64_t)io.ev_cap * P(EVENT_SIZE)) || io.ev_count > io.ev_cap)
    return trap(m, "event buffer");
  if (!in_mem(m, CTL(SNAP_PTR), (uint64_t)io.snap_cap * P(SNAPSHOT_SIZE)) || io.snap_count > io.snap_cap)
    return trap(m, "snapshot buffer");
  io.ev = m->mem + CTL(EV_PTR);
  io.snap = m->mem + CTL(SNAP_PTR);
  io.ev_keep = io.ev_cap;
  io.snap_keep = io.snap_cap;
  io.ev_scratch = nullptr;
  io.n_tokens = 0;
  io.tok_offsets = nullptr;
  io.tok_bytes = nullptr;
  io.tok_total = 0;
  if (tokens && CTL(N_TOKENS)) {
    if (!in_mem(m, CTL(TOK_OFFSETS), 4 * ((uint64_t)CTL(N_TOKENS) + 1)) ||
        CTL(TOK_OFFSETS) % 4 || !in_mem(m, CTL(TOK_BYTES), 0))
      return trap(m, "token table");
    io.n_tokens = CTL(N_TOKENS);
    io.tok_offsets = (const uint32_t*)(m->mem + CTL(TOK_OFFSETS));
    io.tok_bytes = m->mem + CTL(TOK_BYTES);
    io.tok_total = (uint32_t)(m->size - CTL(TOK_BYTES));
  }
  io.status = 0;
  io.bad_index = 0;
  io.quiet = CTL(QUIET);
  io.dfa16 = m->dfa16;
  io.rule_states = m->rule_states;
  io.accepts = m->accepts;
  io.skip_configs = P(SKIP_LOG2) ? m->skip_configs : nullptr;
  return 0;
}

// A call's step budget (heatc::Io::steps_left) for `bytes` of input: on tables that pass
// check_tables the lexer's slow path takes at most about max_lexeme + 3 steps per byte it
// reads (each byte is lexed again at most once per token emitted before it, and a token
// holds at most max_lexeme bytes), the bytes a state carries in counted too; this allows
// twice that. A Module's step_limit (Limits.fuel) lowers it.
uint64_t steps(const Module* m, uint64_t bytes) {
  uint64_t cap = P(MAX_LEXEME), budget = (bytes + 2 * cap + 16) * (2 * cap + 8);
  return m->step_limit && m->step_limit < budget ? m->step_limit : budget;
}

int out_of_steps(Module* m) {
  if (m->step_limit)
    PyErr_Format(m->trap, "out of fuel: the native core took more than %llu steps in one call (Limits.fuel)",
                 (unsigned long long)m->step_limit);
  else
    PyErr_SetString(m->trap,
                    "the native core made no progress: a call took more steps than its input allows "
                    "(the tables are not a working heatc program)");
  return -1;
}

uint32_t token_bytes(const heatc::Io& io, uint32_t id) {
  if (id >= io.n_tokens) return 0;
  uint32_t a = io.tok_offsets[id], b = io.tok_offsets[id + 1];
  return a <= b ? b - a : 0;
}

void store_io(Module* m, const heatc::Io& io) {
  uint32_t* c = ctl(m);
  CTL(EV_COUNT) = io.ev_count;
  CTL(SNAP_COUNT) = io.snap_count;
  if (io.status) {
    CTL(STATUS) = io.status;
    CTL(BAD_INDEX) = io.bad_index;
  }
}

// one entry point, with the WASM export's arguments; -1 with an exception set on a bad offset
int64_t dispatch(Module* m, int fn, const uint32_t* a) {
  if (m->closed) {
    PyErr_SetString(m->trap, "the native module was closed");
    return -1;
  }
  const heatc::Program& g = m->prog;
  const uint32_t ss = P(STATE_SIZE);
  heatc::Io io;
  switch (fn) {
    case RESET:
      if (!in_mem(m, a[0], ss)) return trap(m, "state");
      heatc::reset(g, m->mem + a[0]);
      return 0;
    case FORK:
      if (!in_mem(m, a[0], ss) || !in_mem(m, a[1], ss)) return trap(m, "state");
      memmove(m->mem + a[0], m->mem + a[1], ss);
      return 0;
    case VERDICTS:
      if (!in_mem(m, a[0], ss) || !in_mem(m, a[1], P(N_RULES))) return trap(m, "state");
      heatc::verdicts(g, m->mem + a[0], m->mem + a[1]);
      return 0;
    case RESET_BATCH:
      if (!in_mem(m, a[0], (uint64_t)a[1] * ss)) return trap(m, "states");
      for (uint32_t i = 0; i < a[1]; i++) heatc::reset(g, m->mem + a[0] + (uint64_t)i * ss);
      return 0;
    default:
      break;
  }
  if (load_io(m, io, fn == STEP_BATCH) < 0) return -1;
  io.steps_left = steps(m, 0);
  int64_t out = 0;
  switch (fn) {
    case FEED:
    case SCAN: {
      uint32_t ptr = a[2], len = a[3];
      if (!in_mem(m, a[0], ss)) return trap(m, "state");
      if (!in_mem(m, ptr, len)) return trap(m, "input");
      io.steps_left = steps(m, len);
      out = fn == FEED ? heatc::feed(g, io, m->mem + a[0], a[1], m->mem + ptr, len, a[4])
                       : heatc::scan_document(g, io, m->mem + a[0], a[1], m->mem + ptr, len);
      break;
    }
    case FINISH:
    case SNAPSHOT:
      if (!in_mem(m, a[0], ss)) return trap(m, "state");
      out = fn == FINISH ? heatc::finish(g, io, m->mem + a[0], a[1]) : heatc::snapshot(g, io, m->mem + a[0], a[1]);
      break;
    case SNAPSHOT_BATCH:
    case FINISH_BATCH: {
      if (!in_mem(m, a[0], (uint64_t)a[1] * ss)) return trap(m, "states");
      uint32_t i = 0;
      for (; i < a[1] && !io.out_of_steps; i++) {
        uint8_t* s = m->mem + a[0] + (uint64_t)i * ss;
        io.steps_left = steps(m, 0);
        if (!(fn == FINISH_BATCH ? heatc::finish(g, io, s, a[2] + i) : heatc::snapshot(g, io, s, a[2] + i))) break;
      }
      out = i;
      break;
    }
    case STEP_BATCH: {
      uint32_t states = a[0], ids = a[1], n = a[2], seq0 = a[3];
      if (!in_mem(m, states, (uint64_t)n * ss)) return trap(m, "states");
      if (!in_mem(m, ids, 4 * (uint64_t)n)) return trap(m, "token ids");
      uint32_t i = 0;
      for (; i < n && !io.out_of_steps; i++) {
        uint32_t id = ld<uint32_t>(m->mem + ids + 4 * i);
        io.steps_left = steps(m, token_bytes(io, id));
        if (!heatc::step(g, io, m->mem + states + (uint64_t)i * ss, seq0 + i, id)) {
          if (io.status) io.bad_index = i;
          break;
        }
      }
      out = i;
      break;
    }
    default:
      break;
  }
  if (io.out_of_steps) return out_of_steps(m);
  store_io(m, io);
  return out;
}

// make the first `size` bytes of the reservation usable (false with MemoryError set: the
// process may not have more data, RLIMIT_DATA)
bool commit(Module* m, uint64_t size) {
  uint64_t want = (size + 4095) / 4096 * 4096;
  if (want <= m->committed) return true;
  if (mprotect(m->mem + m->committed, want - m->committed, PROT_READ | PROT_WRITE)) {
    PyErr_Format(PyExc_MemoryError, "the host refused %llu more bytes for the module's memory",
                 (unsigned long long)(want - m->committed));
    return false;
  }
  m->committed = want;
  return true;
}

// ---- table and state checks --------------------------------------------------------------

struct Checker {
  const Module* m;
  const char* problem;
  bool range(uint64_t off, uint64_t len, const char* what) {
    if (off > m->tables_size || len > m->tables_size - off) problem = problem ? problem : what;
    return !problem;
  }
  bool that(bool ok, const char* what) {
    if (!ok && !problem) problem = what;
    return !problem;
  }
};

bool pow2(uint32_t x) { return x && !(x & (x - 1)); }

struct Extent {
  uint32_t off;
  uint64_t size;
};

// Whether two of the tables overlap (an empty one may sit where the next begins); `*rules_end`
// gets where the table after the rules section begins (or the end of the tables).
bool overlapping(const Extent* given, size_t n, uint32_t rules, uint64_t total, uint64_t* rules_end) {
  Extent e[32];
  if (n > 32) return true;
  memcpy(e, given, n * sizeof *e);
  qsort(e, n, sizeof *e, [](const void* a, const void* b) {
    const Extent *x = (const Extent*)a, *y = (const Extent*)b;
    return x->off != y->off ? (x->off < y->off ? -1 : 1) : x->size < y->size ? -1 : x->size > y->size ? 1 : 0;
  });
  *rules_end = total;
  for (size_t i = 0; i < n; i++) {
    if ((uint64_t)e[i].off + e[i].size > (i + 1 < n ? e[i + 1].off : total)) return true;
    if ((e[i].off > rules || (e[i].off == rules && e[i].size)) && e[i].off < *rules_end) *rules_end = e[i].off;
  }
  return false;
}

// The parts of the state record the core writes: every field and every rule's state. No two
// may overlap — a thread's slots written over the lexer's fields, or a token buffer over its
// own length, would turn a valid step into a write anywhere — so they are sorted and compared.
struct Span {
  uint64_t start, end;
  const char* what;
  uint32_t rule;  // for "the state of a rule"
};

struct Spans {
  Span* at = nullptr;
  uint32_t n = 0, cap = 0;
  explicit Spans(uint32_t capacity) : at((Span*)malloc(sizeof(Span) * capacity)), cap(at ? capacity : 0) {}
  ~Spans() { free(at); }
  void add(uint64_t off, uint64_t len, const char* what, uint32_t rule = 0) {
    if (len && n < cap) at[n++] = Span{off, off + len, what, rule};
  }
  const char* name(const Span& x, char* buf, size_t size) const {
    if (x.what) return x.what;
    snprintf(buf, size, "the state of rule %u", x.rule);
    return buf;
  }
  // null, or which two overlap (in a buffer of its own: the message outlives the check)
  const char* overlap() {
    static thread_local char message[160];
    qsort(at, n, sizeof(Span), [](const void* a, const void* b) {
      const Span *x = (const Span*)a, *y = (const Span*)b;  // (by start, then end, then rule: one order)
      if (x->start != y->start) return x->start < y->start ? -1 : 1;
      if (x->end != y->end) return x->end < y->end ? -1 : 1;
      return x->rule < y->rule ? -1 : x->rule > y->rule ? 1 : 0;
    });
    for (uint32_t i = 1; i < n; i++)
      if (at[i].start < at[i - 1].end) {
        char a[40], b[40];
        snprintf(message, sizeof message, "the state record's parts overlap: %s and %s", name(at[i - 1], a, sizeof a),
                 name(at[i], b, sizeof b));
        return message;
      }
    return nullptr;
  }
};

// The automaton ends every token: from its start state every byte leads to a state that
// accepts a lexeme (or awaits its boundary with one to fall back to), so each token emitted
// holds at least one byte and the lexer moves on. (A byte the automaton cannot take, or takes
// without accepting, made it emit empty tokens forever.)
bool lexer_progresses(const heatc::Program& g) {
  const uint8_t* t = g.t;
  const uint32_t width = g.p[HEATC_P_DFA_WIDTH];
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t next = ld<uint32_t>(t + g.p[HEATC_P_T_DFA] + 4 * (width + t[g.p[HEATC_P_T_BYTE_CLASS] + b]));
    if (!next) return false;
    uint32_t a = ld<uint32_t>(t + g.p[HEATC_P_T_DFA] + 4 * (next + width - 1));
    if (!(a & 0x7FFF) || ((a & 0x8000) && !(a >> 16))) return false;
  }
  return true;
}

// The bytes of the skipper's skip_plain section: its byte tables and word fingerprints, and
// with CJK text its fingerprints, table and the continuation lists the table's kinds index
// (kind k >= 3: list k - 3). Called with the CJK table inside the tables.
uint64_t skip_plain_size(const Module* m) {
  if (!P(SKIP_LOG2)) return 0;
  if (!P(SKIP_CJK)) return HEATC_SKIP_WORD_FINGERPRINTS + 64;
  const uint64_t slots = (uint64_t)1 << P(SKIP_CJK);
  uint32_t lists = 0;
  for (uint64_t i = 0; i < slots; i++) {
    uint32_t kind = m->prog.t[P(T_SKIP_PLAIN) + HEATC_SKIP_CJK_TABLE + 4 * i + 3];
    if (kind >= 3 && kind - 2 > lists) lists = kind - 2;
  }
  return HEATC_SKIP_CJK_TABLE + 4 * slots + 4 * HEATC_CJK_CONTINUATIONS * (uint64_t)lists;
}

// Every offset and index the core follows lies inside the tables and the state record, no
// two parts of the state record overlap, every parameter is in its range, and the automaton
// makes progress (docs/abi.md, "Checked at load").
const char* check_tables(const Module* m) {
  Checker c{m, nullptr};
  const heatc::Program& g = m->prog;
  const uint8_t* t = g.t;
  const uint32_t ss = P(STATE_SIZE), width = P(DFA_WIDTH), codes = P(N_CODES), rules = P(N_RULES);
  const uint32_t words = (rules + 63) / 64;
  if (!c.that(width >= 2 && width <= 257 && P(DFA_WORDS) % width == 0 && P(DFA_WORDS) > width,
              "the automaton's size is invalid"))
    return c.problem;
  c.that(ss >= 8 && ss <= (1u << 28) && ss % 8 == 0, "the state size is invalid");
  c.that(codes > HEATC_LEX_LITERAL0 - 1 && codes < 0x8000, "the number of lexeme codes is invalid");
  c.that(P(MAX_LEXEME) >= 1 && P(MAX_LEXEME) <= 64, "the lexeme cap is invalid");
  c.that(P(MAX_CAPTURES) <= 32, "the capture count is invalid");
  c.that(P(EVENT_SIZE) >= HEATC_EV_CAPTURES + 8 * P(MAX_CAPTURES) && P(EVENT_SIZE) % 8 == 0, "the event size is too small");
  c.that(P(EVENT_SIZE) <= HEATC_EV_CAPTURES + 8 * 4096, "the event size is too large");
  c.that(P(SNAPSHOT_SIZE) >= HEATC_SNAP_VERDICTS + rules, "the snapshot size is too small");
  c.that(P(SNAPSHOT_SIZE) <= HEATC_SNAP_VERDICTS + (uint64_t)rules + 4096 && P(SNAPSHOT_SIZE) % 8 == 0,
         "the snapshot size is invalid");
  c.that(P(PLM) >= 1, "lexeme_events is 0");
  // (a lexeme completes at most every rule and opens every anchor group: heatc.hct)
  c.that(P(PLM) <= 1 + (uint64_t)rules + P(N_GROUPS) && P(PLM) <= (1u << 16), "lexeme_events is too large");
  c.that(P(LATE) <= 1, "the late-start flag is invalid");
  c.that(P(WORD_ROW) % width == 0 && P(WORD_ROW) < P(DFA_WORDS), "the plain-word state is out of range");
  if (c.problem) return c.problem;
  if (P(SKIP_LOG2)) {
    if (!c.that(P(SKIP_LOG2) <= 24 && P(MAX_LEXEME) >= 32, "the skipper's table size is invalid")) return c.problem;
    c.range(P(T_SKIP_PLAIN), HEATC_SKIP_WORD_FINGERPRINTS + 64, "the skipper's byte tables");
    c.range(P(T_SKIP_WORDS), HEATC_SKIP_WORDS_SIZE * ((uint64_t)1 << P(SKIP_LOG2)), "the skipper's word table");
    if (!c.problem) {
      bool empty = false;
      for (uint32_t i = 0; i < (1u << P(SKIP_LOG2)) && !empty; i++)
        empty = ld<uint64_t>(t + P(T_SKIP_WORDS) + HEATC_SKIP_WORDS_SLOTS * ((uint64_t)1 << P(SKIP_LOG2)) + 8 * i) == 0;
      c.that(empty, "the skipper's word table has no empty slot");
    }
    c.that(P(SKIP_WEAK) <= 1 && P(SKIP_CJK) <= 24, "the skipper's parameters are invalid");
    c.that(P(SKIP_DIGITS) < (HEATC_HCT_DIGITS_BEFORE_DIGIT << HEATC_DIGIT_EXTENDERS_MAX), "the skipper's digit runs are invalid");
    if (P(SKIP_CJK) && !c.problem) {
      // the CJK table (u32 slots, one empty at least) and the continuation lists its kinds index
      const uint64_t slots = (uint64_t)1 << P(SKIP_CJK);
      if (c.range(P(T_SKIP_PLAIN), HEATC_SKIP_CJK_TABLE + 4 * slots, "the skipper's CJK table")) {
        bool empty = false;
        for (uint64_t i = 0; i < slots && !empty; i++) empty = ld<uint32_t>(t + P(T_SKIP_PLAIN) + HEATC_SKIP_CJK_TABLE + 4 * i) == 0;
        c.that(empty, "the skipper's CJK table has no empty slot");
        c.range(P(T_SKIP_PLAIN), skip_plain_size(m), "the skipper's CJK continuations");
      }
    }
  } else {
    c.that(!P(SKIP_CJK) && !P(SKIP_WEAK) && !P(SKIP_DIGITS) && !P(DIGIT_EXTENDERS),
           "the skipper's parameters come without its tables");
  }
  // the state record's fields: inside it, aligned for their loads (a u64 on the GPU: 8)
  if (!c.range(P(T_RULE_OFF), 4 * (uint64_t)rules, "rule offsets")) return c.problem;
  Spans spans(32 + rules);
  if (!c.that(spans.cap != 0, "out of memory checking the state record")) return c.problem;
  static thread_local char misplaced[120];
  auto field = [&](uint32_t off, uint64_t len, const char* what, uint32_t align = 4) {
    if (!c.problem && !(off % align == 0 && off + len <= ss)) {
      snprintf(misplaced, sizeof misplaced, "%s (at %u) lies outside the state record or is not %u-byte aligned",
               what, off, align);
      c.problem = misplaced;
    }
    spans.add(off, len, what);
  };
  field(P(OFF_POS), 8, "state field pos", 8);
  field(P(OFF_LEXEMES), 8, "state field lexemes", 8);
  field(P(OFF_TOKENS), 8, "state field tokens", 8);
  field(P(OFF_MATCHES), 8, "state field matches", 8);
  field(P(OFF_REJECTIONS), 8, "state field rejections", 8);
  field(P(OFF_TOK_START), 8, "state field tok_start", 8);
  field(P(OFF_LAST_END), 8, "state field last_end", 8);
  field(P(OFF_DFA_STATE), 4, "state field dfa_state");
  field(P(OFF_BUF_LEN), 4, "state field buf_len");
  field(P(OFF_LAST_TOK), 4, "state field last_tok");
  field(P(OFF_LAST_LEN), 4, "state field last_len");
  field(P(OFF_PEND_TOK), 4, "state field pend_tok");
  field(P(OFF_PEND_FALLBACK), 4, "state field pend_fallback");
  field(P(OFF_PEND_LEN), 4, "state field pend_len");
  field(P(OFF_FLAGS), 4, "state field flags");
  field(P(OFF_PENDING_EVENTS), 4, "state field pending_events");
  field(P(OFF_N_ACTIVE), 4, "state field n_active");
  field(P(OFF_BUF), P(MAX_LEXEME), "state field buf");
  field(P(OFF_ACTIVE_RULES), 8 * (uint64_t)words, "state field active_rules", 8);
  if (P(LATE)) {
    field(P(OFF_LOOK_MARK), 8, "state field look_mark", 8);
    field(P(OFF_LOOK_START), 8, "state field look_start", 8);
    field(P(OFF_LOOK_CODE), 4, "state field look_code");
    field(P(OFF_LOOK_LEN), 4, "state field look_len");
    field(P(OFF_LOOK_BUF), P(MAX_LEXEME), "state field look_buf");
  }
  const uint32_t A = P(ANCHOR_LEXEMES), groups = P(N_GROUPS);
  uint64_t domain_bytes = 0;
  if (A) {
    c.that(A <= 8 && P(MAX_LEXEME) <= HEATC_RING_ENTRY - HEATC_AE_TEXT, "the anchor ring is invalid");
    field(P(OFF_ANCHOR_COUNT), 4, "state field anchor_count");
    field(P(OFF_ANCHOR_HEAD), 4, "state field anchor_head");
    field(P(OFF_RING), (uint64_t)A * HEATC_RING_ENTRY, "state field anchor ring", 8);
    c.that(pow2(P(ANCHOR_SIZE)) && pow2(P(FILTER_BITS)) && P(FILTER_BITS) >= 64, "the anchor tables' sizes are invalid");
    c.range(P(T_ANCHOR_KEYS), 8 * (uint64_t)P(ANCHOR_SIZE), "anchor keys");
    c.range(P(T_ANCHOR_GROUPS), 4 * (uint64_t)P(ANCHOR_SIZE), "anchor groups");
    const uint32_t filters[3] = {P(T_ANCHOR_FILTER), P(T_ANCHOR_END_FILTER), P(T_ANCHOR_MEMBER_FILTER)};
    for (uint32_t f : filters) c.range(f, P(FILTER_BITS) / 8, "anchor filter");
    c.range(P(T_DOMAIN_INDEX), 8 * (uint64_t)P(N_DOMAINS), "anchor domains");
    if (c.problem) return c.problem;
    bool empty = false;
    for (uint32_t i = 0; i < P(ANCHOR_SIZE); i++) {
      empty |= ld<uint64_t>(t + P(T_ANCHOR_KEYS) + 8 * i) == 0;
      int32_t grp = ld<int32_t>(t + P(T_ANCHOR_GROUPS) + 4 * i);
      c.that(grp < (int32_t)groups, "an anchor term's group is out of range");
    }
    c.that(empty, "the anchor table has no empty slot");
    for (uint32_t d = 0; d < P(N_DOMAINS); d++) {
      uint64_t end = (uint64_t)ld<uint32_t>(t + P(T_DOMAIN_INDEX) + 8 * d) + ld<uint32_t>(t + P(T_DOMAIN_INDEX) + 8 * d + 4);
      c.range(P(T_DOMAIN_BYTES), end, "an anchor domain");
      if (end > domain_bytes) domain_bytes = end;
    }
  }
  c.that(groups <= (1u << 16), "the anchor group count is invalid");
  if (groups) field(P(OFF_ANCHOR_ACTIVE), ((uint64_t)groups + 7) / 8, "state field anchor_active");
  if (P(N_CHANNELS)) field(P(OFF_CHANNELS), 32 * (uint64_t)P(N_CHANNELS), "state field channels", 8);
  if (c.problem) return c.problem;
  // fixed tables, each aligned for its loads (the GPU reads them in place: a u64 or a double
  // on 8 bytes, a u32 on 4)
  const uint32_t align8[] = {P(T_DFA), P(T_START_OFF), P(T_START_RULES), P(T_RULES), P(T_RULE_OFF), P(T_LITERAL_CLASS),
                             P(T_ANCHOR_KEYS), P(T_ANCHOR_GROUPS), P(T_ANCHOR_FILTER), P(T_ANCHOR_END_FILTER),
                             P(T_ANCHOR_MEMBER_FILTER), P(T_DOMAIN_INDEX), P(T_POW10), P(T_CN_TABLE), P(T_SHA256_K),
                             P(T_SKIP_PLAIN), P(T_SKIP_WORDS)};
  for (uint32_t off : align8) c.that(off % 8 == 0, "a table is not aligned");
  c.range(P(T_BYTE_CLASS), 256, "byte classes");
  c.range(P(T_DFA), 4 * (uint64_t)P(DFA_WORDS), "automaton");
  c.range(P(T_CODE_FLAGS), codes, "code flags");
  c.range(P(T_INERT), codes, "inert codes");
  c.range(P(T_CODE_KINDS), codes, "lexeme kinds");
  c.range(P(T_LITERAL_CLASS), 4 * (uint64_t)(codes - HEATC_LEX_LITERAL0), "literal classes");
  c.range(P(T_START_OFF), 4 * ((uint64_t)codes + 1), "start lists");
  c.range(P(T_RULE_OFF), 4 * (uint64_t)rules, "rule offsets");
  c.range(P(T_POW10), 8 * 400, "powers of ten");
  c.range(P(T_CN_TABLE), 8 * (uint64_t)P(N_CN), "numeral table");
  c.range(P(T_SHA256_K), 256, "sha256 constants");
  if (c.problem) return c.problem;
  for (uint32_t b = 0; b < 256; b++) c.that(t[P(T_BYTE_CLASS) + b] < width - 1, "a byte class is out of range");
  for (uint32_t i = 0; i < P(DFA_WORDS); i++) {
    uint32_t x = ld<uint32_t>(t + P(T_DFA) + 4 * i);
    if (i % width == width - 1)
      c.that((x & 0x7FFF) < codes && (x >> 16) < codes, "the automaton accepts an unknown lexeme code");
    else
      c.that(x % width == 0 && x < P(DFA_WORDS), "the automaton has a transition out of range");
  }
  if (c.problem) return c.problem;
  c.that(lexer_progresses(g), "the automaton cannot take every byte from its start state");
  // numerals: a value indexes the powers of ten (docs/semantics.md §2), so only the kinds and
  // values heatc writes (digits 0-9, 十 百 千, 万 亿 as 1 and 2, the point)
  for (uint32_t i = 0; i < P(N_CN); i++) {
    uint32_t cp = ld<uint32_t>(t + P(T_CN_TABLE) + 8 * i), code = ld<uint32_t>(t + P(T_CN_TABLE) + 8 * i + 4);
    uint32_t kind = code >> 16, value = code & 0xFFFF;
    bool ok = kind == HEATC_CN_KIND_DIGIT   ? value <= 9
              : kind == HEATC_CN_KIND_SMALL ? value == 10 || value == 100 || value == 1000
              : kind == HEATC_CN_KIND_BIG   ? value == 1 || value == 2
                                       : kind == HEATC_CN_KIND_POINT && value == 0;
    c.that(ok && (i == 0 || cp > ld<uint32_t>(t + P(T_CN_TABLE) + 8 * i - 8)), "the numeral table is invalid");
  }
  uint32_t n_starts = ld<uint32_t>(t + P(T_START_OFF) + 4 * codes);
  c.range(P(T_START_RULES), 4 * (uint64_t)n_starts, "start rules");
  if (c.problem) return c.problem;
  for (uint32_t code = 0; code < codes; code++) {
    uint32_t a = ld<uint32_t>(t + P(T_START_OFF) + 4 * code), b = ld<uint32_t>(t + P(T_START_OFF) + 4 * code + 4);
    c.that(a <= b && b <= n_starts, "a start list is out of range");
    for (uint32_t i = a; i < b && !c.problem; i++) {
      uint32_t r = ld<uint32_t>(t + P(T_START_RULES) + 4 * i);
      c.that(r < rules && (i == a || r > ld<uint32_t>(t + P(T_START_RULES) + 4 * i - 4)), "a start list is not sorted");
    }
  }
  // no two tables overlap: each ends before the next begins (the CUDA tiers move whole
  // sections, and the rule records must stay within theirs: rules_end)
  const uint64_t skip = P(SKIP_LOG2) ? (uint64_t)1 << P(SKIP_LOG2) : 0;
  const Extent extents[] = {
      {P(T_BYTE_CLASS), 256}, {P(T_DFA), 4 * (uint64_t)P(DFA_WORDS)}, {P(T_CODE_FLAGS), codes}, {P(T_INERT), codes},
      {P(T_CODE_KINDS), codes}, {P(T_LITERAL_CLASS), 4 * (uint64_t)(codes - HEATC_LEX_LITERAL0)},
      {P(T_START_OFF), 4 * ((uint64_t)codes + 1)}, {P(T_START_RULES), 4 * (uint64_t)n_starts}, {P(T_RULES), 0},
      {P(T_RULE_OFF), 4 * (uint64_t)rules}, {P(T_ANCHOR_KEYS), A ? 8 * (uint64_t)P(ANCHOR_SIZE) : 0},
      {P(T_ANCHOR_GROUPS), A ? 4 * (uint64_t)P(ANCHOR_SIZE) : 0}, {P(T_ANCHOR_FILTER), A ? P(FILTER_BITS) / 8 : 0},
      {P(T_ANCHOR_END_FILTER), A ? P(FILTER_BITS) / 8 : 0}, {P(T_ANCHOR_MEMBER_FILTER), A ? P(FILTER_BITS) / 8 : 0},
      {P(T_DOMAIN_INDEX), A ? 8 * (uint64_t)P(N_DOMAINS) : 0}, {P(T_DOMAIN_BYTES), domain_bytes}, {P(T_POW10), 8 * 400},
      {P(T_CN_TABLE), 8 * (uint64_t)P(N_CN)}, {P(T_SHA256_K), 256},
      {P(T_SKIP_PLAIN), skip_plain_size(m)}, {P(T_SKIP_WORDS), skip ? HEATC_SKIP_WORDS_SIZE * skip : 0}};
  uint64_t rules_end = 0;
  c.that(!overlapping(extents, sizeof extents / sizeof *extents, P(T_RULES), m->tables_size, &rules_end),
         "two tables overlap");
  // a rule record's part, inside the rules section
  auto in_rules = [&](uint64_t off, uint64_t len, const char* what) {
    return c.that(off >= P(T_RULES) && off <= rules_end && len <= rules_end - off, what);
  };
  for (uint32_t r = 0; r < rules && !c.problem; r++) {
    uint32_t at = ld<uint32_t>(t + P(T_RULE_OFF) + 4 * r);
    if (!in_rules(at, HEATC_RULE_SIZE, "a rule record") || !c.that(at % 8 == 0, "a rule record is not aligned")) break;
    const uint8_t* rec = t + at;
    uint32_t k = ld<uint32_t>(rec + HEATC_RULE_N_ELEMENTS), nc = ld<uint32_t>(rec + HEATC_RULE_N_CAPTURES);
    int32_t gate = ld<int32_t>(rec + HEATC_RULE_GATE);
    // (an element captures at most its value and, for `places(v)`, the digits after its point)
    c.that(k >= 1 && k <= 16 && nc <= 2 * k && nc <= P(MAX_CAPTURES), "a rule's element or capture count is invalid");
    c.that(gate < (int32_t)groups, "a rule's gate is out of range");
    c.that(ld<uint32_t>(rec + HEATC_RULE_SLOT_SIZE) == HEATC_TH_CAPTURES + 8 * nc, "a rule's slot size is wrong");
    c.that(ld<uint32_t>(rec + HEATC_RULE_STATE_OFF) % 8 == 0 &&
               ld<uint32_t>(rec + HEATC_RULE_STATE_OFF) + 8 + (uint64_t)(k - 1) * (16 + 8 * nc) <= ss,
           "a rule's state lies outside the state record");
    c.that(!ld<uint32_t>(rec + HEATC_RULE_LATE) || k >= 2, "a late-starting rule has one element");
    c.that(ld<uint32_t>(rec + HEATC_RULE_OBSERVE) <= 1, "a rule's observe flag is neither 0 nor 1");
    if (c.problem) break;
    spans.add(ld<uint32_t>(rec + HEATC_RULE_STATE_OFF), 8 + (uint64_t)(k - 1) * (16 + 8 * nc), nullptr, r);
    if (!in_rules(at + (uint64_t)ld<uint32_t>(rec + HEATC_RULE_ELEMENTS), HEATC_EL_SIZE * (uint64_t)k, "a rule's elements"))
      break;
    for (uint32_t i = 0; i < k; i++) {
      const uint8_t* el = rec + ld<uint32_t>(rec + HEATC_RULE_ELEMENTS) + HEATC_EL_SIZE * i;
      int32_t cap = ld<int32_t>(el + HEATC_EL_CAPTURE), places = ld<int32_t>(el + HEATC_EL_PLACES);
      c.that(cap < (int32_t)nc && places < (int32_t)nc && ld<uint32_t>(el + HEATC_EL_GAP) < 255,
             "a rule element is invalid");
      in_rules(at + (uint64_t)ld<uint32_t>(el + HEATC_EL_ACCEPTS), 4 * (uint64_t)ld<uint32_t>(el + HEATC_EL_N_ACCEPTS),
              "a rule element's accept list");
      c.that(ld<uint32_t>(el + HEATC_EL_ACCEPTS) % 4 == 0, "a rule element's accept list is not aligned");
      // a quantity's unit: the slot it converts, and its conversions (from the element record)
      int32_t conv = ld<int32_t>(el + HEATC_EL_CONVERT);
      c.that(conv < (int32_t)nc, "a rule element's converted capture is out of range");
      if (conv >= 0)
        in_rules(at + (uint64_t)ld<uint32_t>(rec + HEATC_RULE_ELEMENTS) + HEATC_EL_SIZE * (uint64_t)i +
                     ld<uint32_t>(el + HEATC_EL_UNITS),
                 HEATC_UC_SIZE * (uint64_t)ld<uint32_t>(el + HEATC_EL_N_ACCEPTS), "a unit's conversions");
    }
    in_rules(at + (uint64_t)ld<uint32_t>(rec + HEATC_RULE_BLOCKS), 4 * (uint64_t)k, "a rule's gap blocks");
    uint32_t nq = ld<uint32_t>(rec + HEATC_RULE_N_REQUIREMENTS), nu = ld<uint32_t>(rec + HEATC_RULE_N_CHANNELS);
    if (!in_rules(at + (uint64_t)ld<uint32_t>(rec + HEATC_RULE_REQUIREMENTS), HEATC_REQ_SIZE * (uint64_t)nq,
                 "a rule's requirements") ||
        !c.that(ld<uint32_t>(rec + HEATC_RULE_REQUIREMENTS) % 8 == 0 && ld<uint32_t>(rec + HEATC_RULE_ELEMENTS) % 4 == 0 &&
                    ld<uint32_t>(rec + HEATC_RULE_BLOCKS) % 4 == 0 && ld<uint32_t>(rec + HEATC_RULE_CHANNELS) % 4 == 0,
                "a rule record's parts are not aligned"))
      break;
    for (uint32_t i = 0; i < nq; i++) {
      const uint8_t* q = rec + ld<uint32_t>(rec + HEATC_RULE_REQUIREMENTS) + HEATC_REQ_SIZE * i;
      c.that(ld<uint32_t>(q) <= HEATC_OP_IN && ld<int32_t>(q + HEATC_REQ_LEFT) < (int32_t)nc &&
                 ld<int32_t>(q + HEATC_REQ_RIGHT) < (int32_t)nc,
             "a requirement is invalid");
    }
    if (!in_rules(at + (uint64_t)ld<uint32_t>(rec + HEATC_RULE_CHANNELS), HEATC_CU_SIZE * (uint64_t)nu, "a rule's channels"))
      break;
    for (uint32_t i = 0; i < nu; i++) {
      const uint8_t* u = rec + ld<uint32_t>(rec + HEATC_RULE_CHANNELS) + HEATC_CU_SIZE * i;
      uint32_t keys = ld<uint32_t>(u + HEATC_CU_N_KEYS);
      int32_t key = ld<int32_t>(u + HEATC_CU_KEY);
      // the slots it reads: one per key class (or one), and a band's largest values after them
      uint64_t slots = (key < 0 ? 1 : (uint64_t)keys) + (ld<uint32_t>(u + HEATC_CU_FACTOR) ? (keys > 1 ? keys : 1) : 0);
      c.that(ld<uint32_t>(u + HEATC_CU_CAPTURE) < nc && key < (int32_t)nc && (key < 0 || keys >= 1) &&
                 (uint64_t)ld<uint32_t>(u + HEATC_CU_CHANNEL) + slots <= P(N_CHANNELS),
             "a channel use is invalid");
      in_rules(at + (uint64_t)ld<uint32_t>(u + HEATC_CU_KEYS), 4 * (uint64_t)keys, "a channel use's key classes");
      c.that(ld<uint32_t>(u + HEATC_CU_KEYS) % 4 == 0, "a channel use's key classes are not aligned");
    }
  }
  if (c.problem) return c.problem;
  return spans.overlap();
}

// The fields of a state record the core follows as indices, in range (a state from another
// batch, or another backend, of the same module).
const char* check_state(const Module* m, const uint8_t* s) {
  Checker c{m, nullptr};
  const uint32_t codes = P(N_CODES), cap = P(MAX_LEXEME);
  uint32_t row = ld<uint32_t>(s + P(OFF_DFA_STATE)), len = ld<uint32_t>(s + P(OFF_BUF_LEN));
  c.that(row % P(DFA_WIDTH) == 0 && row < P(DFA_WORDS), "its lexer state is out of range");
  c.that(len <= cap && ld<uint32_t>(s + P(OFF_LAST_LEN)) <= len && ld<uint32_t>(s + P(OFF_PEND_LEN)) <= len,
         "its token buffer length is out of range");
  c.that(ld<uint32_t>(s + P(OFF_LAST_TOK)) < codes && ld<uint32_t>(s + P(OFF_PEND_TOK)) < codes &&
             ld<uint32_t>(s + P(OFF_PEND_FALLBACK)) < codes,
         "its lexeme codes are out of range");
  if (P(LATE))
    c.that(ld<uint32_t>(s + P(OFF_LOOK_LEN)) <= cap && ld<uint32_t>(s + P(OFF_LOOK_CODE)) < codes,
           "its look-behind is out of range");
  if (P(ANCHOR_LEXEMES)) {
    uint32_t A = P(ANCHOR_LEXEMES);
    c.that(ld<uint32_t>(s + P(OFF_ANCHOR_COUNT)) <= A && ld<uint32_t>(s + P(OFF_ANCHOR_HEAD)) < A,
           "its anchor ring is out of range");
    for (uint32_t i = 0; i < A; i++)
      c.that(s[P(OFF_RING) + i * HEATC_RING_ENTRY + HEATC_AE_LEN] <= cap, "its anchor ring is out of range");
  }
  uint32_t words = (P(N_RULES) + 63) / 64, active = 0;
  for (uint32_t w = 0; w < words; w++) {
    uint64_t bits = ld<uint64_t>(s + P(OFF_ACTIVE_RULES) + 8 * w);
    if (w == words - 1 && P(N_RULES) % 64) c.that(bits >> (P(N_RULES) % 64) == 0, "it marks rules it does not have");
    active += (uint32_t)__builtin_popcountll(bits);
  }
  c.that(active == ld<uint32_t>(s + P(OFF_N_ACTIVE)), "its count of live rules is wrong");
  return c.problem;
}

// ---- Call: one entry point, optionally with its arguments bound ---------------------------

PyObject* call_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Call* c = (Call*)self;
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  uint32_t a[5];
  const uint32_t* use = c->args;
  if (!c->bound) {
    if (n != FN_ARGS[c->fn] || kwnames) {
      PyErr_Format(PyExc_TypeError, "%s() takes %d arguments", FN_NAMES[c->fn], FN_ARGS[c->fn]);
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      unsigned long v = PyLong_AsUnsignedLong(args[i]);
      if (v == (unsigned long)-1 && PyErr_Occurred()) return nullptr;
      if (v > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_OverflowError, "offsets and counts are u32");
        return nullptr;
      }
      a[i] = (uint32_t)v;
    }
    use = a;
  } else if (n || kwnames) {
    PyErr_SetString(PyExc_TypeError, "a bound call takes no arguments");
    return nullptr;
  }
  int64_t r = dispatch(c->module, c->fn, use);
  if (r < 0) return nullptr;
  return PyLong_FromLongLong(r);
}

Call* new_call(Module* m, int fn) {
  Call* c = PyObject_New(Call, &CallType);
  if (!c) return nullptr;
  c->vectorcall = call_vectorcall;
  Py_INCREF(m);
  c->module = m;
  c->fn = fn;
  c->bound = 0;
  memset(c->args, 0, sizeof c->args);
  return c;
}

PyObject* call_bound(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  Call* c = (Call*)self;
  if (n != FN_ARGS[c->fn]) {
    PyErr_Format(PyExc_TypeError, "%s() takes %d arguments", FN_NAMES[c->fn], FN_ARGS[c->fn]);
    return nullptr;
  }
  Call* b = new_call(c->module, c->fn);
  if (!b) return nullptr;
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned long v = PyLong_AsUnsignedLong(args[i]);
    if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > 0xFFFFFFFFul) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "offsets and counts are u32");
      Py_DECREF(b);
      return nullptr;
    }
    b->args[i] = (uint32_t)v;
  }
  b->bound = 1;
  return (PyObject*)b;
}

void call_dealloc(PyObject* self) {
  Py_XDECREF(((Call*)self)->module);
  PyObject_Free(self);
}

PyMethodDef call_methods[] = {
    {"bound", (PyCFunction)(void (*)(void))call_bound, METH_FASTCALL,
     "bound(*args): a zero-argument call with these arguments fixed"},
    {nullptr, nullptr, 0, nullptr}};

// ---- Module ----------------------------------------------------------------------------

// The automaton of checked tables in fewer cache lines (heatc::Io::dfa16, ::accepts), where
// it has at most 2^16 states: per transition its target state, at the tables' index (half
// the bytes), and the states' accept words in an array of their own (in the tables each is
// the last word of its state's row, hundreds of bytes from the transitions read). A scan of
// a large rule set misses the cache less. false when out of memory.
bool compact_dfa(Module* m) {
  const heatc::Program& g = m->prog;
  const uint32_t width = g.p[HEATC_P_DFA_WIDTH], words = g.p[HEATC_P_DFA_WORDS], states = words / width;
  const uint8_t* dfa = g.t + g.p[HEATC_P_T_DFA];
  if (states > 0x10000) return true;  // (the tables' words serve)
  m->dfa16 = (uint16_t*)aligned_alloc(64, ((size_t)2 * words + 63) / 64 * 64);
  m->accepts = (uint32_t*)aligned_alloc(64, ((size_t)4 * states + 63) / 64 * 64);
  if (!m->dfa16 || !m->accepts) return false;
  // (transitions are multiples of the width, checked at load; the accept column is never read as one)
  for (uint32_t i = 0; i < words; i++) m->dfa16[i] = (uint16_t)(ld<uint32_t>(dfa + 4 * (uint64_t)i) / width);
  for (uint32_t k = 0; k < states; k++) m->accepts[k] = ld<uint32_t>(dfa + 4 * ((uint64_t)k * width + width - 1));
  return true;
}

PyObject* module_new(PyTypeObject* type, PyObject* args, PyObject* kw) {
  static const char* names[] = {"tables", "params", "memory_bytes", "control", "trap", "steps", nullptr};
  Py_buffer tables;
  PyObject *params, *trap_type;
  unsigned long long memory_bytes, step_limit = 0;
  unsigned int control;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "y*OKIO|K", (char**)names, &tables, &params, &memory_bytes, &control,
                                   &trap_type, &step_limit))
    return nullptr;
  Module* m = (Module*)type->tp_alloc(type, 0);
  if (!m) {
    PyBuffer_Release(&tables);
    return nullptr;
  }
  m->tables = nullptr;
  m->mem = nullptr;
  m->step_limit = step_limit;
  m->scratch = nullptr;
  m->dfa16 = nullptr;
  m->accepts = nullptr;
  m->rule_states = nullptr;
  m->late_only = nullptr;
  Py_INCREF(trap_type);
  m->trap = trap_type;
  PyObject* seq = PySequence_Fast(params, "params must be a sequence of ints");
  if (!seq || PySequence_Fast_GET_SIZE(seq) != HEATC_N_PARAMS) {
    if (seq) PyErr_Format(PyExc_ValueError, "expected %d parameters", (int)HEATC_N_PARAMS);
    Py_XDECREF(seq);
    goto fail;
  }
  for (int i = 0; i < HEATC_N_PARAMS; i++) {
    unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(seq, i));
    if (PyErr_Occurred() || v > 0xFFFFFFFFul) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a parameter is out of range");
      Py_DECREF(seq);
      goto fail;
    }
    m->prog.p[i] = (uint32_t)v;
  }
  Py_DECREF(seq);
  if (tables.len > 0x7FFFFFFF || memory_bytes > 0xFFFFFFFFull || control % 8 ||
      (uint64_t)control + 4 * 16 > memory_bytes) {
    PyErr_SetString(PyExc_ValueError, "the tables or the memory are too large");
    goto fail;
  }
  m->tables_size = (uint32_t)tables.len;
  m->tables = (uint8_t*)aligned_alloc(64, ((size_t)tables.len + 64) / 64 * 64);
  if (!m->tables) {
    PyErr_NoMemory();
    goto fail;
  }
  memcpy(m->tables, tables.buf, tables.len);
  m->prog.t = m->tables;
  heatc::whole_tables(m->prog);
  if (const char* problem = check_tables(m)) {
    PyErr_Format(PyExc_ValueError, "the tables are invalid: %s", problem);
    goto fail;
  }
  if (P(SKIP_LOG2)) {
    m->late_only = (uint8_t*)malloc(P(N_CODES));
    if (!m->late_only) {
      PyErr_NoMemory();
      goto fail;
    }
    heatc::skip::late_only_codes(m->prog, m->late_only);
    bool any = false;
    for (uint32_t code = 0; code < P(N_CODES); code++) any |= m->late_only[code] != 0;
    for (int quiet = 0; quiet < 2; quiet++) {
      m->skip_configs[quiet] = heatc::skip::config(m->prog, quiet);
      m->skip_configs[quiet].late_only = any ? m->late_only : nullptr;
    }
  }
  if (!compact_dfa(m)) {
    PyErr_NoMemory();
    goto fail;
  }
  m->rule_states = (uint32_t*)malloc(4 * (size_t)P(N_RULES) + 4);
  if (!m->rule_states) {
    PyErr_NoMemory();
    goto fail;
  }
  for (uint32_t r = 0; r < P(N_RULES); r++) {
    const uint8_t* rec = heatc::rule_rec(m->prog, r);
    m->rule_states[r] = ld<uint32_t>(rec + HEATC_RULE_STATE_OFF) | (P(LATE) && ld<uint32_t>(rec + HEATC_RULE_LATE) ? 1u << 31 : 0);
  }
  // one reservation, never moved: views into it stay valid as the visible size grows. It is
  // inaccessible but for what has been grown into (commit): only that counts as the process's
  // data (RLIMIT_DATA), not the whole limit
  m->reserved = (size_t)(memory_bytes + 4095) / 4096 * 4096;
  {
    void* mem = mmap(nullptr, m->reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
      m->mem = nullptr;
      PyErr_Format(PyExc_MemoryError, "cannot reserve %llu bytes of address space for the module's memory",
                   memory_bytes);
      goto fail;
    }
    m->mem = (uint8_t*)mem;
  }
  m->control = control;
  if (!commit(m, (uint64_t)control + 4 * 16)) goto fail;
  m->size = (uint64_t)control + 4 * 16;
  PyBuffer_Release(&tables);
  return (PyObject*)m;
fail:
  PyBuffer_Release(&tables);
  Py_DECREF(m);
  return nullptr;
}

// unmap the memory once the module is closed and no view of it is left
void release_memory(Module* m) {
  if (m->mem && m->closed && !m->exports) {
    munmap(m->mem, m->reserved);
    m->mem = nullptr;
    m->size = m->committed = 0;
  }
}

void module_dealloc(PyObject* self) {
  Module* m = (Module*)self;
  if (m->mem) munmap(m->mem, m->reserved);
  free(m->tables);
  free(m->scratch);
  free(m->dfa16);
  free(m->accepts);
  free(m->rule_states);
  free(m->late_only);
  Py_XDECREF(m->trap);
  Py_TYPE(self)->tp_free(self);
}

int module_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  Module* m = (Module*)self;
  if (m->closed) {
    PyErr_SetString(PyExc_BufferError, "the native module was closed");
    return -1;
  }
  if (PyBuffer_FillInfo(view, self, m->mem, (Py_ssize_t)m->committed, 0, flags) < 0) return -1;
  m->exports++;
  return 0;
}

void module_releasebuffer(PyObject* self, Py_buffer*) {
  Module* m = (Module*)self;
  m->exports--;
  release_memory(m);
}

PyBufferProcs module_buffer = {module_getbuffer, module_releasebuffer};

PyObject* module_grow(PyObject* self, PyObject* arg) {
  Module* m = (Module*)self;
  unsigned long long size = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return nullptr;
  if (m->closed) {
    PyErr_SetString(m->trap, "the native module was closed");
    return nullptr;
  }
  if (size > m->reserved || size > 0xFFFFFFFFull) {
    PyErr_SetString(PyExc_MemoryError, "past the module's memory limit");
    return nullptr;
  }
  if (!commit(m, size)) return nullptr;
  if (size > m->size) m->size = size;
  return PyLong_FromUnsignedLongLong(m->size);
}

PyObject* module_close(PyObject* self, PyObject*) {
  Module* m = (Module*)self;
  m->closed = 1;
  release_memory(m);
  Py_RETURN_NONE;
}

PyObject* module_function(PyObject* self, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  for (int fn = 0; fn < N_FN; fn++)
    if (!strcmp(name, FN_NAMES[fn])) return (PyObject*)new_call((Module*)self, fn);
  PyErr_Format(PyExc_KeyError, "no entry point %s", name);
  return nullptr;
}

PyObject* module_check_state(PyObject* self, PyObject* arg) {
  Module* m = (Module*)self;
  unsigned long st = PyLong_AsUnsignedLong(arg);
  if (PyErr_Occurred()) return nullptr;
  if (!in_mem(m, st, m->prog.p[HEATC_P_STATE_SIZE])) {
    trap(m, "state");
    return nullptr;
  }
  const char* problem = check_state(m, m->mem + st);
  if (!problem) Py_RETURN_NONE;
  return PyUnicode_FromString(problem);
}

// A caller's array as a buffer of exactly `size` bytes (writable when asked): the runtime's
// own numpy arrays, whose sizes are checked here, never trusted.
struct Buf {
  Py_buffer b;
  bool ok = false;
  Buf(PyObject* obj, uint64_t size, bool writable, const char* what) {
    if (PyObject_GetBuffer(obj, &b, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return;
    ok = (uint64_t)b.len == size;
    if (!ok) {
      PyErr_Format(PyExc_ValueError, "%s is %zd bytes, expected %llu", what, b.len, (unsigned long long)size);
      PyBuffer_Release(&b);
    }
  }
  ~Buf() {
    if (ok) PyBuffer_Release(&b);
  }
  template <class T>
  T* as() const {
    return (T*)b.buf;
  }
};

// guard(states, capacity, rows, n, candidates, k, tails, mask, greedy): guard's decision for k
// candidates (int64, n × k; negative: unusable) of each of the n sequences rows[i] (int64) of
// the state array at `states` (an offset, `capacity` records), whose texts end in tails[i]
// (HEATC_GUARD_TAIL bytes each); mask (n × k bytes) gets HEATC_MASK_*. The states are only
// read. With `greedy`, a row's usable candidates below its first that passes are
// HEATC_MASK_UNTRIED (greedy decoding takes the best that passes: no need to judge the rest).
// `rows`, `candidates`, `tails` and `mask` are the caller's arrays (buffers, their sizes
// checked); every row index is checked.
PyObject* module_guard(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  Module* m = (Module*)self;
  if (nargs != 9) {
    PyErr_SetString(PyExc_TypeError, "guard(states, capacity, rows, n, candidates, k, tails, mask, greedy)");
    return nullptr;
  }
  if (m->closed) {
    PyErr_SetString(m->trap, "the native module was closed");
    return nullptr;
  }
  const int greedy = PyObject_IsTrue(args[8]);
  if (greedy < 0) return nullptr;
  uint64_t at = PyLong_AsUnsignedLongLong(args[0]), capacity = PyLong_AsUnsignedLongLong(args[1]);
  uint64_t n = PyLong_AsUnsignedLongLong(args[3]), k = PyLong_AsUnsignedLongLong(args[5]);
  if (PyErr_Occurred()) return nullptr;
  const heatc::Program& g = m->prog;
  const uint64_t ss = P(STATE_SIZE);
  if (capacity > 0xFFFFFFFFull || n > capacity || k > 64 || !in_mem(m, at, capacity * ss)) {
    trap(m, "states");
    return nullptr;
  }
  Buf rows(args[2], 8 * n, false, "rows"), cand(args[4], 8 * n * k, false, "candidates");
  Buf tails(args[6], HEATC_GUARD_TAIL * n, false, "tails"), mask(args[7], n * k, true, "mask");
  if (!rows.ok || !cand.ok || !tails.ok || !mask.ok) return nullptr;
  const int64_t* r = rows.as<int64_t>();
  for (uint64_t i = 0; i < n; i++)
    if (r[i] < 0 || (uint64_t)r[i] >= capacity) {
      PyErr_Format(PyExc_IndexError, "guard: row %lld is outside the batch of %llu", (long long)r[i],
                   (unsigned long long)capacity);
      return nullptr;
    }
  heatc::Io io;
  if (load_io(m, io, true) < 0) return nullptr;
  heatc::Tokens tk = {io.tok_offsets, io.tok_bytes, io.n_tokens, io.tok_total};
  if (!m->scratch) {
    const uint64_t bytes = (heatc::guard_slot(g) + 63) / 64 * 64;
    m->scratch = (uint8_t*)aligned_alloc(64, bytes);
    if (!m->scratch) return PyErr_NoMemory();
    memset(m->scratch, 0, bytes);  // clean (heatc::copy_for_try): a try copies only what it can read
  }
  const int64_t* c = cand.as<int64_t>();
  const uint8_t* t = tails.as<uint8_t>();
  uint8_t* out = mask.as<uint8_t>();
  const uint8_t* states = m->mem + at;
  uint8_t* scratch = m->scratch;
  uint32_t spent = 0;  // a try past its step budget: the tables are not a working program (or Limits.fuel)
  Py_BEGIN_ALLOW_THREADS
  for (uint64_t i = 0; i < n && !spent; i++) {
    bool passed = false;  // greedy: the best candidate that passes is taken, those below it are not judged
    for (uint64_t j = 0; j < k && !spent; j++) {
      int64_t id = c[i * k + j];
      // each try feeds the candidate, then at most a probe and a year's digits (8 bytes)
      uint64_t budget = steps(m, (id >= 0 && id < (int64_t)io.n_tokens ? token_bytes(io, (uint32_t)id) : 0) + 8);
      uint8_t v = passed && id >= 0 ? (uint8_t)HEATC_MASK_UNTRIED
                                    : heatc::guard_decide(g, tk, states + (uint64_t)r[i] * ss,
                                                          t + i * HEATC_GUARD_TAIL, id, scratch, budget, &spent, true);
      passed |= greedy && v == HEATC_MASK_ALLOWED;
      out[i * k + j] = v;
    }
  }
  Py_END_ALLOW_THREADS
  if (spent) {
    out_of_steps(m);  // (the states are only read: the checker and its batches go on)
    return nullptr;
  }
  Py_RETURN_NONE;
}

// tails(capacity, rows, n, ids, tails, marks, states, guarded, lengths, ck_step, ck_token,
// ck_tail, ck_state): for each i, the tail of row rows[i] (tails + row * HEATC_GUARD_TAIL,
// `capacity` of them) is advanced past token ids[i], and marks[i] says what the token does to
// the value the text is writing (HEATC_VALUE_*, heatc_kernels.h tail_mark). For the rows
// marked in `guarded` (capacity bytes) the checkpoints follow: where a value ends, ck_step[row]
// = -1; where one begins, ck_step[row] = lengths[row] (the tokens fed so far), ck_token[row] =
// the token, ck_tail[row] = the tail before it, ck_state[row] = the row's state record before
// it is fed (the state array at offset `states` of the module's memory). Returns how many
// rows began a value. The arrays are buffers (int64, or bytes), as for guard(); every row
// index is checked.
PyObject* module_tails(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  Module* m = (Module*)self;
  if (nargs != 13) {
    PyErr_SetString(PyExc_TypeError, "tails(capacity, rows, n, ids, tails, marks, states, guarded, lengths, ck_step, "
                                     "ck_token, ck_tail, ck_state)");
    return nullptr;
  }
  if (m->closed) {
    PyErr_SetString(m->trap, "the native module was closed");
    return nullptr;
  }
  uint64_t capacity = PyLong_AsUnsignedLongLong(args[0]), n = PyLong_AsUnsignedLongLong(args[2]);
  uint64_t at = PyLong_AsUnsignedLongLong(args[6]);
  if (PyErr_Occurred()) return nullptr;
  const uint64_t ss = P(STATE_SIZE), T = HEATC_GUARD_TAIL;
  if (n > capacity || capacity > 0xFFFFFFFFull || !in_mem(m, at, capacity * ss)) {
    trap(m, "states");
    return nullptr;
  }
  Buf rows(args[1], 8 * n, false, "rows"), ids(args[3], 8 * n, false, "ids");
  Buf tails(args[4], T * capacity, true, "tails"), marks(args[5], n, true, "marks");
  Buf guarded(args[7], capacity, false, "guarded"), lengths(args[8], 8 * capacity, false, "lengths");
  Buf ck_step(args[9], 8 * capacity, true, "ck_step"), ck_token(args[10], 8 * capacity, true, "ck_token");
  Buf ck_tail(args[11], T * capacity, true, "ck_tail"), ck_state(args[12], ss * capacity, true, "ck_state");
  if (!rows.ok || !ids.ok || !tails.ok || !marks.ok || !guarded.ok || !lengths.ok || !ck_step.ok || !ck_token.ok ||
      !ck_tail.ok || !ck_state.ok)
    return nullptr;
  const int64_t* r = rows.as<int64_t>();
  for (uint64_t i = 0; i < n; i++)
    if (r[i] < 0 || (uint64_t)r[i] >= capacity) {
      PyErr_Format(PyExc_IndexError, "tails: row %lld is outside the batch of %llu", (long long)r[i],
                   (unsigned long long)capacity);
      return nullptr;
    }
  heatc::Io io;
  if (load_io(m, io, true) < 0) return nullptr;
  heatc::Tokens tk = {io.tok_offsets, io.tok_bytes, io.n_tokens, io.tok_total};
  const int64_t* id = ids.as<int64_t>();
  const uint8_t* g = guarded.as<uint8_t>();
  const int64_t* len = lengths.as<int64_t>();
  int64_t* step = ck_step.as<int64_t>();
  int64_t* token = ck_token.as<int64_t>();
  uint8_t* all = tails.as<uint8_t>();
  uint8_t* mk = marks.as<uint8_t>();
  uint8_t* old = ck_tail.as<uint8_t>();
  uint8_t* saved = ck_state.as<uint8_t>();
  long begun = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t row = (uint64_t)r[i];
    mk[i] = (uint8_t)heatc::mark_row(m->prog, tk, m->mem + at + row * ss, all + row * T, id[i], g[row] != 0, len[row],
                                     step + row, token + row, old + row * T, saved + row * ss);
    begun += g[row] && mk[i] == HEATC_VALUE_BEGINS;
  }
  return PyLong_FromLong(begun);
}

PyObject* module_size(PyObject* self, void*) { return PyLong_FromUnsignedLongLong(((Module*)self)->size); }

PyMethodDef module_methods[] = {
    {"grow", module_grow, METH_O, "grow(size): make the visible memory at least `size` bytes; returns its size"},
    {"function", module_function, METH_O, "function(name): the entry point `name` (the WASM export's arguments)"},
    {"check_state", module_check_state, METH_O, "check_state(offset): None, or why the state record there is invalid"},
    {"tails", (PyCFunction)(void (*)(void))module_tails, METH_FASTCALL,
     "tails(capacity, rows, n, ids, tails, marks, states, guarded, lengths, ck_step, ck_token, ck_tail, ck_state): "
     "rows' last bytes past their tokens, value marks, checkpoints where values begin"},
    {"close", module_close, METH_NOARGS,
     "close(): refuse every later call; the memory is unmapped now, or when the last view of it is released"},
    {"guard", (PyCFunction)(void (*)(void))module_guard, METH_FASTCALL,
     "guard(states, capacity, rows, n, candidates, k, tails, mask, greedy): guard's decision for every candidate"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef module_getset[] = {{"size", module_size, nullptr, "bytes of visible memory", nullptr},
                               {nullptr, nullptr, nullptr, nullptr, nullptr}};

// ---- the torch ops' CPU kernel ----------------------------------------------------------
// The same per-sequence work as the CUDA kernels (heatc_kernels.h), looping over the batch.
// Arguments are the by-value structs as bytes (heatc_runtime.cuda.layout packs them) and the
// addresses of tensors whose shapes, dtypes and sizes the Python op has checked; the tables
// were checked once (check_tables below) when the program was loaded.

bool struct_arg(PyObject* obj, void* out, size_t size, const char* what) {
  Py_buffer b;
  if (PyObject_GetBuffer(obj, &b, PyBUF_SIMPLE) < 0) return false;
  bool ok = (size_t)b.len == size;
  if (ok)
    memcpy(out, b.buf, size);
  else
    PyErr_Format(PyExc_ValueError, "%s is %zd bytes, expected %zu (heatc_runtime.cuda.layout)", what, b.len, size);
  PyBuffer_Release(&b);
  return ok;
}

bool u64_args(PyObject* const* args, Py_ssize_t from, Py_ssize_t n, uint64_t* out) {
  for (Py_ssize_t i = 0; i < n; i++) {
    out[i] = PyLong_AsUnsignedLongLong(args[from + i]);
    if (out[i] == (uint64_t)-1 && PyErr_Occurred()) return false;
  }
  return true;
}

bool op_args(const char* name, Py_ssize_t n, Py_ssize_t want, PyObject* const* args, heatc::Program* g,
             heatc::Tokens* tk) {
  if (n != want) {
    PyErr_Format(PyExc_TypeError, "%s() takes %d arguments", name, (int)want);
    return false;
  }
  if (!struct_arg(args[0], g, sizeof *g, "the program struct")) return false;
  return !tk || struct_arg(args[1], tk, sizeof *tk, "the token table struct");
}

// op_step(program, tokens, states, ids, lengths, n, t_max, out, ev_keep, snap_keep, tails)
PyObject* op_step(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  heatc::Program g;
  heatc::Tokens tk;
  uint64_t a[9];
  if (!op_args("op_step", nargs, 11, args, &g, &tk) || !u64_args(args, 2, 9, a)) return nullptr;
  uint8_t* tails = (uint8_t*)a[8];
  uint8_t* states = (uint8_t*)a[0];
  const int64_t* ids = (const int64_t*)a[1];
  const int64_t* lengths = (const int64_t*)a[2];
  uint64_t n = a[3], t_max = a[4];
  uint8_t* out = (uint8_t*)a[5];
  uint32_t ev_keep = (uint32_t)a[6], snap_keep = (uint32_t)a[7];
  const uint64_t ss = g.p[HEATC_P_STATE_SIZE], rb = heatc::row_bytes(g, ev_keep, snap_keep);
  Py_BEGIN_ALLOW_THREADS
  for (uint64_t i = 0; i < n; i++) {
    uint32_t len = (uint32_t)t_max;
    if (lengths) len = lengths[i] < 0 ? 0u : lengths[i] > (int64_t)t_max ? (uint32_t)t_max : (uint32_t)lengths[i];
    heatc::step_row(g, tk, states + i * ss, out + i * rb, ev_keep, snap_keep, (uint32_t)i, ids + i * t_max, len,
                    nullptr, tails ? tails + i * HEATC_GUARD_TAIL : nullptr);
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// op_text(program, states, text, text_len, offsets, n, out, ev_keep, snap_keep, mode)
PyObject* op_text(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  heatc::Program g;
  uint64_t a[9];
  if (!op_args("op_text", nargs, 10, args, &g, nullptr) || !u64_args(args, 1, 9, a)) return nullptr;
  uint8_t* states = (uint8_t*)a[0];
  const uint8_t* text = (const uint8_t*)a[1];
  uint64_t text_len = a[2];
  const int64_t* offsets = (const int64_t*)a[3];
  uint64_t n = a[4];
  uint8_t* out = (uint8_t*)a[5];
  uint32_t ev_keep = (uint32_t)a[6], snap_keep = (uint32_t)a[7], mode = (uint32_t)a[8];
  const uint64_t ss = g.p[HEATC_P_STATE_SIZE], rb = heatc::row_bytes(g, ev_keep, snap_keep);
  Py_BEGIN_ALLOW_THREADS
  for (uint64_t i = 0; i < n; i++)
    heatc::text_row(g, states + i * ss, out + i * rb, ev_keep, snap_keep, (uint32_t)i, text, text_len, offsets[i],
                    offsets[i + 1], mode);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// op_guard(program, tokens, states, tails, cand, n, k, scratch, mask, look): look 0 feeds each
// candidate, 1 also ends the text there (the raw looks), 2 is guard's decision (tails: null
// reads as texts with no bytes before)
PyObject* op_guard(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  heatc::Program g;
  heatc::Tokens tk;
  uint64_t a[8];
  if (!op_args("op_guard", nargs, 10, args, &g, &tk) || !u64_args(args, 2, 8, a)) return nullptr;
  const uint8_t* states = (const uint8_t*)a[0];
  const uint8_t* tails = (const uint8_t*)a[1];
  const int64_t* cand = (const int64_t*)a[2];
  uint64_t n = a[3], k = a[4];
  uint8_t* scratch = (uint8_t*)a[5];
  uint8_t* mask = (uint8_t*)a[6];
  uint32_t look = (uint32_t)a[7];
  const uint64_t ss = g.p[HEATC_P_STATE_SIZE], slot = heatc::guard_slot(g);
  static const uint8_t no_tail[HEATC_GUARD_TAIL] = {0};
  Py_BEGIN_ALLOW_THREADS
  for (uint64_t i = 0; i < n; i++)
    for (uint64_t j = 0; j < k; j++) {
      uint8_t* sc = scratch + (i * k + j) * slot;
      if (look == 2) {
        mask[i * k + j] = heatc::guard_decide(g, tk, states + i * ss, tails ? tails + i * HEATC_GUARD_TAIL : no_tail,
                                              cand[i * k + j], sc);
      } else {
        memcpy(sc, states + i * ss, ss);
        mask[i * k + j] = heatc::guard_candidate(g, tk, sc, cand[i * k + j], look);
      }
    }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// op_mark(program, tokens, states, tails, ids, guarded, lengths, ck_step, ck_token, ck_tail, ck_state, n):
// each row's tail past its token and its value checkpoint (heatc_kernels.h mark_row); a
// negative id feeds nothing (the row is left as it is)
PyObject* op_mark(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  heatc::Program g;
  heatc::Tokens tk;
  uint64_t a[10];
  if (!op_args("op_mark", nargs, 12, args, &g, &tk) || !u64_args(args, 2, 10, a)) return nullptr;
  const uint8_t* states = (const uint8_t*)a[0];
  uint8_t* tails = (uint8_t*)a[1];
  const int64_t* ids = (const int64_t*)a[2];
  const uint8_t* guarded = (const uint8_t*)a[3];
  const int64_t* lengths = (const int64_t*)a[4];
  int64_t* ck_step = (int64_t*)a[5];
  int64_t* ck_token = (int64_t*)a[6];
  uint8_t* ck_tail = (uint8_t*)a[7];
  uint8_t* ck_state = (uint8_t*)a[8];
  uint64_t n = a[9];
  const uint64_t ss = g.p[HEATC_P_STATE_SIZE], T = HEATC_GUARD_TAIL;
  Py_BEGIN_ALLOW_THREADS
  for (uint64_t i = 0; i < n; i++)
    if (ids[i] >= 0)
      heatc::mark_row(g, tk, states + i * ss, tails + i * T, ids[i], guarded[i] != 0, lengths[i], ck_step + i,
                      ck_token + i, ck_tail + i * T, ck_state + i * ss);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// check_tables(tables, params): None, or why the core cannot run these tables
PyObject* op_check_tables(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "check_tables(tables, params)");
    return nullptr;
  }
  Py_buffer b;
  if (PyObject_GetBuffer(args[0], &b, PyBUF_SIMPLE) < 0) return nullptr;
  Module m;  // (only its program and size: check_tables reads nothing else)
  memset((void*)&m, 0, sizeof m);
  m.prog.t = (const uint8_t*)b.buf;
  heatc::whole_tables(m.prog);  // (check_tables reads rule records through the tier bases)
  m.tables_size = (uint32_t)b.len;
  PyObject* seq = PySequence_Fast(args[1], "params must be a sequence of ints");
  const char* problem = nullptr;
  if (seq && PySequence_Fast_GET_SIZE(seq) == HEATC_N_PARAMS && b.len <= 0x7FFFFFFF) {
    for (int i = 0; i < HEATC_N_PARAMS && !PyErr_Occurred(); i++)
      m.prog.p[i] = (uint32_t)PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(seq, i));
    if (!PyErr_Occurred()) problem = check_tables(&m);
  } else if (seq) {
    PyErr_Format(PyExc_ValueError, "expected %d parameters and tables under 2 GB", (int)HEATC_N_PARAMS);
  }
  Py_XDECREF(seq);
  PyBuffer_Release(&b);
  if (PyErr_Occurred()) return nullptr;
  if (!problem) Py_RETURN_NONE;
  return PyUnicode_FromString(problem);
}

// skipper() names the skipper's implementation in use; skipper(name) picks another ("none",
// "scalar", and the instruction sets this machine runs: the tests run each) and returns it
PyObject* op_skipper(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  using namespace heatc::skip;
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "skipper([name])");
    return nullptr;
  }
  if (nargs == 1) {
    const char* name = PyUnicode_AsUTF8(args[0]);
    if (!name) return nullptr;
    int isa = ISA_NONE;
    while (isa < N_ISA && strcmp(name, ISA_NAMES[isa])) isa++;
    if (isa == N_ISA || (isa != ISA_NONE && !implementation((Isa)isa))) {
      PyErr_Format(PyExc_ValueError, "no skipper %R on this machine (skippers() lists its own)", args[0]);
      return nullptr;
    }
    heatc::skip_isa = (Isa)isa;
    heatc::skip_fn = implementation((Isa)isa);
  }
  return PyUnicode_FromString(ISA_NAMES[heatc::skip_isa]);
}

// the skipper's implementations this machine runs, slowest first
PyObject* op_skippers(PyObject*, PyObject* const*, Py_ssize_t) {
  using namespace heatc::skip;
  PyObject* out = PyList_New(0);
  for (int isa = ISA_NONE; out && isa < N_ISA; isa++) {
    if (isa != ISA_NONE && !implementation((Isa)isa)) continue;
    PyObject* name = PyUnicode_FromString(ISA_NAMES[isa]);
    if (!name || PyList_Append(out, name) < 0) Py_CLEAR(out);
    Py_XDECREF(name);
  }
  return out;
}

// topk(scores, rows, vocab, index, n, k, values, ids): the k best of each of n rows of
// `scores` (float32, rows × vocab; index: int64 n of row numbers, or None for rows 0..n-1)
// into values (float32 n × k) and ids (int64 n × k), best first, ties by the lower id
// (heatc_topk.h). Every buffer's size and every row number is checked.
PyObject* op_topk(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 8) {
    PyErr_SetString(PyExc_TypeError, "topk(scores, rows, vocab, index, n, k, values, ids)");
    return nullptr;
  }
  uint64_t rows = PyLong_AsUnsignedLongLong(args[1]), vocab = PyLong_AsUnsignedLongLong(args[2]);
  uint64_t n = PyLong_AsUnsignedLongLong(args[4]), k = PyLong_AsUnsignedLongLong(args[5]);
  if (PyErr_Occurred()) return nullptr;
  if (k < 1 || k > 64 || k > vocab || rows > (1ull << 24) || vocab > (1ull << 28)) {
    PyErr_Format(PyExc_ValueError, "topk: k %llu of a vocabulary of %llu (1 <= k <= 64)", (unsigned long long)k,
                 (unsigned long long)vocab);
    return nullptr;
  }
  const bool all = args[3] == Py_None;
  if (all && n > rows) {
    PyErr_Format(PyExc_IndexError, "topk: %llu rows of %llu", (unsigned long long)n, (unsigned long long)rows);
    return nullptr;
  }
  Buf scores(args[0], 4 * rows * vocab, false, "scores"), values(args[6], 4 * n * k, true, "values");
  Buf ids(args[7], 8 * n * k, true, "ids");
  if (!scores.ok || !values.ok || !ids.ok) return nullptr;
  const int64_t* index = nullptr;
  Py_buffer ib;
  if (!all) {
    if (PyObject_GetBuffer(args[3], &ib, PyBUF_SIMPLE) < 0) return nullptr;
    index = (const int64_t*)ib.buf;
    bool ok = (uint64_t)ib.len == 8 * n;
    for (uint64_t i = 0; ok && i < n; i++) ok = index[i] >= 0 && (uint64_t)index[i] < rows;
    if (!ok) {
      PyBuffer_Release(&ib);
      PyErr_Format(PyExc_IndexError, "topk: index must be %llu row numbers below %llu", (unsigned long long)n,
                   (unsigned long long)rows);
      return nullptr;
    }
  }
  const float* x = scores.as<float>();
  float* v = values.as<float>();
  int64_t* id = ids.as<int64_t>();
  Py_BEGIN_ALLOW_THREADS
  for (uint64_t i = 0; i < n; i++)
    heatc::topk_row(x + (all ? i : (uint64_t)index[i]) * vocab, vocab, (uint32_t)k, v + i * k, id + i * k);
  Py_END_ALLOW_THREADS
  if (!all) PyBuffer_Release(&ib);
  Py_RETURN_NONE;
}

PyMethodDef native_functions[] = {
    {"skipper", (PyCFunction)(void (*)(void))op_skipper, METH_FASTCALL,
     "skipper([name]): the idle-stretch skipper's implementation in use, after picking `name` if given"},
    {"skippers", (PyCFunction)(void (*)(void))op_skippers, METH_FASTCALL,
     "skippers(): the skipper's implementations this machine runs ('none' first, the fastest last)"},
    {"op_step", (PyCFunction)(void (*)(void))op_step, METH_FASTCALL,
     "op_step(program, tokens, states, ids, lengths, n, t_max, out, ev_keep, snap_keep, tails)"},
    {"op_text", (PyCFunction)(void (*)(void))op_text, METH_FASTCALL,
     "op_text(program, states, text, text_len, offsets, n, out, ev_keep, snap_keep, mode)"},
    {"op_guard", (PyCFunction)(void (*)(void))op_guard, METH_FASTCALL,
     "op_guard(program, tokens, states, tails, cand, n, k, scratch, mask, look)"},
    {"op_mark", (PyCFunction)(void (*)(void))op_mark, METH_FASTCALL,
     "op_mark(program, tokens, states, tails, ids, guarded, lengths, ck_step, ck_token, ck_tail, ck_state, n)"},
    {"topk", (PyCFunction)(void (*)(void))op_topk, METH_FASTCALL,
     "topk(scores, rows, vocab, index, n, k, values, ids): each row's k best scores, best first, ties by the lower id"},
    {"check_tables", (PyCFunction)(void (*)(void))op_check_tables, METH_FASTCALL,
     "check_tables(tables, params): None, or why the core cannot run these tables"},
    {"events_json", (PyCFunction)(void (*)(void))heatc_json::events_json, METH_FASTCALL,
     "events_json(text, n, fast, start, end, char_start, char_end, key, rule, captures, n_captures, failed, "
     "prefixes, capture_keys, failed_texts, general): an audit report's events as JSON (heatc_audit_json.h)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "_native",
                             "The heatc core on the CPU (cuda_bridge/include/heatc_core.h).", -1, native_functions};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
  ModuleType.tp_name = "heatc_runtime._native.Module";
  ModuleType.tp_basicsize = sizeof(Module);
  ModuleType.tp_flags = Py_TPFLAGS_DEFAULT;
  ModuleType.tp_new = module_new;
  ModuleType.tp_dealloc = module_dealloc;
  ModuleType.tp_as_buffer = &module_buffer;
  ModuleType.tp_methods = module_methods;
  ModuleType.tp_getset = module_getset;
  ModuleType.tp_doc =
      "Module(tables, params, memory_bytes, control, trap, steps=0): one program and its memory (steps: the most "
      "steps one call may take, 0 for the automatic budget alone)";
  CallType.tp_name = "heatc_runtime._native.Call";
  CallType.tp_basicsize = sizeof(Call);
  CallType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  CallType.tp_vectorcall_offset = offsetof(Call, vectorcall);
  CallType.tp_call = PyVectorcall_Call;
  CallType.tp_dealloc = call_dealloc;
  CallType.tp_methods = call_methods;
  if (PyType_Ready(&ModuleType) < 0 || PyType_Ready(&CallType) < 0) return nullptr;
#if defined(HEATC_SKIP_X86)
  __builtin_cpu_init();
#endif
  heatc::skip_isa = heatc::skip::best();
  heatc::skip_fn = heatc::skip::implementation(heatc::skip_isa);
  PyObject* mod = PyModule_Create(&native_module);
  if (!mod) return nullptr;
  Py_INCREF(&ModuleType);
  if (PyModule_AddObject(mod, "Module", (PyObject*)&ModuleType) < 0 ||
      PyModule_AddIntConstant(mod, "N_PARAMS", HEATC_N_PARAMS) < 0) {
    Py_DECREF(mod);
    return nullptr;
  }
  return mod;
}
