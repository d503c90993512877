// Status codes of CUDA and its libraries turned into errors that name the failing call:
// TJ_CUDA(cudaMalloc(...)) returns Status::Error("CUDA: cudaMalloc(...): out of memory") from
// the enclosing function (which returns Status or StatusOr) when the call fails.
#pragma once

#include <string>

#include "common/status.h"

// `describe(code)` is the library's text for a status code.
#define TJ_CHECK_LIBRARY_CALL(library, code_type, success, describe, call)                    \
  do {                                                                                        \
    const code_type code_ = (call);                                                           \
    if (code_ != (success)) {                                                                 \
      return ::tj::Status::Error(std::string(library ": ") + #call + ": " + describe(code_)); \
    }                                                                                         \
  } while (0)

#define TJ_CUDA(call) \
  TJ_CHECK_LIBRARY_CALL("CUDA", cudaError_t, cudaSuccess, cudaGetErrorString, call)
