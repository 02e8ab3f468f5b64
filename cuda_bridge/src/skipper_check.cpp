// skipper_check: the skipper's implementations (heatc_skipper.h) against its portable loops,
// block for block, outside Python — so that a copy for an instruction set the test machine
// cannot load into Python (NEON, under qemu) is held to the same results.
//
//   skipper_check PROGRAM TEXT
//
// PROGRAM: u32 count of parameters, the parameters (heatc_program.p order), u32 size of the
// tables, the tables (tests/test_native_skipper.py writes it from rules.hct's parts). TEXT:
// any bytes. From every offset of the text (as a token start), in a stream and a quiet one,
// each implementation this build and CPU run skips; where it stops, the stream offset and
// lexeme count it reaches and the state fields it writes must be the portable loops'. Prints
// "ok <implementations> <runs>", or the first difference and exits 1.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEATC_WITH_SKIPPER 1
#include "heatc_skipper.h"

namespace heatc {
// (the core's scan calls it; nothing here does)
uint32_t skip_plain(const Program&, const Io&, uint8_t*, const uint8_t*, uint32_t i, uint32_t, uint64_t*, uint64_t*) {
  return i;
}
}  // namespace heatc

static bool read_file(const char* path, uint8_t** data, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return false;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *data = (uint8_t*)malloc(n + 1);
  *size = n > 0 && fread(*data, 1, n, f) == (size_t)n ? (size_t)n : 0;
  fclose(f);
  return *size == (size_t)n;
}

int main(int argc, char** argv) {
  using namespace heatc;
  if (argc != 3) {
    fprintf(stderr, "usage: skipper_check PROGRAM TEXT\n");
    return 2;
  }
  uint8_t *prog_file, *text;
  size_t prog_size, text_size;
  if (!read_file(argv[1], &prog_file, &prog_size) || !read_file(argv[2], &text, &text_size)) {
    fprintf(stderr, "cannot read the inputs\n");
    return 2;
  }
  Program g;
  uint32_t n_params = ld<uint32_t>(prog_file);
  if (n_params != HEATC_N_PARAMS) {
    fprintf(stderr, "the program has %u parameters, this build reads %d\n", n_params, (int)HEATC_N_PARAMS);
    return 2;
  }
  for (uint32_t i = 0; i < n_params; i++) g.p[i] = ld<uint32_t>(prog_file + 4 + 4 * i);
  uint32_t tables = ld<uint32_t>(prog_file + 4 + 4 * n_params);
  g.t = prog_file + 8 + 4 * n_params;
  whole_tables(g);
  if (!g.p[HEATC_P_SKIP_LOG2] || 8 + 4 * (size_t)n_params + tables != prog_size) {
    fprintf(stderr, "not a program with a skipper\n");
    return 2;
  }
  // the text, with the slack a block reads past the skipper's end (as the module's memory has)
  uint8_t* in = (uint8_t*)calloc(text_size + 64, 1);
  memcpy(in, text, text_size);
  const uint32_t len = (uint32_t)text_size, ss = g.p[HEATC_P_STATE_SIZE];
  uint8_t* want_state = (uint8_t*)calloc(ss, 1);
  uint8_t* got_state = (uint8_t*)calloc(ss, 1);
  skip::SkipFn ref = skip::implementation(skip::ISA_SCALAR);
  char names[64] = "";
  uint64_t runs = 0;
  for (int isa = skip::ISA_SCALAR + 1; isa < skip::N_ISA; isa++) {
    skip::SkipFn fn = skip::implementation((skip::Isa)isa);
    if (!fn) continue;
    strcat(names, skip::ISA_NAMES[isa]);
    strcat(names, " ");
    for (int quiet = 0; quiet < 2; quiet++) {
      skip::Config c = skip::config(g, quiet);
      for (uint32_t i = 0; i + skip::BLOCK + skip::SLACK <= len; i++) {
        uint64_t want_start = 1000 + i, want_lexemes = 7, got_start = want_start, got_lexemes = want_lexemes;
        memset(want_state, 0, ss);
        memset(got_state, 0, ss);
        uint32_t want = ref(c, want_state, in, i, len, &want_start, &want_lexemes);
        uint32_t got = fn(c, got_state, in, i, len, &got_start, &got_lexemes);
        runs++;
        if (want != got || want_start != got_start || want_lexemes != got_lexemes || memcmp(want_state, got_state, ss)) {
          printf("%s differs from the portable loops from offset %u (quiet %d): stops at %u, not %u; offset %llu, not "
                 "%llu; %llu lexemes, not %llu; state %s\n",
                 skip::ISA_NAMES[isa], i, quiet, got, want, (unsigned long long)got_start,
                 (unsigned long long)want_start, (unsigned long long)got_lexemes, (unsigned long long)want_lexemes,
                 memcmp(want_state, got_state, ss) ? "differs" : "same");
          return 1;
        }
      }
    }
  }
  printf("ok %s%llu\n", names, (unsigned long long)runs);
  return 0;
}
