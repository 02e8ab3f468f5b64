// heatc core: one sequence's state machine over the packed tables of rules.hct, written once
// for the CPU (the native backend) and the GPU (NVRTC / nvcc compile this same file).
//
// Semantics: docs/semantics.md (the reference interpreter is the specification). State
// record, records and tables: docs/abi.md. Every function here steps one sequence's state
// record (`st`, the WASM module's layout byte for byte: a state moves between backends) and
// writes events and snapshots in the WASM module's record layouts.
//
// Rules for this file, so that the GPU build keeps compiling it: no exceptions, no STL, no
// allocation, no libc beyond what is defined below; every value comes through plain
// pointers (the tables, the state, the output buffers) and the per-program parameters of
// rules.hct (`heatc_program.p`, indexed by HEATC_P_*). Float64 arithmetic is written as in
// docs/semantics.md §2, one IEEE operation at a time: compile with -ffp-contract=off (nvcc:
// --fmad=false) so that nothing is fused.
#pragma once

// HEATC_CALL: a function the GPU build keeps out of line (inlining every entry point's
// whole call tree made the device code ten times larger and slow to compile)
#if defined(__CUDACC__)
#define HEATC_HD __host__ __device__
#define HEATC_INLINE __forceinline__
#define HEATC_CALL __noinline__
#define HEATC_UNROLL _Pragma("unroll")
#else
#define HEATC_HD
#define HEATC_INLINE inline __attribute__((always_inline))
#define HEATC_CALL inline
#define HEATC_UNROLL
#endif

#if defined(__CUDACC_RTC__)
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#else
#include <stdint.h>
#endif

#include "heatc_abi.h"

#if !defined(__CUDA_ARCH__) && defined(__SSE2__)
#include <emmintrin.h>
#define HEATC_SSE2 1
#endif

namespace heatc {

// ---- memory helpers (aligned on the GPU; any alignment on the host) ----------------------

template <class T>
HEATC_HD HEATC_INLINE T ld(const void* p) {
#if defined(__CUDA_ARCH__)
  return *(const T*)p;
#else
  T v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
#endif
}

template <class T>
HEATC_HD HEATC_INLINE void st(void* p, T v) {
#if defined(__CUDA_ARCH__)
  *(T*)p = v;
#else
  __builtin_memcpy(p, &v, sizeof v);
#endif
}

HEATC_HD HEATC_INLINE void copy(void* dst, const void* src, uint32_t n) {
#if defined(__CUDA_ARCH__)
  uint8_t* d = (uint8_t*)dst;
  const uint8_t* s = (const uint8_t*)src;
  for (uint32_t i = 0; i < n; i++) d[i] = s[i];
#else
  __builtin_memmove(dst, src, n);
#endif
}

HEATC_HD HEATC_INLINE void zero(void* dst, uint32_t n) {
#if defined(__CUDA_ARCH__)
  uint8_t* d = (uint8_t*)dst;
  for (uint32_t i = 0; i < n; i++) d[i] = 0;
#else
  __builtin_memset(dst, 0, n);
#endif
}

HEATC_HD HEATC_INLINE uint32_t ctz64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return (uint32_t)(__ffsll((long long)x) - 1);
#else
  return (uint32_t)__builtin_ctzll(x);
#endif
}

// how many of the (at most) n bytes at p are ASCII letters, from the first
HEATC_HD HEATC_INLINE uint32_t letter_run(const uint8_t* p, uint32_t n) {
  uint32_t i = 0;
#if defined(HEATC_SSE2)
  // (b | 0x20) + 0x1F lands in -128..-103 exactly for a–z: one signed comparison
  const __m128i fold = _mm_set1_epi8(0x20), add = _mm_set1_epi8(0x1F), lim = _mm_set1_epi8(-102);
  while (i + 16 <= n) {
    __m128i v = _mm_loadu_si128((const __m128i*)(p + i));
    uint32_t m = (uint32_t)_mm_movemask_epi8(_mm_cmplt_epi8(_mm_add_epi8(_mm_or_si128(v, fold), add), lim));
    if (m != 0xFFFF) return i + (uint32_t)__builtin_ctz(~m);
    i += 16;
  }
#endif
  while (i < n && (uint32_t)((p[i] | 32) - 97) < 26) i++;
  return i;
}

// ---- the program and the outputs -------------------------------------------------------

// One program: the packed tables (rules.hct's blob) and its parameters. The rule records
// may live apart from the rest (the GPU's tiers, docs/cuda.md): the record at blob offset
// `off` is at base[k] + off, k = 0 below tier_end[0], 1 below tier_end[1], else 2 — each base
// the address a tier's memory would have for blob offset 0. `whole_tables` keeps the blob in
// one piece (the host).
struct Program {
  const uint8_t* t;
  uint32_t p[HEATC_N_PARAMS];
  uint64_t base[3];
  uint32_t tier_end[2];
};

HEATC_HD HEATC_INLINE void whole_tables(Program& g) {
  g.base[0] = g.base[1] = g.base[2] = (uint64_t)g.t;
  g.tier_end[0] = g.tier_end[1] = 0;
}

// Where one call's records go and what it reads besides the state: the control block of
// docs/abi.md as pointers (the host copies the words in and out around a call). The host
// stores every record (`*_keep` = `*_cap`); the GPU's per-sequence output rows store the
// first `ev_keep` events and `snap_keep` snapshots and only count the rest (an event past
// them is written to `ev_scratch`, a snapshot past them not at all), so that a step never
// waits for room there.
struct Io {
  uint8_t* ev;
  uint32_t ev_cap, ev_count, ev_keep;
  uint8_t* ev_scratch;
  uint8_t* snap;
  uint32_t snap_cap, snap_count, snap_keep;
  const uint32_t* tok_offsets;
  uint32_t n_tokens;
  const uint8_t* tok_bytes;
  uint32_t tok_total;  // bytes at tok_bytes
  uint32_t status, bad_index, quiet;
  // on the GPU, the other lanes of this sequence's group, waiting to share its snapshots'
  // verdicts (Helpers below; heatc_step.cu): null elsewhere
  void* helpers = nullptr;
  // on the host, per rule its state's offset, | 1 << 31 for a late-starting rule (made at
  // load: heatc_native.cpp), so that a snapshot's verdicts read no rule record: null elsewhere
  const uint32_t* rule_states = nullptr;
  // on the host, the automaton in fewer cache lines (heatc_native.cpp, made at load where it
  // has at most 2^16 states): per transition its target state (u16, at the tables' index),
  // and each state's accept word apart (u32); null elsewhere, where scan reads the tables'
  const uint16_t* dfa16 = nullptr;
  const uint32_t* accepts = nullptr;
  // on the host, the skipper's view of the program for a stream and a quiet one (two
  // heatc::skip::Config, made at load: heatc_skipper.h): null elsewhere
  const void* skip_configs = nullptr;
  // The call's step budget: the lexer's slow-path steps (a byte lexed again, a token flushed)
  // it may still take. The host sets it in proportion to the call's input (heatc_native.cpp)
  // so that tables which passed the load checks and still made the lexer go round without
  // progress stop the call (`out_of_steps`; the host raises a trap) instead of hanging it.
  uint64_t steps_left = ~0ull;
  uint32_t out_of_steps = 0;
};

HEATC_HD HEATC_INLINE bool spend(Io& io) {
  if (!io.steps_left) {
    io.out_of_steps = 1;
    return false;
  }
  io.steps_left--;
  return true;
}

#define HP(name) (g.p[HEATC_P_##name])
#define HT(name) (g.t + g.p[HEATC_P_T_##name])
#define SF(type, name) ld<type>(s + HP(OFF_##name))
#define SSET(type, name, v) st<type>(s + HP(OFF_##name), (type)(v))

HEATC_HD HEATC_INLINE uint32_t u32at(const uint8_t* p, uint32_t i) { return ld<uint32_t>(p + 4 * i); }
HEATC_HD HEATC_INLINE const uint8_t* rule_rec(const Program& g, uint32_t r) {
  uint32_t off = u32at(HT(RULE_OFF), r);
  return (const uint8_t*)(g.base[(off >= g.tier_end[0]) + (off >= g.tier_end[1])] + off);
}
HEATC_HD HEATC_INLINE bool is_letter(uint32_t b) { return (uint32_t)((b | 32) - 97) < 26; }

// ---- output records ---------------------------------------------------------------------

HEATC_HD HEATC_INLINE bool ev_room(const Io& io, uint32_t n) { return io.ev_cap - io.ev_count >= n; }
HEATC_HD HEATC_INLINE bool snap_room(const Io& io, uint32_t n) { return io.snap_cap - io.snap_count >= n; }

// room for what `n` more bytes can emit: each byte ends at most one lexeme
HEATC_HD HEATC_INLINE bool room_for_bytes(const Program& g, const Io& io, const uint8_t* s, uint32_t n) {
  uint32_t lexemes = SF(uint32_t, BUF_LEN) + n;
  return ev_room(io, lexemes * HP(PLM)) && snap_room(io, lexemes + 2);
}

HEATC_HD HEATC_INLINE uint8_t* new_event(const Program& g, Io& io, uint8_t* s, uint32_t seq) {
  uint8_t* e = io.ev_count < io.ev_keep ? io.ev + (uint64_t)io.ev_count * HP(EVENT_SIZE) : io.ev_scratch;
  io.ev_count++;
  SSET(uint32_t, PENDING_EVENTS, SF(uint32_t, PENDING_EVENTS) + 1);
  zero(e, HP(EVENT_SIZE));
  st<uint32_t>(e + HEATC_EV_SEQ, seq);
  return e;
}

