// The native backend's idle-stretch skipper (docs/abi.md, "The skipper"): the WASM kernel's
// (heatc/wasm/templates/kernel.wat.j2, $scan) on the host, in 64-byte blocks. While no rule
// has a live thread it counts plain words, whitespace, plain one-byte ASCII tokens, digit
// runs that are plain numbers, weak starts (rewinding to the first when it stops before their
// threads are dead) and plain CJK characters, and hands over to the automaton at a token start
// before anything else. Host only: the GPU build steps every byte (the results are the same).
//
// Its masks hold a bit per byte of a block (bit i: byte p + i). The block-wide logic is
// plain 64-bit integer arithmetic, written once (heatc_skipper_isa.h); only the byte classes
// are per instruction set: SSSE3 and AVX2 on x86 (chosen at import by what the CPU has),
// NEON on AArch64, and portable C++ loops anywhere else. A test runs each one the machine
// can run against the reference (tests/test_native_skipper.py).
#pragma once

#include "heatc_core.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HEATC_SKIP_X86 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define HEATC_SKIP_NEON 1
#endif

namespace heatc {
namespace skip {

// a block's bytes; reading one reads up to SLACK bytes past it (the fingerprints' byte after
// the last, a word's 8-byte key, the character after a CJK one)
constexpr uint32_t BLOCK = 64;
constexpr uint32_t SLACK = 8;
static_assert(BLOCK + SLACK == HEATC_SKIP_MIN, "the core calls the skipper with a block and its slack left");

HEATC_INLINE uint64_t below(uint32_t n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }
HEATC_INLINE uint32_t first(uint64_t x) { return x ? (uint32_t)__builtin_ctzll(x) : 64; }  // 64: none
HEATC_INLINE uint32_t last(uint64_t x) { return 63 - (uint32_t)__builtin_clzll(x); }      // x != 0
HEATC_INLINE uint32_t popcount(uint64_t x) { return (uint32_t)__builtin_popcountll(x); }
HEATC_INLINE uint32_t smaller(uint32_t a, uint32_t b) { return a < b ? a : b; }
// where the run of `mask` bits that ends just below bit `at` starts: one past the last clear
// bit below it
HEATC_INLINE uint32_t run_start(uint64_t mask, uint32_t at) {
  uint64_t x = ~mask & below(at);
  return x ? last(x) + 1 : 0;
}

// What a call's skipper reads of the program (rules.hct's skipper parameters and tables) and
// of the call (a quiet stream: triggers are plain).
struct Config {
  const Program* g;
  const uint8_t* plain;  // the skip_plain section
  const uint8_t* filter;
  const uint8_t* slots;
  const uint8_t* nexts;
  const uint8_t* horizons;
  const uint8_t* cjk_table;
  const uint8_t* cjk_lists;
  uint32_t log2, mask, cjk_log2, cjk_mask;
  uint32_t stream;  // the plain-byte table for this stream: 0 any, HEATC_SKIP_PLAIN_QUIET quiet
  bool quiet, anchors, weak, cjk, digits, decimals, percent, years, number_look;
  uint32_t n_always, n_before;
  uint8_t always[HEATC_DIGIT_EXTENDERS_MAX], before[HEATC_DIGIT_EXTENDERS_MAX];
  // per lexeme code, 1 for a one-word keyword that matters only as the second lexeme of
  // late-starting rules whose first takes numbers (late_only_codes), or null; and the
  // automaton, to find a word's code
  const uint8_t* late_only;
  const uint8_t* dfa;
  const uint8_t* byte_class;
  uint32_t width;
};

HEATC_INLINE Config config(const Program& g, bool quiet) {
  Config c;
  const uint32_t* p = g.p;
  c.g = &g;
  c.plain = g.t + p[HEATC_P_T_SKIP_PLAIN];
  c.log2 = p[HEATC_P_SKIP_LOG2];
  c.mask = (1u << c.log2) - 1;
  const uint8_t* words = g.t + p[HEATC_P_T_SKIP_WORDS];
  c.filter = words + HEATC_SKIP_WORDS_FILTER * (c.mask + 1);
  c.slots = words + HEATC_SKIP_WORDS_SLOTS * (c.mask + 1);
  c.nexts = words + HEATC_SKIP_WORDS_NEXTS * (c.mask + 1);
  c.horizons = words + HEATC_SKIP_WORDS_HORIZONS * (c.mask + 1);
  c.quiet = quiet;
  c.stream = c.quiet ? HEATC_SKIP_PLAIN_QUIET : 0;
  c.anchors = p[HEATC_P_ANCHOR_LEXEMES] != 0;
  // (a build with anchors has no weak starts: the skipper does not rewind anchor state)
  c.weak = p[HEATC_P_SKIP_WEAK] != 0 && !c.anchors;
  c.cjk_log2 = p[HEATC_P_SKIP_CJK];
  c.cjk = c.cjk_log2 != 0;
  c.cjk_mask = c.cjk ? (1u << c.cjk_log2) - 1 : 0;
  c.cjk_table = c.plain + HEATC_SKIP_CJK_TABLE;
  c.cjk_lists = c.cjk_table + 4 * (c.cjk_mask + 1);
  const uint32_t d = p[HEATC_P_SKIP_DIGITS];
  c.digits = (d & HEATC_HCT_DIGITS_ON) != 0;
  c.decimals = c.digits && (d & HEATC_HCT_DIGITS_DECIMALS);
  c.percent = c.digits && (d & HEATC_HCT_DIGITS_PERCENT);
  c.years = c.digits && (d & HEATC_HCT_DIGITS_YEARS);
  // a counted number is kept as the look-behind of late-starting rules that read numbers
  c.number_look = c.digits && p[HEATC_P_LATE] && (g.t[p[HEATC_P_T_CODE_FLAGS] + HEATC_LEX_NUMBER] & HEATC_FLAG_LOOK);
  c.late_only = nullptr;  // (late_only_codes, where the host keeps them)
  c.dfa = g.t + p[HEATC_P_T_DFA];
  c.byte_class = g.t + p[HEATC_P_T_BYTE_CLASS];
  c.width = p[HEATC_P_DFA_WIDTH];
  c.n_always = c.n_before = 0;
  for (uint32_t i = 0; i < HEATC_DIGIT_EXTENDERS_MAX && c.digits; i++) {
    uint8_t b = (uint8_t)(p[HEATC_P_DIGIT_EXTENDERS] >> (8 * i));
    if (!b) break;
    if (d & (HEATC_HCT_DIGITS_BEFORE_DIGIT << i))
      c.before[c.n_before++] = b;
    else
      c.always[c.n_always++] = b;
  }
  return c;
}

// Which lexeme codes a skipper may count as plain words where the lexeme before them is no
// number (or percentage, or date): those that start only late-starting rules (as their
// second element, ir.starts_late) whose first element takes only numbers, percentages and
// dates, and that trigger nothing, are in no anchor term and are no look-behind. Such a rule
// starts a thread only when the lexeme before is one its first element takes (the
// look-behind): after a word or a plain byte, no rule has anything to do with the keyword
// ("of" after a word, where a learned heatmap has "v:percent of"). `out`: a byte per code.
inline void late_only_codes(const Program& g, uint8_t* out) {
  const uint32_t* p = g.p;
  const uint32_t codes = p[HEATC_P_N_CODES];
  const uint8_t* flags = g.t + p[HEATC_P_T_CODE_FLAGS];
  const uint8_t* start_off = g.t + p[HEATC_P_T_START_OFF];
  const uint8_t* start_rules = g.t + p[HEATC_P_T_START_RULES];
  for (uint32_t code = 0; code < codes; code++) {
    out[code] = 0;
    if (code < HEATC_LEX_LITERAL0 || !p[HEATC_P_LATE] ||
        (flags[code] & (HEATC_FLAG_TRIGGER | HEATC_FLAG_ANCHOR_MEMBER | HEATC_FLAG_LOOK | HEATC_FLAG_BARRIER)) ||
        !(flags[code] & HEATC_FLAG_STARTS))
      continue;
    uint32_t a = ld<uint32_t>(start_off + 4 * code), b = ld<uint32_t>(start_off + 4 * code + 4);
    bool only = a < b;
    for (uint32_t i = a; i < b && only; i++) {
      const uint8_t* rec = rule_rec(g, ld<uint32_t>(start_rules + 4 * i));
      only = ld<uint32_t>(rec + HEATC_RULE_LATE) != 0;
      const uint8_t* el = rec + ld<uint32_t>(rec + HEATC_RULE_ELEMENTS);  // the first element
      const uint8_t* acc = rec + ld<uint32_t>(el + HEATC_EL_ACCEPTS);
      for (uint32_t k = 0; k < ld<uint32_t>(el + HEATC_EL_N_ACCEPTS) && only; k++) {
        uint32_t x = ld<uint32_t>(acc + 4 * k);
        only = x == HEATC_LEX_NUMBER || x == HEATC_LEX_PERCENT || x == HEATC_LEX_DATE;
      }
    }
    out[code] = only;
  }
}

// Whether the `n` letters at p are, read alone by the automaton, a late_only keyword
HEATC_INLINE bool late_only_word(const Config& c, const uint8_t* p, uint32_t n) {
  uint32_t row = c.width;
  for (uint32_t k = 0; k < n && row; k++) row = ld<uint32_t>(c.dfa + 4 * (row + c.byte_class[p[k]]));
  return row && c.late_only[ld<uint32_t>(c.dfa + 4 * (row + c.width - 1)) & 0x7FFF];
}

// A word's key in the word table with any byte after it (heatc.wasm.skipper.skip_word_key):
// its first 8 bytes | 0x20, those past its `n` letters zeroed, xor n << 40. (The key with
// the byte b after it is this xor b << 48.)
HEATC_INLINE uint64_t word_key(const uint8_t* p, uint32_t n) {
  // (the mask of a word's first min(n, 8) bytes, from a table: no branch, no variable shift)
  static constexpr uint64_t bytes[9] = {0,
                                        0xFFull,
                                        0xFFFFull,
                                        0xFFFFFFull,
                                        0xFFFFFFFFull,
                                        0xFFFFFFFFFFull,
                                        0xFFFFFFFFFFFFull,
                                        0xFFFFFFFFFFFFFFull,
                                        ~0ull};
  uint64_t key = (ld<uint64_t>(p) | 0x2020202020202020ull) & bytes[smaller(n, 8)];
  return key ^ (uint64_t)n << 40;
}

// the word table's one-bit filter at `bit` (a bit array of 64-bit words)
HEATC_INLINE uint64_t filter_bit(const Config& c, uint32_t bit) {
  return ld<uint64_t>(c.filter + 8 * (bit >> 6)) >> (bit & 63) & 1;
}

// the slot of `key` in the word table (open addressing, linear probing, 0 = empty; the
// table has an empty slot, checked at load), or -1
HEATC_INLINE int32_t find_word(const Config& c, uint64_t key) {
  uint32_t slot = (uint32_t)((key * HEATC_SKIP_KEY_MUL) >> (64 - c.log2));
  for (;;) {
    uint64_t e = ld<uint64_t>(c.slots + 8 * slot);
    if (!e) return -1;
    if (e == key) return (int32_t)slot;
    slot = (slot + 1) & c.mask;
  }
}

// A block's byte classes (the masks the kernel builds from its two v128 halves).
struct Block {
  uint64_t letters;  // ASCII letters
  uint64_t plain;    // plain one-byte ASCII tokens in this stream (the plain-byte table)
  uint64_t space;    // ASCII whitespace
  uint64_t digits;   // ASCII digits
  uint64_t high;     // bytes of 0x80 and above
  uint64_t fp;       // bytes whose first two bytes from there fit a word fingerprint bucket
};

// The implementations, by instruction set (what a call may use: `implementation(name)`).
enum Isa { ISA_NONE, ISA_SCALAR, ISA_SSSE3, ISA_AVX2, ISA_NEON, N_ISA };
typedef uint32_t (*SkipFn)(const Config& c, uint8_t* s, const uint8_t* in, uint32_t i, uint32_t len,
                           uint64_t* tok_start, uint64_t* lexemes);

}  // namespace skip
}  // namespace heatc

