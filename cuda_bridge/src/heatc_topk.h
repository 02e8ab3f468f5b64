// heatc_topk.h — the k best scores of a row, for guard on the host (heatc_native.cpp's
// topk()). Guard judges a row's best candidates; torch.topk over a 49,152-token vocabulary
// takes ~90 µs on one CPU core, a plain scan that skips 16-score blocks below the k-th best so
// far ~4 µs (the scores stream through once; the list of k is touched for few of them).
//
// Order: best first; among equal scores the lower token id first — what an argmax takes, so
// greedy decoding's choice among ties is the first candidate. A NaN is never taken while a
// number (or -inf) is left; a row with fewer than k of those is completed, as -inf, by the
// lowest ids not taken (the caller treats a non-finite score as a candidate it cannot use).
#pragma once
#include <math.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace heatc {

// whether any of 16 scores is above `floor` (a NaN never is: an ordered comparison is false
// for it). SSE2 and NEON are in every x86-64 and AArch64 machine; a plain loop elsewhere.
static inline bool any_above16(const float* x, float floor) {
#if defined(__SSE2__)
  const __m128 f = _mm_set1_ps(floor);
  __m128 a = _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x), f), _mm_cmpgt_ps(_mm_loadu_ps(x + 4), f));
  __m128 b = _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + 8), f), _mm_cmpgt_ps(_mm_loadu_ps(x + 12), f));
  return _mm_movemask_ps(_mm_or_ps(a, b)) != 0;
#elif defined(__ARM_NEON)
  const float32x4_t f = vdupq_n_f32(floor);
  uint32x4_t a = vorrq_u32(vcgtq_f32(vld1q_f32(x), f), vcgtq_f32(vld1q_f32(x + 4), f));
  uint32x4_t b = vorrq_u32(vcgtq_f32(vld1q_f32(x + 8), f), vcgtq_f32(vld1q_f32(x + 12), f));
  return vmaxvq_u32(vorrq_u32(a, b)) != 0;
#else
  int any = 0;
  for (int j = 0; j < 16; j++) any |= x[j] > floor;
  return any != 0;
#endif
}

// one row of `vocab` scores: vals/ids (k entries, 1 <= k <= vocab) get its k best
static inline void topk_row(const float* x, uint64_t vocab, uint32_t k, float* vals, int64_t* ids) {
  uint32_t have = 0;
  float floor = -INFINITY;  // once the list is full, its k-th score: only a larger one enters
  auto put = [&](float v, int64_t id) {
    uint32_t at = have < k ? have++ : k - 1;
    while (at > 0 && vals[at - 1] < v) {  // (strictly: an equal score stays below a lower id)
      vals[at] = vals[at - 1];
      ids[at] = ids[at - 1];
      at--;
    }
    vals[at] = v;
    ids[at] = id;
    if (have == k) floor = vals[k - 1];
  };
  uint64_t i = 0;
  for (; i < vocab && have < k; i++)
    if (x[i] == x[i]) put(x[i], (int64_t)i);  // the first k that are not NaN fill the list
  for (; i < vocab && (i & 15); i++)
    if (x[i] > floor) put(x[i], (int64_t)i);
  for (; i + 16 <= vocab; i += 16) {
    if (!any_above16(x + i, floor)) continue;
    for (uint64_t j = i; j < i + 16; j++)
      if (x[j] > floor) put(x[j], (int64_t)j);
  }
  for (; i < vocab; i++)
    if (x[i] > floor) put(x[i], (int64_t)i);
  for (uint64_t j = 0; have < k && j < vocab; j++) {  // fewer than k numbers: a row of NaN
    bool taken = false;
    for (uint32_t t = 0; t < have; t++) taken |= ids[t] == (int64_t)j;
    if (!taken) {
      vals[have] = -INFINITY;
      ids[have++] = (int64_t)j;
    }
  }
}

}  // namespace heatc