// ---- verdicts and snapshots -------------------------------------------------------------

HEATC_HD HEATC_CALL bool accepts(const uint8_t* rec, const uint8_t* el, uint32_t code);

// A late-starting rule (ir.starts_late) has, in the reference, a thread waiting for its
// second element exactly when the look-behind lexeme is the `lexemes`-th and its first
// element accepts it.
HEATC_HD HEATC_INLINE bool look_thread(const Program& g, const uint8_t* s, const uint8_t* rec, uint64_t lexemes) {
  if (!HP(LATE) || !ld<uint32_t>(rec + HEATC_RULE_LATE)) return false;
  uint64_t mark = SF(uint64_t, LOOK_MARK);
  if (mark == 0 || mark != lexemes) return false;
  return accepts(rec, rec + ld<uint32_t>(rec + HEATC_RULE_ELEMENTS), SF(uint32_t, LOOK_CODE));
}

HEATC_HD HEATC_INLINE uint32_t verdict(const Program& g, const uint8_t* s, uint32_t r) {
  const uint8_t* rec = rule_rec(g, r);
  if (ld<uint32_t>(s + ld<uint32_t>(rec + HEATC_RULE_STATE_OFF))) return 2;
  uint64_t word = ld<uint64_t>(s + HP(OFF_ACTIVE_RULES) + 8 * (r >> 6));
  if (word >> (r & 63) & 1) return 1;
  return look_thread(g, s, rec, SF(uint64_t, LEXEMES)) ? 1 : 0;
}

// Rule verdicts, eight rules at a time: their offsets, records and state words are each
// loaded for all eight before anything is stored, so the loads overlap instead of waiting one
// after another behind the byte stores (a snapshot reads every rule: on the GPU its dependent
// loads were most of a decode step). Chunks first, first + step, …: all of them with step 1,
// a lane's share when the lanes of a group share a snapshot. Same result as verdict().
HEATC_HD HEATC_CALL void verdicts_part(const Program& g, const uint8_t* s, uint8_t* out, uint32_t first,
                                       uint32_t step) {
  const uint32_t n = HP(N_RULES);
  const uint64_t lexemes = SF(uint64_t, LEXEMES);
  const uint8_t* active = s + HP(OFF_ACTIVE_RULES);
  for (uint32_t r0 = 8 * first; r0 < n; r0 += 8 * step) {
    if (r0 + 8 > n) {
      for (uint32_t r = r0; r < n; r++) out[r] = (uint8_t)verdict(g, s, r);
      break;
    }
    const uint8_t* rec[8];
    uint32_t state[8];
    uint32_t rejected[8];
    HEATC_UNROLL
    for (uint32_t i = 0; i < 8; i++) rec[i] = rule_rec(g, r0 + i);
    HEATC_UNROLL
    for (uint32_t i = 0; i < 8; i++) state[i] = ld<uint32_t>(rec[i] + HEATC_RULE_STATE_OFF);
    HEATC_UNROLL
    for (uint32_t i = 0; i < 8; i++) rejected[i] = ld<uint32_t>(s + state[i]);
    // (eight rules from a multiple of 8 share one word of the active bits)
    uint64_t word = ld<uint64_t>(active + 8 * (r0 >> 6)) >> (r0 & 63);
    HEATC_UNROLL
    for (uint32_t i = 0; i < 8; i++) {
      uint32_t v = rejected[i] ? 2u : (word >> i & 1) ? 1u : look_thread(g, s, rec[i], lexemes) ? 1u : 0u;
      out[r0 + i] = (uint8_t)v;
    }
  }
}

HEATC_HD HEATC_INLINE void verdicts(const Program& g, const uint8_t* s, uint8_t* out) {
  verdicts_part(g, s, out, 0, 1);
}

#if defined(__CUDACC__)
// rules from which a snapshot's verdicts are shared (on an H200, 18 rules were 5 % slower
// shared, 239 rules 2.7 times faster)
#define HEATC_SHARED_VERDICTS_FROM 64u

// A group of lanes serving one sequence (heatc_step.cu): lane 0 steps it; the others wait
// in helper_loop and take their share of each snapshot's verdicts. One per group, in shared
// memory; `cmd` 1 says "verdicts of s into out", 0 "the step is over".
struct Helpers {
  const uint8_t* s;
  uint8_t* out;
  uint32_t cmd, lanes;
  unsigned mask;
};

// lane 0: the verdicts of one snapshot, shared with the group's other lanes
__device__ __noinline__ void shared_verdicts(const Program& g, Helpers* h, const uint8_t* s, uint8_t* out) {
  h->s = s;
  h->out = out;
  h->cmd = 1;
  __syncwarp(h->mask);  // (the helpers wait here, at their own __syncwarp: sm_70 and later)
  verdicts_part(g, s, out, 0, h->lanes);
  __syncwarp(h->mask);
}

// the other lanes: each snapshot's share until lane 0 says the step is over (their own
// `lanes` and `mask`: lane 0 may not have written the group's yet)
__device__ __noinline__ void helper_loop(const Program& g, Helpers* h, uint32_t lane, uint32_t lanes,
                                         unsigned mask) {
  for (;;) {
    __syncwarp(mask);
    if (!h->cmd) return;
    verdicts_part(g, h->s, h->out, lane, lanes);
    __syncwarp(mask);
  }
}
#endif

// a snapshot's verdicts: on the GPU shared with the group's waiting lanes, where that pays
HEATC_HD HEATC_INLINE void snapshot_verdicts(const Program& g, const Io& io, const uint8_t* s, uint8_t* out) {
#if defined(__CUDA_ARCH__)
  // (a few dozen rules are read faster by one lane than a round trip to the others costs)
  if (io.helpers && HP(N_RULES) >= HEATC_SHARED_VERDICTS_FROM) {
    shared_verdicts(g, (Helpers*)io.helpers, s, out);
    return;
  }
#endif
  if (io.rule_states) {
    // the same verdicts, each from its state word and its active bit, without a rule record
    // (but a late-starting rule's while a look-behind is kept: look_thread reads it)
    const uint32_t n = HP(N_RULES);
    const uint64_t lexemes = SF(uint64_t, LEXEMES);
    const bool look = HP(LATE) && SF(uint64_t, LOOK_MARK) == lexemes && lexemes;
    for (uint32_t r0 = 0; r0 < n; r0 += 64) {
      const uint64_t word = ld<uint64_t>(s + HP(OFF_ACTIVE_RULES) + 8 * (r0 >> 6));
      const uint32_t end = n - r0 < 64 ? n : r0 + 64;
      for (uint32_t r = r0; r < end; r++) {
        const uint32_t e = io.rule_states[r];
        uint32_t v = ld<uint32_t>(s + (e & 0x7FFFFFFF)) ? 2u : (uint32_t)(word >> (r & 63) & 1);
        if (!v && (e >> 31) && look) v = look_thread(g, s, rule_rec(g, r), lexemes) ? 1u : 0u;
        out[r] = (uint8_t)v;
      }
    }
    return;
  }
  verdicts(g, s, out);
}

HEATC_HD HEATC_CALL void publish(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t final_) {
  if (io.snap_count >= io.snap_keep) {  // (counted, not stored: see Io)
    io.snap_count++;
    SSET(uint32_t, PENDING_EVENTS, 0);
    return;
  }
  uint8_t* o = io.snap + (uint64_t)io.snap_count * HP(SNAPSHOT_SIZE);
  io.snap_count++;
  st<uint32_t>(o + 0, seq);
  st<uint32_t>(o + 4, SF(uint32_t, PENDING_EVENTS));
  st<uint32_t>(o + 8, final_);
  st<uint32_t>(o + 12, 0);
  st<uint64_t>(o + 16, SF(uint64_t, POS));
  st<uint64_t>(o + 24, SF(uint64_t, LEXEMES));
  st<uint64_t>(o + 32, SF(uint64_t, TOKENS));
  st<uint64_t>(o + 40, SF(uint64_t, MATCHES));
  st<uint64_t>(o + 48, SF(uint64_t, REJECTIONS));
  snapshot_verdicts(g, io, s, o + HEATC_SNAP_VERDICTS);
  SSET(uint32_t, PENDING_EVENTS, 0);
}

// ---- numbers (docs/semantics.md §2) -----------------------------------------------------

HEATC_HD HEATC_INLINE double pow10(const Program& g, uint32_t i) { return ld<double>(HT(POW10) + 8 * i); }

HEATC_HD HEATC_INLINE double scale(const Program& g, double m, int32_t e) {
  if (e >= 0) return m * pow10(g, (uint32_t)e);
  return m / pow10(g, (uint32_t)-e);
}

