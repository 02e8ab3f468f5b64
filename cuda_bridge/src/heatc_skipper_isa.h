// One instruction set's copy of the skipper (heatc_skipper.h includes this file once per
// set, with HEATC_SKIP_ISA 1 portable loops, 2 SSSE3, 3 AVX2, 4 NEON; HEATC_SKIP_NS its
// namespace; HEATC_SKIP_TARGET the target attribute every function of the copy carries, so
// that they all inline into its driver, `skip`). No include guard: that is the point.
//
// The byte classes are the kernel's (kernel.wat.j2's macros), written over W-byte vectors;
// `skip` is $scan's skipper, block for block, with 64-bit masks.

namespace heatc {
namespace skip {
namespace HEATC_SKIP_NS {

#define FN HEATC_SKIP_TARGET static inline __attribute__((always_inline))
#define SET(type, name, v) st<type>(s + g.p[HEATC_P_OFF_##name], (type)(v))

#if HEATC_SKIP_ISA == 1
// ---- portable loops: each byte's classes from the same tables --------------------------

struct Tabs {
  const uint8_t* plain;  // this stream's plain-byte table (by low nibble)
  const uint8_t* bits;   // a high nibble's bit
  const uint8_t* fp;     // the word fingerprints
  const uint8_t* cjk;    // the CJK fingerprints
};

FN void tables(const Config& c, Tabs& t) {
  t.plain = c.plain + c.stream;
  t.bits = c.plain + HEATC_SKIP_NIBBLE_BITS;
  t.fp = c.plain + HEATC_SKIP_WORD_FINGERPRINTS;
  t.cjk = c.plain + HEATC_SKIP_CJK_FINGERPRINTS;
}

FN void cjk_tables(const Config&, Tabs&) {}

FN bool plain_byte(const Tabs& t, uint32_t b) { return (t.plain[b & 15] & t.bits[b >> 4]) != 0; }
FN bool space_byte(uint32_t b) { return b == 0x20 || b - 9 < 5; }

// Eight bytes at a time in a u64 (SWAR): a byte's bit 7 set where it is in a class, then
// gathered into 8 bits (byte j's to bit j) by one multiplication.
constexpr uint64_t ONES = 0x0101010101010101ull, HIGH = 0x8080808080808080ull, LOW7 = 0x7F7F7F7F7F7F7F7Full;
FN uint64_t gather8(uint64_t m) { return ((m >> 7 & ONES) * 0x0102040810204080ull) >> 56; }
// bit 7 of each byte of x (7-bit bytes) where it is at least c
FN uint64_t at_least(uint64_t x, uint32_t c) { return ((x | HIGH) - ONES * c) & HIGH; }
// bit 7 of each byte of w that is c
FN uint64_t bytes_equal(uint64_t w, uint32_t c) {
  uint64_t z = w ^ (ONES * c);
  return ~(((z & LOW7) + LOW7) | z | LOW7);
}

FN void classify(const uint8_t* p, const Tabs& t, Block& k) {
  k = Block{0, 0, 0, 0, 0, 0};
  const uint8_t* f = t.fp;
  for (uint32_t x = 0; x < BLOCK; x += 8) {
    const uint64_t w = ld<uint64_t>(p + x), x7 = w & LOW7, ascii = ~w & HIGH;
    const uint64_t folded = (w | ONES * 0x20) & LOW7;
    k.letters |= gather8(at_least(folded, 0x61) & ~at_least(folded, 0x7B) & ascii) << x;
    k.digits |= gather8(at_least(x7, 0x30) & ~at_least(x7, 0x3A) & ascii) << x;
    k.space |= gather8(bytes_equal(w, 0x20) | (at_least(x7, 9) & ~at_least(x7, 14) & ascii)) << x;
    k.high |= gather8(w & HIGH) << x;
    uint64_t plain = 0, fp = 0;
    for (uint32_t j = 0; j < 8; j++) {
      uint32_t b = p[x + j], n = p[x + j + 1];
      plain |= (uint64_t)plain_byte(t, b) << j;
      fp |= (uint64_t)((f[b & 15] & f[16 + (b >> 4)] & f[32 + (n & 15)] & f[48 + (n >> 4)]) != 0) << j;
    }
    k.plain |= plain << x;
    k.fp |= fp << x;
  }
}

FN uint64_t equal(const uint8_t* p, uint32_t c) {
  uint64_t m = 0;
  for (uint32_t x = 0; x < BLOCK; x++) m |= (uint64_t)(p[x] == c) << x;
  return m;
}

// where a year may begin: a 1 before a 9, a 2 before a 0 or a 1 (heatc.wasm.digits.YEAR_HEADS)
FN uint64_t year_heads(const uint8_t* p) {
  uint64_t m = 0;
  for (uint32_t x = 0; x < BLOCK; x++)
    m |= (uint64_t)((p[x] == '1' && p[x + 1] == '9') || (p[x] == '2' && (uint32_t)p[x + 1] - '0' < 2)) << x;
  return m;
}

FN void plain_and_space(const uint8_t* p, const Tabs& t, uint64_t& plain, uint64_t& space) {
  plain = space = 0;
  for (uint32_t x = 0; x < BLOCK; x++) {
    plain |= (uint64_t)plain_byte(t, p[x]) << x;
    space |= (uint64_t)space_byte(p[x]) << x;
  }
}

// the lead bytes of valid three-byte characters (E1–EC or EE–EF, two continuation bytes):
// those no CJK fingerprint bucket fits (plain for sure) and the others (to look up)
FN void cjk_leads(const uint8_t* p, const Tabs& t, uint64_t& sure, uint64_t& candidates) {
  sure = candidates = 0;
  for (uint32_t x = 0; x < BLOCK; x++) {
    uint32_t b = p[x];
    if (!((b - 0xE1 < 12 || b - 0xEE < 2) && (p[x + 1] & 0xC0) == 0x80 && (p[x + 2] & 0xC0) == 0x80)) continue;
    uint32_t ga = 0xFF, gb = 0xFF;
    for (uint32_t j = 0; j < 3; j++) {
      uint32_t f = p[x + j] | 0x20;
      const uint8_t* q = t.cjk + 64 * j;
      ga &= q[f & 15] & q[16 + (f >> 4)];
      gb &= q[32 + (f & 15)] & q[48 + (f >> 4)];
    }
    (ga | gb ? candidates : sure) |= 1ull << x;
  }
}

// whether `next` is one of the CJK_CONTINUATIONS u32 at `list`
FN bool in_list(const uint8_t* list, uint32_t next) {
  bool hit = false;
  for (uint32_t i = 0; i < HEATC_CJK_CONTINUATIONS; i++) hit |= ld<uint32_t>(list + 4 * i) == next;
  return hit;
}

#else
// ---- vectors: the same classes W bytes at a time ----------------------------------------

#if HEATC_SKIP_ISA == 2
typedef __m128i V;
constexpr uint32_t W = 16;
FN V vload(const uint8_t* p) { return _mm_loadu_si128((const __m128i*)p); }
FN V vtable(const uint8_t* p) { return vload(p); }
FN V vsplat(int c) { return _mm_set1_epi8((char)c); }
FN V vand(V a, V b) { return _mm_and_si128(a, b); }
FN V vor(V a, V b) { return _mm_or_si128(a, b); }
FN V vadd(V a, V b) { return _mm_add_epi8(a, b); }
FN V vsub(V a, V b) { return _mm_sub_epi8(a, b); }
FN V veq(V a, V b) { return _mm_cmpeq_epi8(a, b); }
FN V vlts(V a, V b) { return _mm_cmplt_epi8(a, b); }                       // signed a < b
FN V vleu(V a, V b) { return _mm_cmpeq_epi8(_mm_min_epu8(a, b), a); }      // unsigned a <= b
FN V vswizzle(V t, V i) { return _mm_shuffle_epi8(t, i); }                  // i < 16
FN V vhigh_nibble(V v) { return _mm_and_si128(_mm_srli_epi16(v, 4), vsplat(15)); }
FN uint64_t vbits(V m) { return (uint32_t)_mm_movemask_epi8(m); }
#elif HEATC_SKIP_ISA == 3
typedef __m256i V;
constexpr uint32_t W = 32;
FN V vload(const uint8_t* p) { return _mm256_loadu_si256((const __m256i*)p); }
FN V vtable(const uint8_t* p) { return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)p)); }
FN V vsplat(int c) { return _mm256_set1_epi8((char)c); }
FN V vand(V a, V b) { return _mm256_and_si256(a, b); }
FN V vor(V a, V b) { return _mm256_or_si256(a, b); }
FN V vadd(V a, V b) { return _mm256_add_epi8(a, b); }
FN V vsub(V a, V b) { return _mm256_sub_epi8(a, b); }
FN V veq(V a, V b) { return _mm256_cmpeq_epi8(a, b); }
FN V vlts(V a, V b) { return _mm256_cmpgt_epi8(b, a); }
FN V vleu(V a, V b) { return _mm256_cmpeq_epi8(_mm256_min_epu8(a, b), a); }
FN V vswizzle(V t, V i) { return _mm256_shuffle_epi8(t, i); }  // (per 128-bit lane: tables are in both)
FN V vhigh_nibble(V v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), vsplat(15)); }
FN uint64_t vbits(V m) { return (uint32_t)_mm256_movemask_epi8(m); }
#elif HEATC_SKIP_ISA == 4
typedef uint8x16_t V;
constexpr uint32_t W = 16;
FN V vload(const uint8_t* p) { return vld1q_u8(p); }
FN V vtable(const uint8_t* p) { return vld1q_u8(p); }
FN V vsplat(int c) { return vdupq_n_u8((uint8_t)c); }
FN V vand(V a, V b) { return vandq_u8(a, b); }
FN V vor(V a, V b) { return vorrq_u8(a, b); }
FN V vadd(V a, V b) { return vaddq_u8(a, b); }
FN V vsub(V a, V b) { return vsubq_u8(a, b); }
FN V veq(V a, V b) { return vceqq_u8(a, b); }
FN V vlts(V a, V b) { return vcltq_s8(vreinterpretq_s8_u8(a), vreinterpretq_s8_u8(b)); }
FN V vleu(V a, V b) { return vcleq_u8(a, b); }
FN V vswizzle(V t, V i) { return vqtbl1q_u8(t, i); }
FN V vhigh_nibble(V v) { return vshrq_n_u8(v, 4); }
#endif

