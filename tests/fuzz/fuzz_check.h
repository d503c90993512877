// Shared by the fuzz targets: a check that stays on in Release builds (NDEBUG) and turns a
// broken invariant into a crash that libFuzzer (or the corpus replay) reports with the input.
#pragma once

#include <cstdio>
#include <cstdlib>

#define TJ_FUZZ_CHECK(cond)                                                                  \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