// one copy of the block logic per instruction set, each compiled for its own target (so that
// every function of a copy inlines into its driver)
#define HEATC_SKIP_ISA 1
#define HEATC_SKIP_NS scalar
#define HEATC_SKIP_TARGET
#include "heatc_skipper_isa.h"
#undef HEATC_SKIP_ISA
#undef HEATC_SKIP_NS
#undef HEATC_SKIP_TARGET

#if defined(HEATC_SKIP_X86)
#define HEATC_SKIP_ISA 2
#define HEATC_SKIP_NS ssse3
#define HEATC_SKIP_TARGET __attribute__((target("ssse3,popcnt")))
#include "heatc_skipper_isa.h"
#undef HEATC_SKIP_ISA
#undef HEATC_SKIP_NS
#undef HEATC_SKIP_TARGET

#define HEATC_SKIP_ISA 3
#define HEATC_SKIP_NS avx2
#define HEATC_SKIP_TARGET __attribute__((target("avx2,bmi,bmi2,popcnt")))
#include "heatc_skipper_isa.h"
#undef HEATC_SKIP_ISA
#undef HEATC_SKIP_NS
#undef HEATC_SKIP_TARGET
#endif

#if defined(HEATC_SKIP_NEON)
#define HEATC_SKIP_ISA 4
#define HEATC_SKIP_NS neon
#define HEATC_SKIP_TARGET
#include "heatc_skipper_isa.h"
#undef HEATC_SKIP_ISA
#undef HEATC_SKIP_NS
#undef HEATC_SKIP_TARGET
#endif

namespace heatc {
namespace skip {

inline const char* const ISA_NAMES[N_ISA] = {"none", "scalar", "ssse3", "avx2", "neon"};

// the implementation of each instruction set, null where this build or CPU has none
inline SkipFn implementation(Isa isa) {
  switch (isa) {
    case ISA_SCALAR:
      return scalar::skip;
#if defined(HEATC_SKIP_X86)
    case ISA_SSSE3:
      return __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("popcnt") ? ssse3::skip : nullptr;
    case ISA_AVX2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                     __builtin_cpu_supports("popcnt")
                 ? avx2::skip
                 : nullptr;
#endif
#if defined(HEATC_SKIP_NEON)
    case ISA_NEON:
      return neon::skip;
#endif
    default:
      return nullptr;
  }
}

// the fastest this machine runs
inline Isa best() {
  for (int i = N_ISA - 1; i > ISA_NONE; i--)
    if (implementation((Isa)i)) return (Isa)i;
  return ISA_SCALAR;
}

}  // namespace skip
}  // namespace heatc