constexpr uint32_t N = BLOCK / W;  // vectors a block
static_assert(HEATC_CJK_CONTINUATIONS % (W / 4) == 0, "the continuation lists are compared a vector at a time");

// whether `next` is one of the CJK_CONTINUATIONS u32 at `list` (W / 4 at a time)
FN bool in_list(const uint8_t* list, uint32_t next) {
#if HEATC_SKIP_ISA == 2
  const __m128i k = _mm_set1_epi32((int)next);
  __m128i hit = _mm_setzero_si128();
  for (uint32_t i = 0; i < HEATC_CJK_CONTINUATIONS; i += 4)
    hit = _mm_or_si128(hit, _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i*)(list + 4 * i)), k));
  return _mm_movemask_epi8(hit) != 0;
#elif HEATC_SKIP_ISA == 3
  const __m256i k = _mm256_set1_epi32((int)next);
  __m256i hit = _mm256_setzero_si256();
  for (uint32_t i = 0; i < HEATC_CJK_CONTINUATIONS; i += 8)
    hit = _mm256_or_si256(hit, _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i*)(list + 4 * i)), k));
  return _mm256_movemask_epi8(hit) != 0;
#else
  const uint32x4_t k = vdupq_n_u32(next);
  uint32x4_t hit = vdupq_n_u32(0);
  for (uint32_t i = 0; i < HEATC_CJK_CONTINUATIONS; i += 4) hit = vorrq_u32(hit, vceqq_u32(vld1q_u32((const uint32_t*)(list + 4 * i)), k));
  return vmaxvq_u32(hit) != 0;
