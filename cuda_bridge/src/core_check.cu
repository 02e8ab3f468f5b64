// The core built for the GPU: one thread per sequence, every entry point instantiated, so
// that `nvcc -c` (tests/test_cuda_bridge.py, for sm_80 and sm_90) checks the same source the
// native backend runs. The CUDA kernel proper (launch layout, per-sequence output regions,
// NVRTC) is cuda_bridge/kernels/heatc_step.cu; this unit also instantiates the entry points
// that kernel does not use.
#include "heatc_core.h"

extern "C" __global__ void heatc_core_check(const uint8_t* tables, const uint32_t* params, uint8_t* states,
                                            const uint32_t* ids, uint32_t n, uint8_t* events, uint32_t ev_cap,
                                            uint8_t* snaps, uint32_t snap_cap, const uint32_t* tok_offsets,
                                            uint32_t n_tokens, const uint8_t* tok_bytes, uint32_t tok_total,
                                            const uint8_t* text, uint32_t text_len, uint32_t* out) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  heatc::Program g;
  g.t = tables;
  for (int k = 0; k < HEATC_N_PARAMS; k++) g.p[k] = params[k];
  heatc::whole_tables(g);
  heatc::Io io;
  io.ev = events + (uint64_t)i * ev_cap * g.p[HEATC_P_EVENT_SIZE];
  io.ev_cap = ev_cap;
  io.ev_count = 0;
  io.ev_keep = ev_cap;
  io.ev_scratch = nullptr;
  io.snap = snaps + (uint64_t)i * snap_cap * g.p[HEATC_P_SNAPSHOT_SIZE];
  io.snap_cap = snap_cap;
  io.snap_count = 0;
  io.snap_keep = snap_cap;
  io.tok_offsets = tok_offsets;
  io.n_tokens = n_tokens;
  io.tok_bytes = tok_bytes;
  io.tok_total = tok_total;
  io.status = io.bad_index = io.quiet = 0;
  uint8_t* s = states + (uint64_t)i * g.p[HEATC_P_STATE_SIZE];
  uint32_t done = heatc::step(g, io, s, i, ids[i]);
  done += heatc::snapshot(g, io, s, i);
  done += heatc::feed(g, io, s, i, text, text_len, 1);
  done += heatc::finish(g, io, s, i);
  heatc::verdicts(g, s, (uint8_t*)out + 4 * n + i * g.p[HEATC_P_N_RULES]);
  done += heatc::scan_document(g, io, s, i, text, text_len);
  heatc::reset(g, s);
  out[i] = done + io.ev_count + io.snap_count + io.status;
}