// kind << 16 | value of a Chinese numeral character, or 0
HEATC_HD HEATC_CALL uint32_t cn(const Program& g, uint32_t cp) {
  const uint8_t* t = HT(CN_TABLE);
  uint32_t lo = 0, hi = HP(N_CN);
  while (lo < hi) {
    uint32_t mid = (lo + hi) >> 1;
    uint32_t x = ld<uint32_t>(t + 8 * mid);
    if (x == cp) return ld<uint32_t>(t + 8 * mid + 4);
    if (x < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return 0;
}

// the UTF-8 character at p (a lexer token: never cut short); *n gets its length
HEATC_HD HEATC_INLINE uint32_t decode(const uint8_t* p, uint32_t* n) {
  uint32_t b = p[0];
  if (b < 0x80) {
    *n = 1;
    return b;
  }
  if (b < 0xE0) {
    *n = 2;
    return (b & 0x1F) << 6 | (p[1] & 0x3F);
  }
  if (b < 0xF0) {
    *n = 3;
    return (b & 0x0F) << 12 | (p[1] & 0x3F) << 6 | (p[2] & 0x3F);
  }
  *n = 4;
  return (b & 0x07) << 18 | (p[1] & 0x3F) << 12 | (p[2] & 0x3F) << 6 | (p[3] & 0x3F);
}

HEATC_HD HEATC_INLINE int32_t arabic_digit(uint32_t cp) {
  if (cp - 0x30 < 10) return (int32_t)(cp - 0x30);
  if (cp - 0xFF10 < 10) return (int32_t)(cp - 0xFF10);
  return -1;
}

// The value of a number or percent lexeme's bytes: heatc/semantics/numbers.py, step by step; `places`
// takes the digits it writes after its decimal point (number_places).
HEATC_HD HEATC_CALL double number_value(const Program& g, const uint8_t* p, uint32_t len, uint32_t& places) {
  const uint8_t* end = p + len;
  // a 百分之 prefix (E7 99 BE E5 88 86 E4 B9 8B) carries no value
  if (len >= 9 && p[0] == 0xE7 && p[1] == 0x99 && p[2] == 0xBE && p[3] == 0xE5 && p[4] == 0x88 && p[5] == 0x86 &&
      p[6] == 0xE4 && p[7] == 0xB9 && p[8] == 0x8B)
    p += 9;
  double m = 0.0;
  int32_t k = 0, frac = 0;
  // fast path: ASCII digits with ',' separators, one '.' and '%' (the same steps as below)
  {
    const uint8_t* c = p;
    bool ascii = true;
    while (c < end) {
      uint32_t d = *c++;
      if (d - 48 < 10) {
        m = m * 10.0 + (double)(d - 48);
        k += frac;
      } else if (d == 46) {
        frac = 1;
      } else if (d != 44 && d != 37) {
        ascii = false;
        break;
      }
    }
    if (ascii) {
      places = (uint32_t)k;
      return scale(g, m, -k);
    }
  }
  m = 0.0;
  k = 0;
  frac = 0;
  uint32_t n;
  if (arabic_digit(decode(p, &n)) >= 0) {
    int32_t e = 0;
    while (p < end) {
      uint32_t cp = decode(p, &n);
      p += n;
      int32_t d = arabic_digit(cp);
      if (d >= 0) {
        m = m * 10.0 + (double)(uint32_t)d;
        k += frac;
        continue;
      }
      if (cp == 0x2E || cp == 0xFF0E) {
        frac = 1;
        continue;
      }
      uint32_t code = cn(g, cp), kind = code >> 16, value = code & 0xFFFF;
      if (kind == HEATC_CN_KIND_SMALL) e += value == 10 ? 1 : value == 100 ? 2 : 3;
      if (kind == HEATC_CN_KIND_BIG) e += (int32_t)(value << 2);
    }
    places = (uint32_t)k;
    return scale(g, m, e - k);
  }
  // a Chinese numeral
  double total = 0.0, section = 0.0, digits = 0.0;
  bool seen = false;
  while (p < end) {
    uint32_t cp = decode(p, &n);
    p += n;
    uint32_t code = cn(g, cp), kind = code >> 16, value = code & 0xFFFF;
    if (kind == HEATC_CN_KIND_POINT) {
      frac = 1;
      break;
    }
    if (kind == HEATC_CN_KIND_DIGIT) {
      digits = digits * 10.0 + (double)value;
      seen = true;
    }
    if (kind == HEATC_CN_KIND_SMALL) {
      section = section + (seen ? digits : 1.0) * (double)value;
      digits = 0.0;
      seen = false;
    }
    if (kind == HEATC_CN_KIND_BIG) {
      if (value == 1)
        total = total + (section + digits) * 10000.0;
      else
        total = (total + section + digits) * 100000000.0;
      section = digits = 0.0;
      seen = false;
    }
  }
  m = total + section + digits;
  if (!frac) return m;
  double f = 0.0;
  while (p < end) {
    uint32_t cp = decode(p, &n);
    p += n;
    f = f * 10.0 + (double)(cn(g, cp) & 0xFFFF);
    k++;
  }
  places = (uint32_t)k;
  return (m * pow10(g, (uint32_t)k) + f) / pow10(g, (uint32_t)k);
}


// The value of a date lexeme: the year it writes (heatc/semantics/numbers.py date_value). Its digit
// groups are its maximal runs of digits (ASCII or full-width); a group of four is the year;
// else M/D/YY has a two-digit year in its third group, and M/NN in its second if it is 32 or
// more (no day is), read with the POSIX pivot; else 0.
HEATC_HD HEATC_CALL double date_value(const uint8_t* p, uint32_t len) {
  const uint8_t* end = p + len;
  int32_t year = -1, acc = 0, run = 0, groups = 0, last = 0, last_run = 0;
  for (;;) {
    bool closing = p >= end;
    int32_t d = -1;
    if (!closing) {
      uint32_t n;
      d = arabic_digit(decode(p, &n));
      p += n;
    }
    if (d >= 0) {
      acc = acc * 10 + d;
      run++;
    } else if (run) {
      groups++;
      if (run == 4 && year < 0) year = acc;
      last = acc;
      last_run = run;
      acc = 0;
      run = 0;
    }
    if (closing) break;
  }
  if (year >= 0) return (double)year;
  if (last_run == 2 && (groups == 3 || (groups == 2 && last >= 32)))
    return (double)(last + (last < (int32_t)HEATC_YEAR_PIVOT ? 2000 : 1900));
  return 0.0;
}

// the value of a lexeme: a number's or percent's, a date's year, 0 for any other; `places`
// takes a number's or percent's digits after its decimal point, 0 for any other
HEATC_HD HEATC_INLINE double lexeme_value(const Program& g, const uint8_t* p, uint32_t len, uint32_t code,
                                          uint32_t& places) {
  places = 0;
  if (code == HEATC_LEX_NUMBER || code == HEATC_LEX_PERCENT) return number_value(g, p, len, places);
  if (code == HEATC_LEX_DATE) return date_value(p, len);
  return 0.0;
}
// ---- anchors (docs/semantics.md §5) -----------------------------------------------------

// sha256, streamed: the first 8 bytes of the digest of what `put` was given
struct Sha256 {
  uint32_t h[8];
  uint8_t block[64];
  uint32_t fill;
  uint64_t total;
};

HEATC_HD HEATC_INLINE uint32_t rotr(uint32_t x, uint32_t n) { return x >> n | x << (32 - n); }

HEATC_HD HEATC_CALL void sha_block(const Program& g, Sha256& c) {
  const uint8_t* kt = HT(SHA256_K);
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)c.block[4 * i] << 24 | (uint32_t)c.block[4 * i + 1] << 16 | (uint32_t)c.block[4 * i + 2] << 8 |
           c.block[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = c.h[0], b = c.h[1], cc = c.h[2], d = c.h[3], e = c.h[4], f = c.h[5], gg = c.h[6], h = c.h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & gg)) + u32at(kt, i) + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
    h = gg;
    gg = f;
    f = e;
    e = d + t1;
    d = cc;
    cc = b;
    b = a;
    a = t1 + t2;
  }
  c.h[0] += a, c.h[1] += b, c.h[2] += cc, c.h[3] += d, c.h[4] += e, c.h[5] += f, c.h[6] += gg, c.h[7] += h;
}

HEATC_HD HEATC_CALL void sha_init(Sha256& c) {
  const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                          0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  for (int i = 0; i < 8; i++) c.h[i] = iv[i];
  c.fill = 0;
  c.total = 0;
}

HEATC_HD HEATC_CALL void sha_put(const Program& g, Sha256& c, const uint8_t* p, uint32_t n) {
  c.total += n;
  for (uint32_t i = 0; i < n; i++) {
    c.block[c.fill++] = p[i];
    if (c.fill == 64) {
      sha_block(g, c);
      c.fill = 0;
    }
  }
}

HEATC_HD HEATC_CALL uint64_t sha_key(const Program& g, Sha256& c) {
  uint64_t bits = c.total * 8;
  uint8_t pad = 0x80;
  sha_put(g, c, &pad, 1);
  pad = 0;
  while (c.fill != 56) sha_put(g, c, &pad, 1);
  for (int i = 7; i >= 0; i--) {
    uint8_t x = (uint8_t)(bits >> (8 * i));
    sha_put(g, c, &x, 1);
  }
  // digest bytes 0..8 are H0, H1 big-endian; read as a little-endian u64
  uint64_t key = 0;
  for (int i = 0; i < 8; i++) key |= (uint64_t)(uint8_t)(c.h[i / 4] >> (24 - 8 * (i % 4))) << (8 * i);
  return key;
}

HEATC_HD HEATC_CALL int32_t anchor_lookup(const Program& g, uint64_t key) {
  uint32_t mask = HP(ANCHOR_SIZE) - 1;
  uint32_t slot = (uint32_t)key & mask;
  for (;;) {
    uint64_t k = ld<uint64_t>(HT(ANCHOR_KEYS) + 8 * slot);
    if (k == 0) return -1;
    if (k == key) return ld<int32_t>(HT(ANCHOR_GROUPS) + 4 * slot);
    slot = (slot + 1) & mask;
  }
}