#endif
}

// a block's mask from its N comparison results (lanes all ones or zero)
FN uint64_t vmask(const V* m) {
#if HEATC_SKIP_ISA == 4
  // (the lanes' weights 1 … 128 summed pairwise three times: byte k of the result is bits 8k…8k+7)
  static const uint8_t weights[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const V w = vld1q_u8(weights);
  V a = vpaddq_u8(vandq_u8(m[0], w), vandq_u8(m[1], w));
  V b = vpaddq_u8(vandq_u8(m[2], w), vandq_u8(m[3], w));
  a = vpaddq_u8(a, b);
  a = vpaddq_u8(a, a);
  return vgetq_lane_u64(vreinterpretq_u64_u8(a), 0);
#else
  uint64_t r = 0;
  for (uint32_t h = 0; h < N; h++) r |= vbits(m[h]) << (W * h);
  return r;
#endif
}

struct Tabs {
  V plain_lo, plain_hi;      // this stream's plain-byte table, a high nibble's bit
  V fp[4];                   // word fingerprints: first byte by low, high nibble; then the second's
  V cjk[12];                 // CJK fingerprints: per byte offset lo A, hi A, lo B, hi B
};

FN void tables(const Config& c, Tabs& t) {
  t.plain_lo = vtable(c.plain + c.stream);
  t.plain_hi = vtable(c.plain + HEATC_SKIP_NIBBLE_BITS);
  for (uint32_t i = 0; i < 4; i++) t.fp[i] = vtable(c.plain + HEATC_SKIP_WORD_FINGERPRINTS + 16 * i);
}

// the CJK fingerprints (loaded where CJK text begins: most calls never reach it)
FN void cjk_tables(const Config& c, Tabs& t) {
  for (uint32_t i = 0; i < 12; i++) t.cjk[i] = vtable(c.plain + HEATC_SKIP_CJK_FINGERPRINTS + 16 * i);
}

FN V letters(V v) {  // (b | 0x20) + 0x1F lands in -128…-103 exactly for a–z
  return vlts(vadd(vor(v, vsplat(0x20)), vsplat(0x1F)), vsplat(-102));
}
FN V spaces(V v) {  // a space, or 9–13 (+ 0x77 takes them to -128…-124)
  return vor(veq(v, vsplat(0x20)), vlts(vadd(v, vsplat(0x77)), vsplat(-123)));
}
FN V plain_bytes(V v, const Tabs& t) {  // (inverted: lanes that are not plain)
  return veq(vand(vswizzle(t.plain_lo, vand(v, vsplat(15))), vswizzle(t.plain_hi, vhigh_nibble(v))), vsplat(0));
}

FN void classify(const uint8_t* p, const Tabs& t, Block& k) {
  V v[N], m[N];
  for (uint32_t h = 0; h < N; h++) v[h] = vload(p + W * h);
  for (uint32_t h = 0; h < N; h++) m[h] = letters(v[h]);
  k.letters = vmask(m);
  for (uint32_t h = 0; h < N; h++) m[h] = plain_bytes(v[h], t);
  k.plain = ~vmask(m);
  for (uint32_t h = 0; h < N; h++) m[h] = spaces(v[h]);
  k.space = vmask(m);
  // ASCII digits: + 0x50 takes 0x30–0x39 to -128…-119
  for (uint32_t h = 0; h < N; h++) m[h] = vlts(vadd(v[h], vsplat(0x50)), vsplat(-118));
  k.digits = vmask(m);
  for (uint32_t h = 0; h < N; h++) m[h] = vlts(v[h], vsplat(0));
  k.high = vmask(m);
  // fingerprints of each byte and the next (raw bytes: the high-nibble tables hold both cases)
  for (uint32_t h = 0; h < N; h++) {
    V x = vload(p + W * h + 1);
    V a = vand(vswizzle(t.fp[0], vand(v[h], vsplat(15))), vswizzle(t.fp[1], vhigh_nibble(v[h])));
    V b = vand(vswizzle(t.fp[2], vand(x, vsplat(15))), vswizzle(t.fp[3], vhigh_nibble(x)));
    m[h] = veq(vand(a, b), vsplat(0));
  }
  k.fp = ~vmask(m);
}

FN uint64_t equal(const uint8_t* p, uint32_t c) {
  V m[N];
  for (uint32_t h = 0; h < N; h++) m[h] = veq(vload(p + W * h), vsplat((int)c));
  return vmask(m);
}

FN uint64_t year_heads(const uint8_t* p) {
  V m[N];
  for (uint32_t h = 0; h < N; h++) {
    V v = vload(p + W * h), x = vload(p + W * h + 1);
    m[h] = vor(vand(veq(v, vsplat('1')), veq(x, vsplat('9'))),
               vand(veq(v, vsplat('2')), vleu(vsub(x, vsplat('0')), vsplat(1))));
  }
  return vmask(m);
}

FN void plain_and_space(const uint8_t* p, const Tabs& t, uint64_t& plain, uint64_t& space) {
  V v[N], m[N];
  for (uint32_t h = 0; h < N; h++) v[h] = vload(p + W * h);
  for (uint32_t h = 0; h < N; h++) m[h] = plain_bytes(v[h], t);
  plain = ~vmask(m);
  for (uint32_t h = 0; h < N; h++) m[h] = spaces(v[h]);
  space = vmask(m);
}

FN void cjk_leads(const uint8_t* p, const Tabs& t, uint64_t& sure, uint64_t& candidates) {
  V valid[N], miss[N];
  for (uint32_t h = 0; h < N; h++) {
    const uint8_t* q = p + W * h;
    V ga = vsplat(0xFF), gb = vsplat(0xFF);
    for (uint32_t j = 0; j < 3; j++) {
      V f = vor(vload(q + j), vsplat(0x20));
      V lo = vand(f, vsplat(15)), hi = vhigh_nibble(f);
      ga = vand(ga, vand(vswizzle(t.cjk[4 * j], lo), vswizzle(t.cjk[4 * j + 1], hi)));
      gb = vand(gb, vand(vswizzle(t.cjk[4 * j + 2], lo), vswizzle(t.cjk[4 * j + 3], hi)));
    }
    V v = vload(q);
    V lead = vor(vleu(vsub(v, vsplat(0xE1)), vsplat(11)), vleu(vsub(v, vsplat(0xEE)), vsplat(1)));
    V c1 = veq(vand(vload(q + 1), vsplat(0xC0)), vsplat(0x80));
    V c2 = veq(vand(vload(q + 2), vsplat(0xC0)), vsplat(0x80));
    valid[h] = vand(lead, vand(c1, c2));
    miss[h] = veq(vor(ga, gb), vsplat(0));
  }
  uint64_t ok = vmask(valid), none = vmask(miss);
  sure = ok & none;
  candidates = ok & ~none;
}
#endif

// ---- the block logic --------------------------------------------------------------------

// Whether the CJK character at p (three bytes) is plain, by the table (kinds:
// heatc.wasm.skipper._cjk_tables): absent, a trigger in a quiet stream, or a character that a
// longer token may begin with when no character of its continuation list follows.
FN bool plain_cjk(const Config& c, const uint8_t* p) {
  uint32_t key = ld<uint32_t>(p) & 0xFFFFFF;
  uint32_t slot = (key * HEATC_CJK_KEY_MUL) >> (32 - c.cjk_log2);
  for (;;) {
    uint32_t e = ld<uint32_t>(c.cjk_table + 4 * slot);
    if (!e) return true;
    if ((e & 0xFFFFFF) == key) {
      uint32_t kind = e >> 24;
      if (kind == 2 && c.quiet) return true;
      if (kind < 3) return false;
      return !in_list(c.cjk_lists + 4 * HEATC_CJK_CONTINUATIONS * (kind - 3), ld<uint32_t>(p + 3) & 0xFFFFFF);
    }
    slot = (slot + 1) & c.cjk_mask;
  }
}

// From a token start at `in` + i with no live thread: counts what needs no automaton, block
// by block, and returns where the automaton takes over (a token start). Needs BLOCK + SLACK
// bytes left to read a block (the caller's HEATC_SKIP_MIN).
HEATC_SKIP_TARGET __attribute__((noinline)) uint32_t skip(const Config& c, uint8_t* s, const uint8_t* in, uint32_t i,
                                                           uint32_t len, uint64_t* tok_start_io, uint64_t* lexemes_io) {
  const Program& g = *c.g;
  const uint32_t filter_shift = 64 - c.log2 - 5;
  Tabs t;
  tables(c, t);
  bool cjk_loaded = false;
  uint64_t tok_start = *tok_start_io, lexemes = *lexemes_io;
  const uint8_t* p = in + i;
  const uint8_t* const end = in + len;
  // the first weak start counted: where, its stream offset, the lexemes before it, and the
  // lexeme count at which every thread the weak starts counted started is dead (0: none)
  const uint8_t* weak_p = nullptr;
  uint64_t weak_start = 0, weak_lexemes = 0, weak_dead = 0;
  for (;;) {
    if ((uint64_t)(end - p) < BLOCK + SLACK) break;
    if (!(c.cjk && *p >= 0x80)) {
      // ---- ASCII: words, whitespace, plain bytes, numbers
      Block k;
      classify(p, t, k);
      uint64_t lm = k.letters, om = k.plain, sp = k.space;
      uint64_t dm = 0, ds = 0, pc = 0;  // numbers' bytes, the runs' first bytes, `%` after a run
      uint32_t dr = BLOCK;              // the start of a run that reaches the block's end
      uint32_t stop;                    // the first byte it cannot pass (BLOCK: none)
      if (c.digits) {
        dm = k.digits;
        uint32_t dx = first(~(lm | om | sp | dm));
        if (dm) {
          const uint64_t dd = dm;  // the digits alone
          uint64_t xm = 0, xc = 0, j = 0;
          for (uint32_t e = 0; e < c.n_always; e++) xm |= equal(p, c.always[e]);
          for (uint32_t e = 0; e < c.n_before; e++) xc |= equal(p, c.before[e]);
          uint32_t second = BLOCK;  // the start of a run with a second point
          if (c.decimals) {
            j = equal(p, '.');
            xc |= j;
            // a point between two digits is part of the number; a run with two stops here
            j &= (dm << 1) & (dm >> 1);
            ds = dm & ~(dm << 1);
            uint64_t again = (dm + (ds & (j << 1))) & ~dm & j;
            dm |= j;
            om &= ~j;
            if (again) second = run_start(dm, first(again));
            dx = smaller(first(~(lm | om | sp | dm)), second);
          }
          ds = dm & ~(dm << 1);
          if (c.percent) {
            // a `%` right after a run: one percent lexeme, the run takes it in
            pc = equal(p, '%') & (dm + ds) & ~dm;
            dm |= pc;
            om &= ~pc;
            dx = smaller(first(~(lm | om | sp | dm)), second);
          }
          // extenders that extend here: always, or before a digit or a non-ASCII byte (or
          // the block's end, which may be followed by one)
          xm |= xc & (((dm | k.high) >> 1) | (1ull << 63));
          // the byte after each run, where it is no ender (neither whitespace nor a plain
          // byte that does not extend a number): the first such run is not a plain number
          xm = (dm + ds) & ~dm & ~(sp | (om & ~xm));
          if (xm) dx = smaller(dx, run_start(dm, first(xm)));
          dr = run_start(dm, BLOCK);
          // nine bytes of a number or more
          uint64_t nine = dm & (dm >> 1);
          nine &= nine >> 2;
          nine &= (nine >> 4) & (dm >> 8);
          dx = smaller(dx, first(nine));
          if (c.years) {
            // a run of just four digits that begins 19, 20 or 21 may be a year: a date
            uint64_t y = year_heads(p) & ds & (dd >> 2) & (dd >> 3) & ~(dm >> 4);
            dx = smaller(dx, first(y));
          }
        }
        stop = dx;
        // a weak start's threads may be alive: a number may advance one, so stop before it
        if (weak_dead) stop = smaller(stop, first(dm));
      } else {
        stop = first(~(lm | om | sp));
      }
      // word starts (at bit 0 too: p is a token start)
      const uint64_t ws = lm & ~(lm << 1);
      uint32_t lim = stop;
      if (stop == BLOCK && (lm >> 63)) lim = last(ws);  // a word that may run past the block
      lim = smaller(lim, dr);
      // the words to look at: word starts below lim whose first two bytes fit a fingerprint;
      // of them, those whose filter bit is set (one bit per word, whatever follows it:
      // nearly every plain word stops there), each key computed without a branch
      uint64_t hits = 0;
      for (uint64_t x = ws & k.fp & below(lim); x; x &= x - 1) {
        const uint32_t at = (uint32_t)__builtin_ctzll(x);
        // (a word looked at ends inside the block: the letters from `at` have a bit clear)
        const uint64_t any_key = word_key(p + at, (uint32_t)__builtin_ctzll(~(lm >> at)));
        hits |= filter_bit(c, (uint32_t)((any_key * HEATC_SKIP_KEY_MUL) >> filter_shift)) << at;
      }
      for (uint64_t x = hits; x; x &= x - 1) {
        const uint32_t at = first(x);
        const uint32_t n = first(~(lm >> at));
        const uint64_t any_key = word_key(p + at, n);
        uint32_t b = p[at + n];
        if (b - 9 < 5) b = 0x20;
        bool stop_here = false;
        // the word with the byte after it (`mg` then `/`)
        int32_t slot = find_word(c, any_key ^ ((uint64_t)b << 48));
        if (slot >= 0) {
          stop_here = true;
          uint64_t pre = b == 0x20 ? ld<uint64_t>(c.nexts + 8 * (uint32_t)slot) : 0;
          if (pre) {
            // the first word of a multi-word literal: a plain word unless the next word
            // begins as one of the literal's does (up to four u16 prefixes)
            uint32_t from = at + n, jn = from + first(~(from < 64 ? sp >> from : 0));
            if (jn < BLOCK) {
              uint32_t next = ld<uint16_t>(p + jn) | 0x2020;
              bool hit = false;
              for (uint32_t q = 0; q < 4; q++) hit |= (uint32_t)(pre >> (16 * q) & 0xFFFF) == next;
              stop_here = hit;
            }
          }
        }
        if (!stop_here) {
          // the word with any byte after it
          slot = find_word(c, any_key);
          if (slot >= 0) {
            stop_here = true;
            uint32_t horizon = c.weak ? c.horizons[slot] : 0;
            if (horizon) {
              // a weak start: count it as a word and go on, coming back to it if the skipper
              // stops before its threads are dead (after it and its horizon's lexemes)
              uint64_t before = lexemes + popcount((om | ws | ds) & below(at));
              if (!weak_dead) {
                weak_p = p + at;
                weak_start = tok_start + at;
                weak_lexemes = before;
              }
              uint64_t dead = before + horizon + 1;
              if (dead > weak_dead) weak_dead = dead;
              // a number after it may advance a thread: stop before the first digit after it
              uint32_t d = first(dm & ~below(at));
              if (d < lim) {
                lim = d;
                stop = 0;
                x &= below(d);
              }
              stop_here = false;
            } else if (c.late_only) {
              // a keyword of late-starting rules only, after a word or a plain byte (not a
              // number, which their first element takes): a plain word here
              const uint64_t starts = (om | ws | ds) & below(at);
              if (starts && !(ds >> last(starts) & 1) && late_only_word(c, p + at, n)) stop_here = false;
            }
          }
        }
        if (stop_here) {
          lim = at;  // stop before it, counting what came before it
          stop = 0;
          break;
        }
      }
      const uint64_t taken = below(lim);
      // a lexeme per plain byte, word and number
      lexemes += popcount(om & taken) + popcount((ws | ds) & taken);
      if (c.number_look) {
        // the last lexeme counted is a number (not a percentage): keep it as the look-behind
        uint64_t starts = (om | ws | ds) & taken;
        if (starts) {
          uint32_t at = last(starts);
          if ((ds >> at & 1) && !((pc & taken) >> at)) {
            SET(uint64_t, LOOK_MARK, lexemes);
            SET(uint64_t, LOOK_START, tok_start + at);
            SET(uint32_t, LOOK_CODE, HEATC_LEX_NUMBER);
            SET(uint32_t, LOOK_LEN, first(~(dm >> at)));
            st<uint64_t>(s + g.p[HEATC_P_OFF_LOOK_BUF], ld<uint64_t>(p + at));
          }
        }
      }
      if (c.anchors) {
        // skipped lexemes are in no anchor term: each breaks every run; the last ends at its highest byte
        uint64_t bytes = (om | lm | dm) & taken;
        if (bytes) {
          SET(uint32_t, ANCHOR_COUNT, 0);
          SET(uint64_t, LAST_END, tok_start + last(bytes) + 1);
        }
      }
      p += lim;
      tok_start += lim;
      if (lexemes >= weak_dead) weak_dead = 0;  // the weak starts' threads are dead
      // go on after a whole block, or before a word or number that runs past it
      if (stop == BLOCK && lim != 0) continue;
      if (!c.cjk || *p < 0x80) break;
    }
    // ---- CJK text: plain characters, whitespace and plain ASCII bytes
    // (it does not watch for the weak starts' threads to die: go back to the first one now)
    if (weak_dead) break;
    if (!cjk_loaded) {
      cjk_tables(c, t);
      cjk_loaded = true;
    }
    const uint8_t* const from = p;
    for (;;) {
      if ((uint64_t)(end - p) < BLOCK + SLACK) break;
      uint64_t cm, cand;
      cjk_leads(p, t, cm, cand);
      // candidates, in order: plain unless the table says otherwise (stop at the first that is not)
      while (cand) {
        uint32_t at = first(cand);
        if (!plain_cjk(c, p + at)) break;
        cm |= 1ull << at;
        cand &= cand - 1;
      }
      uint64_t om, sp;
      plain_and_space(p, t, om, sp);
      // a plain character's bytes: its lead and the two after it
      uint64_t lm = om | cm | cm << 1 | cm << 2;
      uint32_t stop = first(~(lm | sp)), lim = stop;
      // a character that runs past the block: go on from its lead byte
      if (stop == BLOCK && (cm >> (BLOCK - 2))) lim = first(cm & ~below(BLOCK - 2));
      const uint64_t taken = below(lim);
      lexemes += popcount(om & taken) + popcount(cm & taken);
      if (c.anchors && (lm & taken)) {
        SET(uint32_t, ANCHOR_COUNT, 0);
        SET(uint64_t, LAST_END, tok_start + last(lm & taken) + 1);
      }
      p += lim;
      tok_start += lim;
      if (!(stop == BLOCK && lim != 0)) break;
    }
    // back to the word loop when this made progress and stopped before a letter
    if (p != from && is_letter(*p)) continue;
    break;
  }
  if (weak_dead) {
    // stopped while a weak start's threads may be alive: the automaton goes on from it
    p = weak_p;
    tok_start = weak_start;
    lexemes = weak_lexemes;
  }
  *tok_start_io = tok_start;
  *lexemes_io = lexemes;
  return (uint32_t)(p - in);
}

#undef FN
#undef SET

}  // namespace HEATC_SKIP_NS
}  // namespace skip
}  // namespace heatc
