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

// `n` tokens (ids[0..n)) for one sequence; stops at the first it refuses (an id out of range,
// a finished stream: the row's status says which, `consumed` how many went in).
HEATC_HD HEATC_CALL void step_row(const Program& g, const Tokens& tk, uint8_t* s, uint8_t* row, uint32_t ev_keep,
                                  uint32_t snap_keep, uint32_t seq, const int64_t* ids, uint32_t n,
                                  void* helpers = nullptr) {
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

// The guard's look at one candidate: `scratch` holds a copy of the sequence's state (and
// after it, room for one event record). Feeds the candidate and, with `flush`, ends the
// lexemes it leaves open as the end of the text would; REJECTED if that completed a match
// that failed (the stream's rejections grew).
HEATC_HD HEATC_CALL uint8_t guard_candidate(const Program& g, const Tokens& tk, uint8_t* scratch, int64_t id,
                                            uint32_t flush) {
  Io io = row_io(g, scratch + g.p[HEATC_P_STATE_SIZE] - HEATC_OUT_HEAD, 0, 0, tk, 1);
  uint64_t before = rejections(g, scratch);
  if (id < 0 || id >= (int64_t)tk.n || !step(g, io, scratch, 0, (uint32_t)id)) return HEATC_MASK_REFUSED;
  if (flush) flush_lexer(g, io, scratch, 0);
  return rejections(g, scratch) > before ? HEATC_MASK_REJECTED : HEATC_MASK_ALLOWED;
}

// bytes of one guard scratch slot: a state record, then one event record
HEATC_HD HEATC_INLINE uint64_t guard_slot(const Program& g) {
  return (uint64_t)g.p[HEATC_P_STATE_SIZE] + g.p[HEATC_P_EVENT_SIZE];
}

}  // namespace heatc