HEATC_HD HEATC_INLINE bool filter_hit(const Program& g, const uint8_t* table, uint64_t h) {
  uint32_t bits = HP(FILTER_BITS) - 1;
  uint32_t a = (uint32_t)h & bits, b = (uint32_t)(h >> 32) & bits;
  return (ld<uint64_t>(table + 8 * (a >> 6)) >> (a & 63) & 1) && (ld<uint64_t>(table + 8 * (b >> 6)) >> (b & 63) & 1);
}

HEATC_HD HEATC_INLINE uint8_t* ring_entry(const Program& g, uint8_t* s, uint32_t i) {
  uint32_t k = SF(uint32_t, ANCHOR_HEAD) + i;
  if (k >= HP(ANCHOR_LEXEMES)) k -= HP(ANCHOR_LEXEMES);
  return s + HP(OFF_RING) + k * HEATC_RING_ENTRY;
}

HEATC_HD HEATC_INLINE uint64_t fnv(uint64_t h, uint32_t b) { return (h ^ b) * HEATC_FNV_PRIME; }

// Whether a lexeme can be part of an anchor term, so that it must go through the ring: a
// literal by its code's flag, a word (or a lexeme of non-ASCII bytes) by the membership
// filter over its bytes, ASCII letters lower-cased — the hash anchor_step computes, since
// such a lexeme holds no whitespace to normalise. Any other lexeme breaks every run.
HEATC_HD HEATC_INLINE bool anchor_member(const Program& g, uint32_t code, const uint8_t* buf, uint32_t len) {
  if (code >= HEATC_LEX_LITERAL0) return (HT(CODE_FLAGS)[code] & HEATC_FLAG_ANCHOR_MEMBER) != 0;
  if (!(code == HEATC_LEX_WORD || (code == HEATC_LEX_OTHER && buf[0] >= 0x80))) return false;
  uint64_t h = HEATC_FNV_OFFSET;
  for (uint32_t i = 0; i < len; i++) {
    uint32_t b = buf[i];
    h = fnv(h, is_letter(b) ? (b | 32) : b);
  }
  return filter_hit(g, HT(ANCHOR_MEMBER_FILTER), h);
}

HEATC_HD HEATC_CALL void anchor_step(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t code, uint32_t len,
                                 uint64_t start, uint64_t end, uint32_t space) {
  const uint8_t* buf = s + HP(OFF_BUF);
  if (!(code == HEATC_LEX_WORD || code >= HEATC_LEX_LITERAL0 || (code == HEATC_LEX_OTHER && buf[0] >= 0x80))) {
    SSET(uint32_t, ANCHOR_COUNT, 0);
    return;
  }
  // normalise into the slot the new entry will take (ASCII letters lower-cased, each
  // whitespace run one space), hashing it (forward FNV-1a) on the way
  uint32_t count = SF(uint32_t, ANCHOR_COUNT);
  uint8_t* e = ring_entry(g, s, count == HP(ANCHOR_LEXEMES) ? 0 : count);
  uint64_t h = HEATC_FNV_OFFSET;
  uint32_t out = 0;
  bool in_space = false;
  for (uint32_t i = 0; i < len; i++) {
    uint32_t b = buf[i];
    if (b == 32 || b - 9 < 5) {
      if (!in_space) {
        e[HEATC_AE_TEXT + out++] = 32;
        h = fnv(h, 32);
      }
      in_space = true;
      continue;
    }
    in_space = false;
    if (is_letter(b)) b |= 32;
    e[HEATC_AE_TEXT + out++] = (uint8_t)b;
    h = fnv(h, b);
  }
  uint32_t flags = HT(CODE_FLAGS)[code];
  bool literal = code >= HEATC_LEX_LITERAL0;
  // a lexeme in no term breaks every run through it
  if (!(literal ? (flags & HEATC_FLAG_ANCHOR_MEMBER) != 0 : filter_hit(g, HT(ANCHOR_MEMBER_FILTER), h))) {
    SSET(uint32_t, ANCHOR_COUNT, 0);
    return;
  }
  if (count == HP(ANCHOR_LEXEMES)) {
    uint32_t j = SF(uint32_t, ANCHOR_HEAD) + 1;
    if (j >= HP(ANCHOR_LEXEMES)) j = 0;
    SSET(uint32_t, ANCHOR_HEAD, j);
    count--;
  }
  count++;
  SSET(uint32_t, ANCHOR_COUNT, count);
  st<uint64_t>(e, start);
  e[HEATC_AE_SPACE_BEFORE] = (uint8_t)space;
  e[HEATC_AE_LEN] = (uint8_t)out;
  // a lexeme that ends no term ends no run worth looking up
  if (!(literal ? (flags & HEATC_FLAG_ANCHOR_END) != 0 : filter_hit(g, HT(ANCHOR_END_FILTER), h))) return;
  // runs ending here, shortest first; the filter hash grows backwards over reversed bytes
  h = HEATC_FNV_OFFSET;
  for (uint32_t n = 1; n <= count; n++) {
    uint8_t* first = ring_entry(g, s, count - n);
    for (uint32_t i = first[HEATC_AE_LEN]; i > 0; i--) h = fnv(h, first[HEATC_AE_TEXT + i - 1]);
    if (filter_hit(g, HT(ANCHOR_FILTER), h)) {
      for (uint32_t d = 0; d < HP(N_DOMAINS); d++) {
        const uint8_t* di = HT(DOMAIN_INDEX) + 8 * d;
        Sha256 c;
        sha_init(c);
        sha_put(g, c, HT(DOMAIN_BYTES) + ld<uint32_t>(di), ld<uint32_t>(di + 4));
        uint8_t sep = 0x1F;
        sha_put(g, c, &sep, 1);
        for (uint32_t j = count - n; j < count; j++) {
          uint8_t* x = ring_entry(g, s, j);
          if (j > count - n && x[HEATC_AE_SPACE_BEFORE]) {
            sep = 32;
            sha_put(g, c, &sep, 1);
          }
          sha_put(g, c, x + HEATC_AE_TEXT, x[HEATC_AE_LEN]);
        }
        int32_t grp = anchor_lookup(g, sha_key(g, c));
        if (grp < 0) continue;
        uint8_t* bits = s + HP(OFF_ANCHOR_ACTIVE) + (grp >> 3);
        if (*bits >> (grp & 7) & 1) continue;
        *bits |= (uint8_t)(1 << (grp & 7));
        uint8_t* ev = new_event(g, io, s, seq);
        ev[HEATC_EV_KIND] = 1;
        ev[HEATC_EV_VERDICT] = 255;
        st<uint32_t>(ev + HEATC_EV_INDEX, (uint32_t)grp);
        st<int32_t>(ev + HEATC_EV_FAILED, -1);
        st<uint64_t>(ev + HEATC_EV_START, ld<uint64_t>(first));
        st<uint64_t>(ev + HEATC_EV_END, end);
        st<int32_t>(ev + HEATC_EV_CONFLICT, -1);
      }
    }
    if (first[HEATC_AE_SPACE_BEFORE]) h = fnv(h, 32);
  }
}

HEATC_HD HEATC_INLINE bool gate_open(const Program& g, const uint8_t* s, int32_t grp) {
  return s[HP(OFF_ANCHOR_ACTIVE) + (grp >> 3)] >> (grp & 7) & 1;
}

// ---- matching (docs/semantics.md §3–4) --------------------------------------------------

// does element `el` of rule `rec` accept token `code`? (binary search of its sorted list)
HEATC_HD HEATC_CALL bool accepts(const uint8_t* rec, const uint8_t* el, uint32_t code) {
  const uint8_t* ap = rec + ld<uint32_t>(el + HEATC_EL_ACCEPTS);
  uint32_t lo = 0, hi = ld<uint32_t>(el + HEATC_EL_N_ACCEPTS);
  while (lo < hi) {
    uint32_t mid = (lo + hi) >> 1;
    uint32_t x = u32at(ap, mid);
    if (x == code) return true;
    if (x < code)
      lo = mid + 1;
    else
      hi = mid;
  }
  return false;
}

// a quantity's unit (ELEMENT.convert >= 0): the number captured before it, converted to its
// dimension's base unit by the conversion of `code` — ((v + pre) * mul) / div, three float64
// operations in this order, never fused (heatc.units; docs/semantics.md §3)
HEATC_HD HEATC_INLINE void convert_unit(uint8_t* thread, const uint8_t* el, uint32_t code) {
  int32_t c = ld<int32_t>(el + HEATC_EL_CONVERT);
  if (c < 0) return;
  const uint8_t* u = el + ld<uint32_t>(el + HEATC_EL_UNITS);
  uint32_t n = ld<uint32_t>(el + HEATC_EL_N_ACCEPTS);
  for (uint32_t i = 0; i < n; i++, u += HEATC_UC_SIZE) {
    if (ld<uint32_t>(u + HEATC_UC_CODE) != code) continue;
    uint8_t* slot = thread + HEATC_TH_CAPTURES + 8 * (uint32_t)c;
    double v = ld<double>(slot) + ld<double>(u + HEATC_UC_PRE);
    v = v * ld<double>(u + HEATC_UC_MUL);
    st<double>(slot, v / ld<double>(u + HEATC_UC_DIV));
    return;
  }
}

HEATC_HD HEATC_INLINE void capture(const Program& g, uint8_t* thread, const uint8_t* el, uint32_t code, double value,
                                   uint32_t places) {
  convert_unit(thread, el, code);
  int32_t pc = ld<int32_t>(el + HEATC_EL_PLACES);
  if (pc >= 0) st<double>(thread + HEATC_TH_CAPTURES + 8 * pc, (double)places);
  int32_t c = ld<int32_t>(el + HEATC_EL_CAPTURE);
  if (c < 0) return;
  double v = code >= HEATC_LEX_LITERAL0 ? (double)u32at(HT(LITERAL_CLASS), code - HEATC_LEX_LITERAL0) : value;
  st<double>(thread + HEATC_TH_CAPTURES + 8 * c, v);
}

