// The heatc batch kernels (docs/cuda.md): one launch steps a whole batch. Compiled at run time
// by NVRTC (heatc_runtime.cuda.compile, cubin cached by source hash and architecture) and, in
// CI, by nvcc for sm_80 and sm_90 (tests/test_cuda_bridge.py).
//
// Layout: `lanes` consecutive threads serve one sequence (1: a thread per sequence; 32: a warp
// per sequence; any power of two up to 32). In the step and text kernels lane 0 runs the core;
// in the step kernel the other lanes wait and share each snapshot's verdicts (every rule's:
// heatc::Helpers), in the text kernel they leave at once. A warp per sequence trades idle
// lanes for no divergence between sequences and a batch spread over every SM. In the guard kernel the
// lanes copy the state into each candidate's scratch slot together (coalesced), then each
// takes candidates lane, lane + lanes, …
//
// Nothing here allocates, synchronises with the host or configures anything: a launch can be
// captured in a CUDA graph. Tables are read through the Program's per-tier bases (rule index
// → offset → tier → pointer: heatc_core.h, rule_rec).
#include "heatc_kernels.h"

namespace {

struct Seq {
  uint32_t index, lane;
};

__device__ __forceinline__ Seq where(uint32_t lanes) {
  uint32_t gid = blockIdx.x * blockDim.x + threadIdx.x;
  return Seq{gid / lanes, gid % lanes};
}

// the lanes of this thread's group (they share a warp: lanes divides 32)
__device__ __forceinline__ unsigned group_mask(uint32_t lanes) {
  if (lanes >= 32) return 0xFFFFFFFFu;
  unsigned lane_in_warp = threadIdx.x & 31u;
  return ((1u << lanes) - 1u) << (lane_in_warp & ~(lanes - 1u));
}

}  // namespace

// ids: n rows of t_max int64 token ids (row i: lengths[i] of them, or t_max when lengths is
// null). out: n output rows of heatc::row_bytes(g, ev_keep, snap_keep) bytes.
// tails (null: none kept): n rows of HEATC_GUARD_TAIL bytes, each sequence's last bytes, kept
// current for the guard kernel.
extern "C" __global__ void heatc_step(heatc::Program g, heatc::Tokens tk, uint8_t* states, const int64_t* ids,
                                      const int64_t* lengths, uint32_t n, uint32_t t_max, uint8_t* out,
                                      uint32_t ev_keep, uint32_t snap_keep, uint32_t lanes, uint8_t* tails) {
  Seq q = where(lanes);
  if (q.index >= n) return;  // (a whole group leaves together: it shares q.index)
  // the group's other lanes share each snapshot's verdicts (heatc::Helpers)
  __shared__ heatc::Helpers pool[HEATC_BLOCK / 2];  // (a group is 2 lanes or more)
  heatc::Helpers* h = lanes > 1 ? &pool[threadIdx.x / lanes] : nullptr;
  if (h && q.lane != 0) {
    heatc::helper_loop(g, h, q.lane, lanes, group_mask(lanes));
    return;
  }
  if (h) {
    h->lanes = lanes;
    h->mask = group_mask(lanes);
  }
  uint32_t len = t_max;
  if (lengths) {
    int64_t l = lengths[q.index];
    len = l < 0 ? 0u : l > (int64_t)t_max ? t_max : (uint32_t)l;
  }
  heatc::step_row(g, tk, states + (uint64_t)q.index * g.p[HEATC_P_STATE_SIZE],
                  out + (uint64_t)q.index * heatc::row_bytes(g, ev_keep, snap_keep), ev_keep, snap_keep, q.index,
                  ids + (uint64_t)q.index * t_max, len, h,
                  tails ? tails + (uint64_t)q.index * HEATC_GUARD_TAIL : nullptr);
  if (h) {
    h->cmd = 0;  // the step is over: release the helpers
    __syncwarp(h->mask);
  }
}

// text[offsets[i] .. offsets[i + 1]) of its text_len bytes for sequence i; mode 0 feed (one
// token), 1 scan (whole document)
extern "C" __global__ void heatc_text(heatc::Program g, uint8_t* states, const uint8_t* text, uint64_t text_len,
                                      const int64_t* offsets, uint32_t n, uint8_t* out, uint32_t ev_keep,
                                      uint32_t snap_keep, uint32_t mode, uint32_t lanes) {
  Seq q = where(lanes);
  if (q.index >= n || q.lane != 0) return;
  heatc::text_row(g, states + (uint64_t)q.index * g.p[HEATC_P_STATE_SIZE],
                  out + (uint64_t)q.index * heatc::row_bytes(g, ev_keep, snap_keep), ev_keep, snap_keep, q.index,
                  text, text_len, offsets[q.index], offsets[q.index + 1], mode);
}

// cand: n rows of k int64 candidate ids (negative: unusable); scratch: n * k slots of
// heatc::guard_slot(g) bytes; mask: n rows of k bytes (HEATC_MASK_*). look 0: each candidate
// fed, 1: and the text ended there (the raw looks); 2: guard's decision, reading tails (n rows
// of HEATC_GUARD_TAIL bytes; null: texts with no bytes before). The states are only read.
extern "C" __global__ void heatc_guard(heatc::Program g, heatc::Tokens tk, const uint8_t* states,
                                       const uint8_t* tails, const int64_t* cand, uint32_t n, uint32_t k,
                                       uint8_t* scratch, uint8_t* mask, uint32_t look, uint32_t lanes) {
  Seq q = where(lanes);
  if (q.index >= n) return;  // (a whole group leaves together: it shares q.index)
  const uint32_t ss = g.p[HEATC_P_STATE_SIZE];
  const uint64_t slot = heatc::guard_slot(g);
  const uint8_t* src = states + (uint64_t)q.index * ss;
  uint8_t* mine = scratch + (uint64_t)q.index * k * slot;
  if (look == 2) {
    uint8_t none[HEATC_GUARD_TAIL] = {0};
    const uint8_t* tail = tails ? tails + (uint64_t)q.index * HEATC_GUARD_TAIL : none;
    for (uint32_t j = q.lane; j < k; j += lanes)
      mask[(uint64_t)q.index * k + j] = heatc::guard_decide(g, tk, src, tail, cand[(uint64_t)q.index * k + j],
                                                            mine + j * slot);
    return;
  }
  for (uint32_t j = 0; j < k; j++) {
    uint64_t* dst = (uint64_t*)(mine + j * slot);
    for (uint32_t w = q.lane; w < ss / 8; w += lanes) dst[w] = ((const uint64_t*)src)[w];
  }
  if (lanes > 1) __syncwarp(group_mask(lanes));
  for (uint32_t j = q.lane; j < k; j += lanes)
    mask[(uint64_t)q.index * k + j] =
        heatc::guard_candidate(g, tk, mine + j * slot, cand[(uint64_t)q.index * k + j], look);
}
