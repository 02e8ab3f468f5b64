// The per-sequence work of the torch ops (docs/cuda.md): one sequence's tokens, text or guard
// candidates, each on one state record, writing one output row. The CUDA kernels
// (cuda_bridge/kernels/heatc_step.cu) run one of these per sequence (a thread or a group of
// lanes each); the ops' CPU kernel (heatc_native.cpp) loops over the sequences. Same rules as
// heatc_core.h: HEATC_HD only, no allocation, no libc.
#pragma once

#include "heatc_core.h"

namespace heatc {

// The token table: token i's bytes are bytes[offsets[i] .. offsets[i + 1]).
struct Tokens {
  const uint32_t* offsets;
  const uint8_t* bytes;
  uint32_t n, total;
};

// the by-value kernel arguments are laid out as heatc_runtime.cuda.layout packs them
static_assert(sizeof(Program) == HEATC_PROGRAM_BYTES, "heatc::Program differs from heatc_runtime.cuda.layout");
#ifndef __CUDACC_RTC__  // (NVRTC 13.0 knows no offsetof builtin; nvcc and the host compiler check it)
static_assert(__builtin_offsetof(Program, base) == HEATC_PROGRAM_BASE, "heatc::Program's tiers moved");
#endif
static_assert(sizeof(Tokens) == HEATC_TOKENS_BYTES, "heatc::Tokens differs from heatc_runtime.cuda.layout");

HEATC_HD HEATC_INLINE uint64_t row_bytes(const Program& g, uint32_t ev_keep, uint32_t snap_keep) {
  return HEATC_OUT_HEAD + (uint64_t)(ev_keep + 1) * g.p[HEATC_P_EVENT_SIZE] +
         (uint64_t)snap_keep * g.p[HEATC_P_SNAPSHOT_SIZE];
}

// An Io over one output row: it stores the first ev_keep events and snap_keep snapshots and
// counts the rest, so a call never stops for room.
HEATC_HD HEATC_INLINE Io row_io(const Program& g, uint8_t* row, uint32_t ev_keep, uint32_t snap_keep,
                                const Tokens& tk, uint32_t quiet) {
  Io io;
  io.ev = row + HEATC_OUT_HEAD;
  io.ev_cap = 0xFFFFFFFFu;
  io.ev_count = 0;
  io.ev_keep = ev_keep;
  io.ev_scratch = io.ev + (uint64_t)ev_keep * g.p[HEATC_P_EVENT_SIZE];
  io.snap = io.ev_scratch + g.p[HEATC_P_EVENT_SIZE];
  io.snap_cap = 0xFFFFFFFFu;
  io.snap_count = 0;
  io.snap_keep = snap_keep;
  io.tok_offsets = tk.offsets;
  io.n_tokens = tk.n;
  io.tok_bytes = tk.bytes;
  io.tok_total = tk.total;
  io.status = 0;
  io.bad_index = 0;
  io.quiet = quiet;
  return io;
}

HEATC_HD HEATC_INLINE uint64_t rejections(const Program& g, const uint8_t* s) {
  return ld<uint64_t>(s + g.p[HEATC_P_OFF_REJECTIONS]);
}

HEATC_HD HEATC_INLINE void row_close(const Program& g, uint8_t* row, const Io& io, const uint8_t* s, uint64_t before,
                                     uint32_t consumed) {
  uint64_t after = rejections(g, s);
  st<uint32_t>(row + HEATC_OUT_STATUS, io.status);
  st<uint32_t>(row + HEATC_OUT_CONSUMED, consumed);
  st<uint32_t>(row + HEATC_OUT_EVENTS, io.ev_count);
  st<uint32_t>(row + HEATC_OUT_SNAPSHOTS, io.snap_count);
  st<uint32_t>(row + HEATC_OUT_NEW_REJECTIONS, (uint32_t)(after - before));
  st<uint32_t>(row + HEATC_OUT_FINISHED, ld<uint32_t>(s + g.p[HEATC_P_OFF_FLAGS]) & 1);
  st<uint64_t>(row + HEATC_OUT_REJECTIONS, after);
}

// the last 16 bytes of a text, right-aligned (0 where it has none: 0 is no digit, "." or ",")
struct Ends {
  uint8_t b[16];
};

HEATC_HD HEATC_INLINE void ends_push(Ends& e, const uint8_t* p, uint32_t n) {
  uint32_t take = n < 16 ? n : 16;  // (the last 16 bytes of a longer piece)
  p += n - take;
  for (uint32_t j = 0; j + take < 16; j++) e.b[j] = e.b[j + take];
  for (uint32_t j = 0; j < take; j++) e.b[16 - take + j] = p[j];
}

// A sequence's tail (HEATC_GUARD_TAIL bytes, right-aligned) after token `id` (out of range:
// unchanged).
HEATC_HD HEATC_INLINE void tail_advance(const Tokens& tk, uint8_t* tail, int64_t id) {
  if (id < 0 || id >= (int64_t)tk.n) return;
  uint32_t off = tk.offsets[id], stop = tk.offsets[id + 1];
  if (off > stop || stop > tk.total) return;
  Ends e;
  for (uint32_t j = 0; j < 16; j++) e.b[j] = j < 16 - HEATC_GUARD_TAIL ? 0 : tail[j - (16 - HEATC_GUARD_TAIL)];
  ends_push(e, tk.bytes + off, stop - off);
  for (uint32_t j = 0; j < HEATC_GUARD_TAIL; j++) tail[j] = e.b[16 - HEATC_GUARD_TAIL + j];
}

HEATC_HD HEATC_INLINE bool tail_digit(uint32_t b) { return b - '0' < 10u; }

// Token `id` after a text ending in `tail`: HEATC_VALUE_BEGINS when a number begins in it (its
// trailing run of digits, "." and "," holds a digit and does not go on from a number the text
// ended in), HEATC_VALUE_ENDS when it ends the number the text held (no such digit, not
// whitespace, not a continuation), 0 otherwise (heatc_runtime.engines.guarding.Tails.value_marks
// is the same in numpy). The tail is then advanced past the token.
HEATC_HD HEATC_INLINE uint32_t tail_mark(const Tokens& tk, uint8_t* tail, int64_t id) {
  if (id < 0 || id >= (int64_t)tk.n) return 0;
  uint32_t off = tk.offsets[id], stop = tk.offsets[id + 1];
  if (off > stop || stop > tk.total) return 0;
  const uint8_t* t = tk.bytes + off;
  uint32_t n = stop - off, run = 0;
  bool run_digit = false, space = n > 0;
  while (run < n) {
    uint32_t b = t[n - 1 - run];
    if (!(tail_digit(b) || b == '.' || b == ',')) break;
    run_digit |= tail_digit(b);
    run++;
  }
  for (uint32_t i = 0; i < n && space; i++) space = t[i] == ' ' || (t[i] >= 9 && t[i] <= 13);
  uint32_t last = tail[HEATC_GUARD_TAIL - 1], before = tail[HEATC_GUARD_TAIL - 2];
  bool open = tail_digit(last) || ((last == '.' || last == ',') && tail_digit(before));
  bool cont = run == n && n > 0 && open;
  uint32_t mark = run_digit && !cont ? HEATC_VALUE_BEGINS : (!cont && !run_digit && !space ? HEATC_VALUE_ENDS : 0);
  tail_advance(tk, tail, id);
  return mark;
}

// Before token `id` is fed to a row whose state is at `state`: its tail advanced past the token
// (tail_mark), and for a guarded row the checkpoint of the value it writes — where one begins,
// the token's index (`length`, the tokens fed so far), the token, the tail before it and the
// state record; where one ends, none (ck_step -1). The host driver keeps the same
// (heatc_runtime.engines.core: Module.tails; the numpy code on WASM); returns the mark.
HEATC_HD HEATC_INLINE uint32_t mark_row(const Program& g, const Tokens& tk, const uint8_t* state, uint8_t* tail,
                                        int64_t id, bool guarded, int64_t length, int64_t* ck_step,
                                        int64_t* ck_token, uint8_t* ck_tail, uint8_t* ck_state) {
  uint8_t before[HEATC_GUARD_TAIL];
  for (uint32_t j = 0; j < HEATC_GUARD_TAIL; j++) before[j] = tail[j];
  uint32_t mk = tail_mark(tk, tail, id);
  if (!guarded) return mk;
  if (mk == HEATC_VALUE_ENDS) *ck_step = -1;
  if (mk == HEATC_VALUE_BEGINS) {
    *ck_step = length;
    *ck_token = id;
    for (uint32_t j = 0; j < HEATC_GUARD_TAIL; j++) ck_tail[j] = before[j];
    const uint32_t ss = g.p[HEATC_P_STATE_SIZE];
    for (uint32_t w = 0; w < ss / 8; w++) ((uint64_t*)ck_state)[w] = ((const uint64_t*)state)[w];  // (8-aligned)
  }
  return mk;
}

// `n` tokens (ids[0..n)) for one sequence; stops at the first it refuses (an id out of range,
// a finished stream: the row's status says which, `consumed` how many went in).
// With `tail` (HEATC_GUARD_TAIL bytes), the sequence's last bytes follow the tokens fed (guard
// reads them).
HEATC_HD HEATC_CALL void step_row(const Program& g, const Tokens& tk, uint8_t* s, uint8_t* row, uint32_t ev_keep,
                                  uint32_t snap_keep, uint32_t seq, const int64_t* ids, uint32_t n,
                                  void* helpers = nullptr, uint8_t* tail = nullptr) {
  Io io = row_io(g, row, ev_keep, snap_keep, tk, 0);
  io.helpers = helpers;
  uint64_t before = rejections(g, s);
  uint32_t done = 0;
  for (; done < n; done++) {
    int64_t id = ids[done];
    if (id < 0 || id >= (int64_t)tk.n) {
      io.status = HEATC_STATUS_BAD_TOKEN;
      break;
    }
    if (!step(g, io, s, seq, (uint32_t)id)) {
      if (!io.status) io.status = HEATC_OUT_STATUS_NO_ROOM;
      break;
    }
    if (tail) tail_advance(tk, tail, id);
  }
  row_close(g, row, io, s, before, done);
}

// A text for one sequence, text[from .. to) of the `total` bytes at `text`: mode 0 feeds it as
// one token (a prompt, continuing the stream), mode 1 scans it as a whole document (reset,
// feed, finish; only the final snapshot). Offsets outside the text feed nothing (status).
HEATC_HD HEATC_CALL void text_row(const Program& g, uint8_t* s, uint8_t* row, uint32_t ev_keep, uint32_t snap_keep,
                                  uint32_t seq, const uint8_t* text, uint64_t total, int64_t from, int64_t to,
                                  uint32_t mode) {
  Tokens none = {nullptr, nullptr, 0, 0};
  Io io = row_io(g, row, ev_keep, snap_keep, none, mode == 1);
  if (from < 0 || to < from || (uint64_t)to > total || to - from > 0xFFFFFFFFll) {
    io.status = HEATC_OUT_STATUS_BAD_TEXT;
    row_close(g, row, io, s, rejections(g, s), 0);
    return;
  }
  uint32_t len = (uint32_t)(to - from);
  text += from;
  uint64_t before = mode == 1 ? 0 : rejections(g, s);
  uint32_t done = mode == 1 ? scan_document(g, io, s, seq, text, len) : feed(g, io, s, seq, text, len, 1);
  if (!io.status && done != len) io.status = HEATC_OUT_STATUS_NO_ROOM;
  row_close(g, row, io, s, before, done);
}

// ---- guard's decision (heatc_runtime.engines.guarding is the definition) --------------------
//
// A candidate passes when the text with it, ended there, has no more rejections than the text
// before it; one that leaves a number open also passes when the number continued by a probe
// has none; a text that then ends in a year's four digits must pass read as the number too.
// Each try copies the sequence's state into `scratch` (a state record, then one event record)
// and runs there: the sequence itself is only read.

// bytes of one guard scratch slot: a state record, then one event record
HEATC_HD HEATC_INLINE uint64_t guard_slot(const Program& g) {
  return (uint64_t)g.p[HEATC_P_STATE_SIZE] + g.p[HEATC_P_EVENT_SIZE];
}

HEATC_HD HEATC_INLINE bool guard_digit(uint32_t b) { return b - '0' < 10u; }

// the text ends in four digits from 1900 to 2199, not after a digit, "." or ","
HEATC_HD HEATC_INLINE bool year_shaped(const Ends& e) {
  const char* c = HEATC_GUARD_CENTURIES;
  bool century = false;
  for (uint32_t i = 0; c[i]; i += 2) century |= e.b[12] == (uint8_t)c[i] && e.b[13] == (uint8_t)c[i + 1];
  uint32_t before = e.b[11];
  return century && guard_digit(e.b[12]) && guard_digit(e.b[13]) && guard_digit(e.b[14]) && guard_digit(e.b[15]) &&
         !guard_digit(before) && before != '.' && before != ',';
}

// the text ends inside a number: a digit, or a digit and "." or ","
HEATC_HD HEATC_INLINE bool opens_number(const Ends& e) {
  uint32_t last = e.b[15];
  return guard_digit(last) || ((last == '.' || last == ',') && guard_digit(e.b[14]));
}

HEATC_HD HEATC_INLINE void copy_state(uint8_t* dst, const uint8_t* src, uint32_t ss) {
  for (uint32_t w = 0; w < ss / 8; w++) ((uint64_t*)dst)[w] = ((const uint64_t*)src)[w];  // (records are 8-aligned)
}

// A *clean* scratch slot: every rule whose bit in active_rules is clear has no live thread
// slot there (as in any state record: step_rule keeps the bits in step with the slots).
// A try then needs of the sequence only what it can read: the state's head — everything
// before the first rule's state: lexer, counters, active_rules, look-behind, anchors,
// channels — and the states of the rules with live threads; a rule with none reads only its
// slots' `active` bytes, which a clean slot has at 0. (The learned medical heatmap: 384 bytes
// of head and a few rules' slots instead of 11,824 bytes a try.) Rules' `rejected` and
// `matches` words are left stale: a try compares the head's rejections only, and stores no
// snapshot (which would read verdicts).
HEATC_HD HEATC_INLINE void copy_for_try(const Program& g, uint8_t* dst, const uint8_t* src) {
  const uint32_t head =
      g.p[HEATC_P_N_RULES] ? ld<uint32_t>(rule_rec(g, 0) + HEATC_RULE_STATE_OFF) : g.p[HEATC_P_STATE_SIZE];
  copy_state(dst, src, head);
  ActiveRules each = active_rules(g);
  uint32_t r;
  while (next_active(g, src, each, r)) {
    const uint8_t* rec = rule_rec(g, r);
    const uint32_t off = ld<uint32_t>(rec + HEATC_RULE_STATE_OFF) + 8;
    copy(dst + off, src + off,
         (ld<uint32_t>(rec + HEATC_RULE_N_ELEMENTS) - 1) * ld<uint32_t>(rec + HEATC_RULE_SLOT_SIZE));
  }
}

// After a try on a clean slot: the slots of the rules it left live go back to dead (as
// finish() ends them), so the slot is clean for the next try.
HEATC_HD HEATC_INLINE void clean_after_try(const Program& g, uint8_t* s) {
  ActiveRules each = active_rules(g);
  uint32_t r;
  while (next_active(g, s, each, r)) {
    const uint8_t* rec = rule_rec(g, r);
    zero(s + ld<uint32_t>(rec + HEATC_RULE_STATE_OFF) + 8,
         (ld<uint32_t>(rec + HEATC_RULE_N_ELEMENTS) - 1) * ld<uint32_t>(rec + HEATC_RULE_SLOT_SIZE));
  }
}

// one try: the candidate (then `extra`, as one more token) on a copy of `src`, the text ended
// there; whether the rejections stayed at `base`. `steps` is the try's step budget (Io's
// steps_left: the host's, for tables it does not trust); past it `out_of_steps` is set and
// the try fails. With `clean` the scratch slot is clean (copy_for_try), and is left clean.
HEATC_HD HEATC_CALL bool guard_try(const Program& g, const Tokens& tk, const uint8_t* src, uint8_t* scratch,
                                   uint32_t id, const uint8_t* extra, uint32_t n_extra, uint64_t base,
                                   uint64_t steps, uint32_t& out_of_steps, bool clean) {
  const uint32_t ss = g.p[HEATC_P_STATE_SIZE];
  if (clean)
    copy_for_try(g, scratch, src);
  else
    copy_state(scratch, src, ss);
  Io io = row_io(g, scratch + ss - HEATC_OUT_HEAD, 0, 0, tk, 1);  // counts, stores nothing
  io.steps_left = steps;
  step(g, io, scratch, 0, id);
  if (n_extra && !io.out_of_steps) feed(g, io, scratch, 0, extra, n_extra, 1);
  if (!io.out_of_steps) flush_lexer(g, io, scratch, 0);
  out_of_steps |= io.out_of_steps;
  const bool kept = !io.out_of_steps && rejections(g, scratch) == base;
  if (clean) clean_after_try(g, scratch);
  return kept;
}

// The decision for candidate `id` of the sequence at `src` whose text ends in `tail`
// (HEATC_GUARD_TAIL bytes, right-aligned): HEATC_MASK_ALLOWED, _REJECTED, or _REFUSED (an id
// out of range or negative — unusable —, or a finished stream). Each try runs under `steps`
// (the native host's budget; unlimited by default); a try past it sets `*out_of_steps` and
// the decision is _REFUSED (the host raises a trap instead of using it).
// `clean`: the scratch slot is kept clean between calls (copy_for_try: the native host's one
// slot, zeroed when made).
HEATC_HD HEATC_CALL uint8_t guard_decide(const Program& g, const Tokens& tk, const uint8_t* src, const uint8_t* tail,
                                         int64_t id, uint8_t* scratch, uint64_t steps = ~0ull,
                                         uint32_t* out_of_steps = nullptr, bool clean = false) {
  if (id < 0 || id >= (int64_t)tk.n || (ld<uint32_t>(src + g.p[HEATC_P_OFF_FLAGS]) & 1)) return HEATC_MASK_REFUSED;
  uint32_t off = tk.offsets[id], stop = tk.offsets[id + 1];
  if (off > stop || stop > tk.total) return HEATC_MASK_REFUSED;
  const uint8_t* tok = tk.bytes + off;
  const uint32_t n = stop - off;
  const uint64_t base = rejections(g, src);
  Ends e;
  for (uint32_t j = 0; j < 16; j++) e.b[j] = j < 16 - HEATC_GUARD_TAIL ? 0 : tail[j - (16 - HEATC_GUARD_TAIL)];
  ends_push(e, tok, n);
  const uint8_t* as_number = (const uint8_t*)HEATC_GUARD_AS_NUMBER;
  const uint32_t n_as = sizeof(HEATC_GUARD_AS_NUMBER) - 1;
  uint32_t spent = 0;
  bool ok = guard_try(g, tk, src, scratch, (uint32_t)id, nullptr, 0, base, steps, spent, clean);
  // a number must not escape its rule by growing into a year
  if (ok && n && year_shaped(e)) ok = guard_try(g, tk, src, scratch, (uint32_t)id, as_number, n_as, base, steps, spent, clean);
  if (!ok && !spent && n && opens_number(e)) {
    const uint8_t* probes = (const uint8_t*)HEATC_GUARD_PROBE_TEXT;
    const uint32_t lengths[HEATC_GUARD_N_PROBES] = HEATC_GUARD_PROBE_LENGTHS;
    uint32_t at = 0;
    for (uint32_t q = 0; q < HEATC_GUARD_N_PROBES && !ok && !spent; at += lengths[q], q++) {
      bool passed = guard_try(g, tk, src, scratch, (uint32_t)id, probes + at, lengths[q], base, steps, spent, clean);
      if (passed) {
        Ends f = e;
        ends_push(f, probes + at, lengths[q]);
        if (year_shaped(f)) {
          uint8_t both[8];  // the probe, then AS_NUMBER, as one token
          for (uint32_t j = 0; j < lengths[q]; j++) both[j] = probes[at + j];
          for (uint32_t j = 0; j < n_as; j++) both[lengths[q] + j] = as_number[j];
          passed = guard_try(g, tk, src, scratch, (uint32_t)id, both, lengths[q] + n_as, base, steps, spent, clean);
        }
      }
      ok = passed;
    }
  }
  if (spent) {
    if (out_of_steps) *out_of_steps = 1;
    return HEATC_MASK_REFUSED;
  }
  return ok ? HEATC_MASK_ALLOWED : HEATC_MASK_REJECTED;
}

// The guard's raw look at one candidate (no probes, no years): fed, and with `flush` the text
// ended there; REJECTED if that completed a match that failed.
HEATC_HD HEATC_CALL uint8_t guard_candidate(const Program& g, const Tokens& tk, uint8_t* scratch, int64_t id,
                                            uint32_t flush) {
  Io io = row_io(g, scratch + g.p[HEATC_P_STATE_SIZE] - HEATC_OUT_HEAD, 0, 0, tk, 1);
  uint64_t before = rejections(g, scratch);
  if (id < 0 || id >= (int64_t)tk.n || !step(g, io, scratch, 0, (uint32_t)id)) return HEATC_MASK_REFUSED;
  if (flush) flush_lexer(g, io, scratch, 0);
  return rejections(g, scratch) > before ? HEATC_MASK_REJECTED : HEATC_MASK_ALLOWED;
}

}  // namespace heatc