HEATC_HD HEATC_INLINE double operand(const uint8_t* thread, int32_t cap, double c) {
  return cap >= 0 ? ld<double>(thread + HEATC_TH_CAPTURES + 8 * cap) : c;
}

HEATC_HD HEATC_CALL bool holds(const uint8_t* q, const uint8_t* thread) {
  uint32_t op = ld<uint32_t>(q + HEATC_REQ_OP);
  double a = operand(thread, ld<int32_t>(q + HEATC_REQ_LEFT), ld<double>(q + HEATC_REQ_LEFT_CONST));
  if (op == HEATC_OP_IN) {
    double lo = ld<double>(q + HEATC_REQ_LOW), hi = ld<double>(q + HEATC_REQ_HIGH);
    bool lo_ok = ld<uint64_t>(q + HEATC_REQ_LOW_CLOSED) ? lo <= a : lo < a;
    bool hi_ok = ld<uint64_t>(q + HEATC_REQ_HIGH_CLOSED) ? a <= hi : a < hi;
    return lo_ok && hi_ok;
  }
  double b = operand(thread, ld<int32_t>(q + HEATC_REQ_RIGHT), ld<double>(q + HEATC_REQ_RIGHT_CONST));
  switch (op) {
    case HEATC_OP_LT: return a < b;
    case HEATC_OP_LE: return a <= b;
    case HEATC_OP_GT: return a > b;
    case HEATC_OP_GE: return a >= b;
    case HEATC_OP_EQ: return a == b;
    default: return a != b;
  }
}

HEATC_HD HEATC_CALL uint32_t channel_slot(const uint8_t* rec, const uint8_t* u, const uint8_t* thread) {
  int32_t key = ld<int32_t>(u + HEATC_CU_KEY);
  uint32_t base = ld<uint32_t>(u + HEATC_CU_CHANNEL);
  if (key < 0) return base;
  uint32_t cls = (uint32_t)ld<double>(thread + HEATC_TH_CAPTURES + 8 * key);
  const uint8_t* keys = rec + ld<uint32_t>(u + HEATC_CU_KEYS);
  uint32_t n = ld<uint32_t>(u + HEATC_CU_N_KEYS), i = 0;
  // (a key capture always holds one of the key classes: the element accepts only those;
  // the bound keeps a corrupt state inside the table)
  while (i + 1 < n && u32at(keys, i) != cls) i++;
  return base + i;
}

// a band's largest value is this many slots after its smallest: one per key class (docs/ir.md)
HEATC_HD HEATC_INLINE uint32_t band_span(const uint8_t* u) {
  uint32_t n = ld<uint32_t>(u + HEATC_CU_N_KEYS);
  return n > 1 ? n : 1;
}

HEATC_HD HEATC_INLINE void set_channel(uint8_t* ch, double v, uint64_t start, uint64_t end) {
  st<uint64_t>(ch, 1);
  st<double>(ch + 8, v);
  st<uint64_t>(ch + 16, start);
  st<uint64_t>(ch + 24, end);
}

HEATC_HD HEATC_CALL void complete(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t r, const uint8_t* rec,
                              const uint8_t* thread, uint64_t end) {
  int32_t failed = -1, conflict = -1;
  uint8_t* rs = s + ld<uint32_t>(rec + HEATC_RULE_STATE_OFF);
  const uint8_t* q = rec + ld<uint32_t>(rec + HEATC_RULE_REQUIREMENTS);
  uint32_t n = ld<uint32_t>(rec + HEATC_RULE_N_REQUIREMENTS);
  for (uint32_t i = 0; i < n; i++, q += HEATC_REQ_SIZE) {
    if (!holds(q, thread)) {
      failed = (int32_t)i;
      break;
    }
  }
  uint8_t* channels = s + HP(OFF_CHANNELS);
  const uint8_t* uses = rec + ld<uint32_t>(rec + HEATC_RULE_CHANNELS);
  n = ld<uint32_t>(rec + HEATC_RULE_N_CHANNELS);
  if (failed < 0) {
    const uint8_t* u = uses;
    for (uint32_t i = 0; i < n; i++, u += HEATC_CU_SIZE) {
      uint32_t slot = channel_slot(rec, u, thread);
      uint8_t* ch = channels + 32 * slot;
      double v = ld<double>(thread + HEATC_TH_CAPTURES + 8 * ld<uint32_t>(u + HEATC_CU_CAPTURE));
      uint32_t factor = ld<uint32_t>(u + HEATC_CU_FACTOR);
      if (factor == 0) {
        if (ld<uint64_t>(ch) != 0 && ld<double>(ch + 8) != v) {
          conflict = (int32_t)slot;
          break;
        }
      } else if (v > 0) {  // a band: above F x the smallest, or F x below the largest
        double f = (double)factor;
        uint32_t high = slot + band_span(u);
        uint8_t* top = channels + 32 * high;
        if (ld<uint64_t>(ch) != 0 && v > ld<double>(ch + 8) * f) {
          conflict = (int32_t)slot;
          break;
        }
        if (ld<uint64_t>(top) != 0 && v * f < ld<double>(top + 8)) {
          conflict = (int32_t)high;
          break;
        }
      }
    }
  }
  if (failed < 0 && conflict < 0) {
    const uint8_t* u = uses;
    for (uint32_t i = 0; i < n; i++, u += HEATC_CU_SIZE) {
      uint32_t slot = channel_slot(rec, u, thread);
      uint8_t* ch = channels + 32 * slot;
      double v = ld<double>(thread + HEATC_TH_CAPTURES + 8 * ld<uint32_t>(u + HEATC_CU_CAPTURE));
      uint64_t start = ld<uint64_t>(thread + HEATC_TH_START);
      if (ld<uint32_t>(u + HEATC_CU_FACTOR) == 0) {
        if (ld<uint64_t>(ch) == 0) set_channel(ch, v, start, end);
      } else if (v > 0) {
        if (ld<uint64_t>(ch) == 0 || v < ld<double>(ch + 8)) set_channel(ch, v, start, end);
        uint8_t* top = channels + 32 * (slot + band_span(u));
        if (ld<uint64_t>(top) == 0 || v > ld<double>(top + 8)) set_channel(top, v, start, end);
      }
    }
  } else {
    st<uint32_t>(rs, 1);
    // the count the engines act on (stop, guard): an observe-only rule's rejection only reports
    if (!ld<uint32_t>(rec + HEATC_RULE_OBSERVE)) SSET(uint64_t, REJECTIONS, SF(uint64_t, REJECTIONS) + 1);
  }
  st<uint32_t>(rs + 4, ld<uint32_t>(rs + 4) + 1);
  SSET(uint64_t, MATCHES, SF(uint64_t, MATCHES) + 1);
  uint8_t* ev = new_event(g, io, s, seq);
  ev[HEATC_EV_VERDICT] = (failed < 0 && conflict < 0) ? 0 : 2;
  st<uint32_t>(ev + HEATC_EV_INDEX, r);
  st<int32_t>(ev + HEATC_EV_FAILED, failed);
  st<uint64_t>(ev + HEATC_EV_START, ld<uint64_t>(thread + HEATC_TH_START));
  st<uint64_t>(ev + HEATC_EV_END, end);
  st<int32_t>(ev + HEATC_EV_CONFLICT, conflict);
  if (conflict >= 0) {
    uint8_t* ch = channels + 32 * (uint32_t)conflict;
    st<double>(ev + HEATC_EV_CONFLICT_VALUE, ld<double>(ch + 8));
    st<uint64_t>(ev + HEATC_EV_CONFLICT_START, ld<uint64_t>(ch + 16));
    st<uint64_t>(ev + HEATC_EV_CONFLICT_END, ld<uint64_t>(ch + 24));
  }
  copy(ev + HEATC_EV_CAPTURES, thread + HEATC_TH_CAPTURES, 8 * ld<uint32_t>(rec + HEATC_RULE_N_CAPTURES));
}

// one rule's step for one lexeme (docs/semantics.md §3)
HEATC_HD HEATC_CALL void step_rule(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t r, uint32_t code,
                               uint64_t start, uint64_t end, double value, uint32_t places, bool barrier,
                               uint32_t kind) {
  const uint8_t* rec = rule_rec(g, r);
  int32_t gate = ld<int32_t>(rec + HEATC_RULE_GATE);
  if (gate >= 0 && !gate_open(g, s, gate)) return;
  uint32_t k = ld<uint32_t>(rec + HEATC_RULE_N_ELEMENTS);
  uint32_t ss = ld<uint32_t>(rec + HEATC_RULE_SLOT_SIZE);
  uint8_t* slots = s + ld<uint32_t>(rec + HEATC_RULE_STATE_OFF) + 8;
  const uint8_t* els = rec + ld<uint32_t>(rec + HEATC_RULE_ELEMENTS);
  // per element, the lexeme kinds its gap never skips (binding: docs/semantics.md §3)
  const uint8_t* blocks = rec + ld<uint32_t>(rec + HEATC_RULE_BLOCKS);
  bool late = HP(LATE) && ld<uint32_t>(rec + HEATC_RULE_LATE);
  bool look = late && look_thread(g, s, rec, SF(uint64_t, LEXEMES) - 1);
  // a late-starting rule with no thread and none to start (no look-behind) stays as it is:
  // its bit in active_rules says that none of its slots is live, and it starts nothing else
  if (late && !look && !(ld<uint64_t>(s + HP(OFF_ACTIVE_RULES) + 8 * (r >> 6)) >> (r & 63) & 1)) return;
  // a late-starting rule: the thread its first lexeme would have started, if any
  if (look) {
    uint32_t lcode = SF(uint32_t, LOOK_CODE);
    uint32_t lplaces;
    double lvalue = lexeme_value(g, s + HP(OFF_LOOK_BUF), SF(uint32_t, LOOK_LEN), lcode, lplaces);
    zero(slots, ss);
    slots[HEATC_TH_ACTIVE] = 1;
    st<uint64_t>(slots + HEATC_TH_START, SF(uint64_t, LOOK_START));
    capture(g, slots, els, lcode, lvalue, lplaces);
  }
  // threads, last slot first, so an advance is not processed twice in one lexeme
  for (uint32_t i = k - 1; i >= 1; i--) {
    uint8_t* slot = slots + (i - 1) * ss;
    if (!slot[HEATC_TH_ACTIVE]) continue;
    const uint8_t* el = els + HEATC_EL_SIZE * i;
    if (accepts(rec, el, code)) {
      if (i == k - 1) {
        capture(g, slot, el, code, value, places);
        complete(g, io, s, seq, r, rec, slot, end);
        slot[HEATC_TH_ACTIVE] = 0;
        continue;
      }
      // a copy advances; the newer thread replaces whatever stayed in the next slot
      copy(slot + ss, slot, ss);
      slot[ss + HEATC_TH_GAPS] = 0;
      capture(g, slot + ss, el, code, value, places);
    }
    uint32_t gaps = slot[HEATC_TH_GAPS];
    if (gaps < ld<uint32_t>(el + HEATC_EL_GAP) && !barrier && !(kind & u32at(blocks, i)))
      slot[HEATC_TH_GAPS] = (uint8_t)(gaps + 1);
    else
      slot[HEATC_TH_ACTIVE] = 0;
  }
  // a new thread at this lexeme (a late-starting rule's lexeme is kept as the look-behind)
  if (!late && accepts(rec, els, code)) {
    if (k == 1) {
      // (a one-element rule captures at most a value and its places: the tables are checked for it)
      uint8_t tmp[HEATC_TH_CAPTURES + 16];
      zero(tmp, sizeof tmp);
      st<uint64_t>(tmp + HEATC_TH_START, start);
      capture(g, tmp, els, code, value, places);
      complete(g, io, s, seq, r, rec, tmp, end);
    } else {
      zero(slots, ss);
      slots[HEATC_TH_ACTIVE] = 1;
      st<uint64_t>(slots + HEATC_TH_START, start);
      capture(g, slots, els, code, value, places);
    }
  }
  // keep the rule's bit in active_rules in step with its slots
  bool live = false;
  for (uint32_t i = 1; i < k && !live; i++) live = slots[(i - 1) * ss + HEATC_TH_ACTIVE] != 0;
  uint8_t* word = s + HP(OFF_ACTIVE_RULES) + 8 * (r >> 6);
  uint64_t bit = (uint64_t)1 << (r & 63), w = ld<uint64_t>(word);
  SSET(uint32_t, N_ACTIVE, SF(uint32_t, N_ACTIVE) + (uint32_t)live - (uint32_t)((w & bit) != 0));
  st<uint64_t>(word, live ? (w | bit) : (w & ~bit));
}

// The rules with live threads, in rule order (next_active gives each once). A word of
// active bits is read when the walk reaches it, so a caller may change the bit of the rule it
// was just given.
struct ActiveRules {
  uint32_t w, words;
  uint64_t bits;
};

HEATC_HD HEATC_INLINE ActiveRules active_rules(const Program& g) { return ActiveRules{0, (HP(N_RULES) + 63) / 64, 0}; }

HEATC_HD HEATC_INLINE bool next_active(const Program& g, const uint8_t* s, ActiveRules& a, uint32_t& r) {
  while (!a.bits) {
    if (a.w >= a.words) return false;
    a.bits = ld<uint64_t>(s + HP(OFF_ACTIVE_RULES) + 8 * a.w++);
  }
  r = (a.w - 1) * 64 + ctz64(a.bits);
  a.bits &= a.bits - 1;
  return true;
}

// Inert lexemes are counted instead of stepped (age()) in programs with rules and no anchors
// (no `when` gates, which would keep a closed rule from aging).
HEATC_HD HEATC_INLINE bool bulk_aging(const Program& g) { return HP(N_RULES) != 0 && !HP(ANCHOR_LEXEMES); }

// visit, in rule order, the rules with live threads and those this token can start
HEATC_HD HEATC_CALL void rules_step(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t code, uint64_t start,
                                uint64_t end, double value, uint32_t places) {
  if (!HP(N_RULES)) return;
  bool barrier = (HT(CODE_FLAGS)[code] & HEATC_FLAG_BARRIER) != 0;
  uint32_t kind = HT(CODE_KINDS)[code];  // it ends the gaps that block its kind
  const uint8_t* start_rules = HT(START_RULES);
  uint32_t si = u32at(HT(START_OFF), code), s_end = u32at(HT(START_OFF), code + 1);
  uint32_t words = (HP(N_RULES) + 63) / 64;
  for (uint32_t w = 0; w < words; w++) {
    uint64_t bits = ld<uint64_t>(s + HP(OFF_ACTIVE_RULES) + 8 * w);
    while (si < s_end) {
      uint32_t r = u32at(start_rules, si);
      if ((r >> 6) != w) break;
      bits |= (uint64_t)1 << (r & 63);
      si++;
    }
    while (bits) {
      uint32_t r = w * 64 + ctz64(bits);
      bits &= bits - 1;
      step_rule(g, io, s, seq, r, code, start, end, value, places, barrier, kind);
    }
  }
}

// k inert lexemes at once for every live thread (docs/semantics.md §3, k times over: an
// inert lexeme — wasm/pack.py's "inert" table — is in no accept list, no barrier and of no
// kind a gap stops at, so to a thread it is only one more gap): a thread stays, k gaps
// older, while that is within its element's gap, else it dies. Returns how many inert
// lexemes it takes until every thread is dead (0: none is live). Only where bulk_aging().
HEATC_HD HEATC_CALL uint32_t age(const Program& g, uint8_t* s, uint32_t k) {
  uint32_t budget = 0, r;
  ActiveRules each = active_rules(g);
  while (next_active(g, s, each, r)) {
    const uint8_t* rec = rule_rec(g, r);
    uint32_t n = ld<uint32_t>(rec + HEATC_RULE_N_ELEMENTS);
    uint32_t ss = ld<uint32_t>(rec + HEATC_RULE_SLOT_SIZE);
    uint8_t* slots = s + ld<uint32_t>(rec + HEATC_RULE_STATE_OFF) + 8;
    const uint8_t* els = rec + ld<uint32_t>(rec + HEATC_RULE_ELEMENTS);
    bool live = false;
    for (uint32_t i = 1; i < n; i++) {
      uint8_t* slot = slots + (i - 1) * ss;
      if (!slot[HEATC_TH_ACTIVE]) continue;
      uint32_t gap = ld<uint32_t>(els + HEATC_EL_SIZE * i + HEATC_EL_GAP);
      uint32_t a = slot[HEATC_TH_GAPS] + k;
      if (a <= gap) {
        slot[HEATC_TH_GAPS] = (uint8_t)a;
        live = true;
        if (gap + 1 - a > budget) budget = gap + 1 - a;
      } else {
        slot[HEATC_TH_ACTIVE] = 0;
      }
    }
    if (!live) {
      uint8_t* word = s + HP(OFF_ACTIVE_RULES) + 8 * (r >> 6);
      st<uint64_t>(word, ld<uint64_t>(word) & ~((uint64_t)1 << (r & 63)));
      SSET(uint32_t, N_ACTIVE, SF(uint32_t, N_ACTIVE) - 1);
    }
  }
  return budget;
}

// ---- one lexeme -------------------------------------------------------------------------

// keep the lexeme in buf (index + 1 = `mark`) as the look-behind of late-starting rules
HEATC_HD HEATC_INLINE void keep_look(const Program& g, uint8_t* s, uint64_t start, uint32_t code, uint32_t len,
                                     uint64_t mark) {
  SSET(uint64_t, LOOK_MARK, mark);
  SSET(uint64_t, LOOK_START, start);
  SSET(uint32_t, LOOK_CODE, code);
  SSET(uint32_t, LOOK_LEN, len);
  copy(s + HP(OFF_LOOK_BUF), s + HP(OFF_BUF), HP(MAX_LEXEME));
}

HEATC_HD HEATC_CALL void emit(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t code, uint32_t len) {
  if (code == HEATC_LEX_SPACE) return;
  uint64_t start = SF(uint64_t, TOK_START), end = start + len;
  uint32_t space = start > SF(uint64_t, LAST_END);
  SSET(uint64_t, LAST_END, end);
  SSET(uint64_t, LEXEMES, SF(uint64_t, LEXEMES) + 1);
  if (HP(ANCHOR_LEXEMES)) anchor_step(g, io, s, seq, code, len, start, end, space);
  uint32_t flags = HT(CODE_FLAGS)[code];
  // most lexemes (plain words) can neither start a rule nor meet a live thread
  if ((flags & HEATC_FLAG_STARTS) || SF(uint32_t, N_ACTIVE)) {
    uint32_t places;
    double value = lexeme_value(g, s + HP(OFF_BUF), len, code, places);
    rules_step(g, io, s, seq, code, start, end, value, places);
  }
  if (HP(LATE) && (flags & HEATC_FLAG_LOOK)) keep_look(g, s, start, code, len, SF(uint64_t, LEXEMES));
  if ((flags & HEATC_FLAG_TRIGGER) && !io.quiet) publish(g, io, s, seq, 0);
}

// ---- the lexer (docs/semantics.md §1) ---------------------------------------------------

HEATC_HD HEATC_INLINE void clear_lexer(const Program& g, uint8_t* s) {
  SSET(uint32_t, BUF_LEN, 0);
  SSET(uint32_t, DFA_STATE, HP(DFA_WIDTH));
  SSET(uint32_t, LAST_TOK, 0);
  SSET(uint32_t, LAST_LEN, 0);
  SSET(uint32_t, PEND_TOK, 0);
  SSET(uint32_t, PEND_FALLBACK, 0);
  SSET(uint32_t, PEND_LEN, 0);
}

// emit the longest accepted token; move the n - last_len bytes after it to the front
HEATC_HD HEATC_CALL uint32_t emit_last(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t n) {
  uint32_t len = SF(uint32_t, LAST_LEN);
  emit(g, io, s, seq, SF(uint32_t, LAST_TOK), len);
  uint8_t* buf = s + HP(OFF_BUF);
  copy(buf, buf + len, n - len);
  SSET(uint64_t, TOK_START, SF(uint64_t, TOK_START) + len);
  clear_lexer(g, s);
  return n - len;
}

// the byte after a literal ending in a letter decides its word boundary; after a date, a
// digit breaks it too (docs/semantics.md §1)
HEATC_HD HEATC_INLINE void resolve_pending(const Program& g, uint8_t* s, uint32_t b) {
  if (is_letter(b) || (SF(uint32_t, PEND_TOK) == HEATC_LEX_DATE && b - 48 < 10)) {
    if (SF(uint32_t, PEND_FALLBACK)) {
      SSET(uint32_t, LAST_TOK, SF(uint32_t, PEND_FALLBACK));
      SSET(uint32_t, LAST_LEN, SF(uint32_t, PEND_LEN));
    }
  } else {
    SSET(uint32_t, LAST_TOK, SF(uint32_t, PEND_TOK));
    SSET(uint32_t, LAST_LEN, SF(uint32_t, PEND_LEN));
  }
  SSET(uint32_t, PEND_TOK, 0);
  SSET(uint32_t, PEND_FALLBACK, 0);
  SSET(uint32_t, PEND_LEN, 0);
}

HEATC_HD HEATC_INLINE uint32_t dfa_next(const Program& g, uint32_t row, uint32_t b) {
  return u32at(HT(DFA), row + HT(BYTE_CLASS)[b]);
}
HEATC_HD HEATC_INLINE uint32_t dfa_accept(const Program& g, uint32_t row) {
  return u32at(HT(DFA), row + HP(DFA_WIDTH) - 1);
}

// try to extend the current token with b: true if it fit, false if the token must be emitted
HEATC_HD HEATC_CALL bool advance(const Program& g, uint8_t* s, uint32_t b) {
  if (SF(uint32_t, PEND_TOK)) resolve_pending(g, s, b);
  uint32_t len = SF(uint32_t, BUF_LEN);
  if (len >= HP(MAX_LEXEME)) return false;
  uint32_t t = dfa_next(g, SF(uint32_t, DFA_STATE), b);
  if (!t) return false;
  s[HP(OFF_BUF) + len] = (uint8_t)b;
  len++;
  SSET(uint32_t, BUF_LEN, len);
  SSET(uint32_t, DFA_STATE, t);
  uint32_t a = dfa_accept(g, t);
  if (a & 0x7FFF) {
    if (a & 0x8000) {
      SSET(uint32_t, PEND_TOK, a & 0x7FFF);
      SSET(uint32_t, PEND_FALLBACK, a >> 16);
      SSET(uint32_t, PEND_LEN, len);
    } else {
      SSET(uint32_t, LAST_TOK, a & 0x7FFF);
      SSET(uint32_t, LAST_LEN, len);
    }
  }
  return true;
}

// lex again the n bytes at the front of buf (left over after an emission)
HEATC_HD HEATC_CALL void relex(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t n) {
  uint32_t r = 0;
  while (r < n && spend(io)) {
    if (advance(g, s, s[HP(OFF_BUF) + r])) {
      r++;
    } else {
      n = emit_last(g, io, s, seq, n);
      r = 0;
    }
  }
}

// the slow path of one byte: it ends the current token (callers count it in pos first, so
// snapshot counters include the byte whose arrival emitted a trigger lexeme)
HEATC_HD HEATC_CALL void push_byte(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t b) {
  if (advance(g, s, b)) return;
  uint32_t n = emit_last(g, io, s, seq, SF(uint32_t, BUF_LEN));
  s[HP(OFF_BUF) + n] = (uint8_t)b;
  relex(g, io, s, seq, n + 1);
}

HEATC_HD HEATC_CALL void end_token(const Program& g, Io& io, uint8_t* s, uint32_t seq) {
  uint64_t tokens = SF(uint64_t, TOKENS) + 1;
  SSET(uint64_t, TOKENS, tokens);
  if (HP(WINDOW) && tokens % HP(WINDOW) == 0 && !io.quiet) publish(g, io, s, seq, 0);
}

#if defined(HEATC_WITH_SKIPPER)
// The host's idle-stretch skipper (docs/abi.md, "The skipper"; cuda_bridge/src/heatc_skipper.h):
// from a token start in `in` at i, with no live thread, counts what it can vouch for (plain
// words, whitespace, plain bytes, plain numbers and CJK characters, weak starts) and returns
// where the automaton takes over (a token start). It reads blocks of 64 bytes and 8 past
// each: it is called with at least HEATC_SKIP_MIN bytes left.
#define HEATC_SKIP_MIN 72u
uint32_t skip_plain(const Program& g, const Io& io, uint8_t* s, const uint8_t* in, uint32_t i, uint32_t len,
                    uint64_t* tok_start, uint64_t* lexemes);
#endif

// The common work of feeding bytes, kept in locals: extend the current token while the
// automaton can, and finish in place the tokens that need nothing else — spaces and, while
// no rule has a live thread, lexemes that start no rule, trigger nothing and are in no
// anchor term (they are only counted). Stops, with the lexer state written back, at the end
// of the input, after a literal that waits for its word-boundary byte, at the 64-byte cap,
// or before a byte that ends a token that needs more. Returns the new input index. Bytes read
// past a token are read again from the input; `*read` (an input index) is raised past the
// byte that ended it, so that a lexeme emitted while reading them again counts every byte
// read (docs/semantics.md §7) — and they are read again only when there is room for all
// that they and that byte can emit, so that no early stop comes before `*read`.
HEATC_HD HEATC_CALL uint32_t scan(const Program& g, const Io& io, uint8_t* s, const uint8_t* in, uint32_t i,
                              uint32_t len, uint32_t* read, uint32_t budget, uint32_t* pending) {
  const uint8_t* dfa = HT(DFA);
  const uint16_t* dfa16 = io.dfa16;
  const uint32_t* accepts = io.accepts;
  const uint8_t* cls = HT(BYTE_CLASS);
  const uint8_t* flags = HT(CODE_FLAGS);
  const uint32_t width = HP(DFA_WIDTH), cap = HP(MAX_LEXEME);
  const uint32_t matters = io.quiet ? HEATC_FLAG_STARTS : (HEATC_FLAG_STARTS | HEATC_FLAG_TRIGGER);
  // budget: 0 when no rule has a live thread; else, where inert lexemes may be counted
  // instead of stepped (age()), how many of them it takes until every thread is dead
  const bool idle = budget == 0;
  const bool anchors = HP(ANCHOR_LEXEMES) != 0, late = HP(LATE) != 0;
  const bool bulk = bulk_aging(g);
  const uint8_t* inert = HT(INERT);
  uint32_t aged = 0;
  const uint32_t word_row = anchors ? 0 : HP(WORD_ROW);
  uint8_t* buf = s + HP(OFF_BUF);
  uint32_t row = SF(uint32_t, DFA_STATE), q = SF(uint32_t, BUF_LEN);
  uint32_t last_tok = SF(uint32_t, LAST_TOK), last_q = SF(uint32_t, LAST_LEN);
  uint64_t tok_start = SF(uint64_t, TOK_START), lexemes = SF(uint64_t, LEXEMES);
  while (i < len) {
    uint32_t b = in[i];
    // the row the byte leads to (0: the token ends before it) and that row's accept word
    uint32_t t, a;
    if (dfa16) {
      uint32_t state = dfa16[row + cls[b]];
      t = state * width;
      a = accepts[state];
    } else {
      t = ld<uint32_t>(dfa + 4 * (row + cls[b]));
      a = t ? ld<uint32_t>(dfa + 4 * (t + width - 1)) : 0;
    }
    if (!t) {
      // the token ends here; finish it in place if nothing else needs to see it
      uint32_t n = last_q;
      if (!n) break;
      // bytes read past the longest token ("12," then a space) are read again from the
      // input when they came from it (else the slow path lexes the buffer again)
      uint32_t r = q - n;
      if (r > i) break;
      if (r) {
        if (!(ev_room(io, (r + 1) * HP(PLM)) && snap_room(io, r + 3))) break;
        if (i + 1 > *read) *read = i + 1;
      }
      if (last_tok != HEATC_LEX_SPACE) {
        uint32_t f = flags[last_tok];
        if (f & matters) break;
        // with live threads an inert lexeme only ages them: count it; the caller ages them
        // once this returns (at most `budget` of them, after which every thread is dead)
        if (!idle) {
          if (!bulk || !inert[last_tok] || aged >= budget) break;
          aged++;
        }
        if (anchors) {
          // (a lexeme that may be anchor text goes through the ring; any other breaks runs)
          if (anchor_member(g, last_tok, buf, n)) break;
          SSET(uint32_t, ANCHOR_COUNT, 0);
          SSET(uint64_t, LAST_END, tok_start + n);
        }
        lexemes++;
        if (late && (f & HEATC_FLAG_LOOK)) keep_look(g, s, tok_start, last_tok, n, lexemes);
      }
      tok_start += n;
      i -= r;
      q = 0;
      row = width;
      last_tok = 0;
      last_q = 0;
      // every thread is dead once aged: return (between tokens) for the caller to age them
      if (!idle && aged == budget) break;
#if defined(HEATC_WITH_SKIPPER)
      if (idle && HP(SKIP_LOG2) && len - i >= HEATC_SKIP_MIN) i = skip_plain(g, io, s, in, i, len, &tok_start, &lexemes);
#endif
      continue;
    }
    if (q >= cap) break;
    buf[q++] = (uint8_t)b;
    i++;
    row = t;
    if (a & 0x7FFF) {
      if (a & 0x8000) {
        SSET(uint32_t, PEND_TOK, a & 0x7FFF);
        SSET(uint32_t, PEND_FALLBACK, a >> 16);
        SSET(uint32_t, PEND_LEN, q);
        break;
      }
      last_tok = a & 0x7FFF;
      last_q = q;
      // inside a plain word every letter loops back here: take the run of letters at once
      // (its bytes are not copied: without anchors nothing reads a word's bytes again)
      if (t == word_row) {
        uint32_t n = letter_run(in + i, (len - i < cap - q) ? len - i : cap - q);
        i += n;
        q += n;
        last_q = q;
      }
    }
  }
  SSET(uint32_t, DFA_STATE, row);
  SSET(uint32_t, BUF_LEN, q);
  SSET(uint32_t, LAST_TOK, last_tok);
  SSET(uint32_t, LAST_LEN, last_q);
  SSET(uint64_t, TOK_START, tok_start);
  SSET(uint64_t, LEXEMES, lexemes);
  *pending = aged;
  return i;
}

// feed bytes: `scan` does the common work; this loop handles what stops it. Stops early
// (returning the bytes consumed) when an emission could overflow a buffer.
HEATC_HD HEATC_CALL uint32_t feed_bytes(const Program& g, Io& io, uint8_t* s, uint32_t seq, const uint8_t* in,
                                    uint32_t len) {
  uint64_t pos0 = SF(uint64_t, POS);
  // the input read so far: past i after `scan` read bytes again (its `read`)
  uint32_t i = 0, read = 0;
  while (i < len && spend(io)) {
    if (SF(uint32_t, PEND_TOK)) resolve_pending(g, s, in[i]);
    uint32_t budget = 0, pending = 0;
    // (without bulk aging any budget but 0 only says "not idle": scan stops at every lexeme)
    if (SF(uint32_t, N_ACTIVE)) budget = bulk_aging(g) ? age(g, s, 0) : 1;
    i = scan(g, io, s, in, i, len, &read, budget, &pending);
    if (pending) {
      age(g, s, pending);
      // stopped between tokens because the threads aged out: scan on, idle now
      if (i < len && SF(uint32_t, BUF_LEN) == 0) continue;
    }
    if (SF(uint32_t, PEND_TOK)) continue;
    if (i >= len) break;
    uint32_t b = in[i], n = SF(uint32_t, BUF_LEN), last_tok = SF(uint32_t, LAST_TOK);
    // the byte at i ends a token that matters. Common case: the longest accept is the
    // whole buffer (nothing to lex again): emit it here and go on
    if (SF(uint32_t, LAST_LEN) == n && n != 0) {
      if (last_tok != HEATC_LEX_SPACE) {
        if (!(ev_room(io, HP(PLM)) && snap_room(io, 3))) break;
        // counters include the byte whose arrival emitted it
        SSET(uint64_t, POS, pos0 + (i + 1 > read ? i + 1 : read));
        emit(g, io, s, seq, last_tok, n);
      }
      SSET(uint64_t, TOK_START, SF(uint64_t, TOK_START) + n);
      clear_lexer(g, s);
      continue;
    }
    // otherwise (bytes to lex again, or the cap): make sure there is room, take the slow path
    SSET(uint64_t, POS, pos0 + i);
    if (!room_for_bytes(g, io, s, 1)) break;
    i++;
    SSET(uint64_t, POS, pos0 + (i > read ? i : read));
    push_byte(g, io, s, seq, b);
  }
  SSET(uint64_t, POS, pos0 + i);
  return i;
}

// ---- entry points (docs/abi.md, "Functions") --------------------------------------------

HEATC_HD HEATC_CALL void reset(const Program& g, uint8_t* s) {
  zero(s, HP(STATE_SIZE));
  SSET(uint32_t, DFA_STATE, HP(DFA_WIDTH));
}

HEATC_HD HEATC_CALL uint32_t feed(const Program& g, Io& io, uint8_t* s, uint32_t seq, const uint8_t* in, uint32_t len,
                              uint32_t end) {
  if (SF(uint32_t, FLAGS) & 1) {
    io.status = HEATC_STATUS_FINISHED;
    return 0;
  }
  uint32_t i = feed_bytes(g, io, s, seq, in, len);
  if (end && i == len) end_token(g, io, s, seq);
  return i;
}

// end of stream: flush the lexer, end every thread, publish the final snapshot. Returns 0
// (having done nothing) when the buffers lack room.
// emit every lexeme the lexer holds, as at the end of the stream (the first part of finish;
// the guard's look past a candidate). The caller makes sure of room (room_for_bytes(…, 0)).
HEATC_HD HEATC_CALL void flush_lexer(const Program& g, Io& io, uint8_t* s, uint32_t seq) {
  while (SF(uint32_t, BUF_LEN) && spend(io)) {
    if (SF(uint32_t, PEND_TOK)) {
      SSET(uint32_t, LAST_TOK, SF(uint32_t, PEND_TOK));
      SSET(uint32_t, LAST_LEN, SF(uint32_t, PEND_LEN));
    }
    relex(g, io, s, seq, emit_last(g, io, s, seq, SF(uint32_t, BUF_LEN)));
  }
}

HEATC_HD HEATC_CALL uint32_t finish(const Program& g, Io& io, uint8_t* s, uint32_t seq) {
  if (!room_for_bytes(g, io, s, 0)) return 0;
  flush_lexer(g, io, s, seq);
  // every partial match ends with the stream
  uint32_t r;
  ActiveRules each = active_rules(g);
  while (next_active(g, s, each, r)) {
    const uint8_t* rec = rule_rec(g, r);
    zero(s + ld<uint32_t>(rec + HEATC_RULE_STATE_OFF) + 8,
         (ld<uint32_t>(rec + HEATC_RULE_N_ELEMENTS) - 1) * ld<uint32_t>(rec + HEATC_RULE_SLOT_SIZE));
  }
  zero(s + HP(OFF_ACTIVE_RULES), 8 * each.words);
  SSET(uint32_t, N_ACTIVE, 0);
  if (HP(LATE)) SSET(uint64_t, LOOK_MARK, 0);
  SSET(uint32_t, FLAGS, SF(uint32_t, FLAGS) | 1);
  publish(g, io, s, seq, 1);
  return 1;
}

HEATC_HD HEATC_CALL uint32_t snapshot(const Program& g, Io& io, uint8_t* s, uint32_t seq) {
  if (!snap_room(io, 1)) return 0;
  publish(g, io, s, seq, 0);
  return 1;
}

// a whole document in one call: reset, feed, finish. Returns the bytes consumed; the stream
// is finished only when all were and there was room to finish.
HEATC_HD HEATC_CALL uint32_t scan_document(const Program& g, Io& io, uint8_t* s, uint32_t seq, const uint8_t* in,
                                       uint32_t len) {
  reset(g, s);
  uint32_t n = feed(g, io, s, seq, in, len, 1);
  if (n == len) finish(g, io, s, seq);
  return n;
}

// One token through the token table for sequence `seq`: 1 if stepped; 0 when the buffers
// lack room for it (nothing done) or it was refused (io.status set: a token id out of
// range, or a finished stream).
HEATC_HD HEATC_CALL uint32_t step(const Program& g, Io& io, uint8_t* s, uint32_t seq, uint32_t id) {
  if (id >= io.n_tokens) {
    io.status = HEATC_STATUS_BAD_TOKEN;
    return 0;
  }
  if (SF(uint32_t, FLAGS) & 1) {
    io.status = HEATC_STATUS_FINISHED;
    return 0;
  }
  uint32_t off = io.tok_offsets[id], stop = io.tok_offsets[id + 1];
  if (off > stop || stop > io.tok_total) {  // (a token table the host did not check)
    io.status = HEATC_STATUS_BAD_TOKEN;
    return 0;
  }
  uint32_t n = stop - off;
  if (!room_for_bytes(g, io, s, n)) return 0;
  // the room check above covers the whole token, so this consumes all of it
  feed_bytes(g, io, s, seq, io.tok_bytes + off, n);
  end_token(g, io, s, seq);
  return 1;
}

#undef HP
#undef HT
#undef SF
#undef SSET

}  // namespace heatc
